"""Strategies out of tree: the ``fred.strategies`` entry points, and the example plug-in (EASGD).

The default tests make a package "installed" as pip would leave it for importlib.metadata:
a ``*.dist-info`` folder with its ``entry_points.txt`` on ``sys.path``, next to the example's
source. The slow test builds and installs a copy of ``examples/fred-easgd`` with pip, as a user
would (pip fetches setuptools for the build), into a folder of its own: the test environment is
left as it was, where an install would add EASGD to every later test session's strategies.
"""

from __future__ import annotations

import importlib
import itertools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import fred
from fred.runs import checkpoint
from fred.scenario import registry
from fred.scenario.loading import ScenarioError, validate
from fred.tools.cli import main
from tests import test_contract as contract
from tests.conftest import tiny
from tests.test_resume import Once, same_run  # (imported here: it lists the strategies as it loads)

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "fred-easgd"
PLUGIN_MODULES = (
    "fred_easgd",
    "broken_plugin",
    "asgd_again",
    "easgd_again",
    "misnamed",
    "sign_sgd",
    "exiting_plugin",
    "old_sgd",
)


def install_fake(
    site: Path, dist: str, entry_points: dict[str, str], modules: dict[str, str] | None = None
) -> None:
    """What pip leaves for importlib.metadata: ``site/<dist>-1.0.dist-info`` and the modules' sources."""
    info = site / f"{dist.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    lines = "".join(f"{name} = {value}\n" for name, value in entry_points.items())
    (info / "entry_points.txt").write_text(f"[fred.strategies]\n{lines}")
    for module, source in (modules or {}).items():
        (site / f"{module}.py").write_text(source)


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A folder on sys.path for fake installs, and a registry that has loaded no plug-in yet."""
    registry.names()  # the in-tree strategies, registered once per process
    in_tree = {
        n: s for n, s in registry._REGISTRY.items() if s.source.split(".")[0] in registry.PLUGIN_PACKAGES
    }
    monkeypatch.setattr(registry, "_REGISTRY", in_tree)
    monkeypatch.setattr(registry, "_PROBLEMS", {})
    monkeypatch.setattr(registry, "_DEFINERS", {})
    monkeypatch.setattr(registry, "_plugin_state", {"loaded": False, "staged": None})
    monkeypatch.setattr(registry, "_PLUGIN_PACKAGES", set())
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for module in [m for m in sys.modules if m.split(".")[0] in PLUGIN_MODULES]:
        del sys.modules[module]  # the next test imports (and so registers) it afresh
    importlib.invalidate_caches()


@pytest.fixture
def easgd_installed(site: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    install_fake(site, "fred-easgd", {"easgd": "fred_easgd"})
    monkeypatch.syspath_prepend(str(EXAMPLE / "src"))
    return site


def easgd_scenario() -> dict:
    return contract.contract_scenario("easgd") | {"strategy": {"name": "easgd", "lr": 0.1, "tau": 2}}


def test_fred_list_shows_an_installed_plugin_with_its_distribution(easgd_installed, capsys):
    assert main(["list"]) == 0
    out, err = capsys.readouterr()
    [line] = [row for row in out.splitlines() if row.startswith("easgd ")]
    assert (
        "Elastic Averaging SGD" in line
        and "[fred-easgd 1.0 (entry point fred.strategies: easgd = fred_easgd)]" in line
    )
    assert "asgd " in out and err == ""


def test_a_scenario_names_a_plugin_and_its_hyper_parameters_are_checked(easgd_installed):
    assert validate(tiny(strategy={"name": "easgd", "tau": 3})).strategy.tau == 3
    with pytest.raises(ScenarioError, match=r"alpha = lr \* rho = 2 must be below 1; use rho < 10"):
        validate(tiny(strategy={"name": "easgd", "rho": 20.0}))


def test_easgd_keeps_the_strategy_contract(easgd_installed):
    twice = ("easgd", fred.run(easgd_scenario()), fred.run(easgd_scenario()))
    contract.test_every_strategy_runs_to_its_stop_condition(twice)
    contract.test_every_strategy_is_deterministic(twice)
    contract.test_every_strategy_leaves_complete_consistent_records(twice)
    contract.test_every_strategy_says_how_many_gradient_steps_its_updates_take(twice)
    again = subprocess.run(
        [
            sys.executable,
            "-c",
            "import json, fred; from tests.test_contract import fingerprint; "
            f"print(json.dumps(fingerprint(fred.run({easgd_scenario()!r}))))",
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(easgd_installed), str(EXAMPLE / "src"), str(ROOT)]),
        },
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads(again.stdout.splitlines()[-1]) == json.loads(json.dumps(contract.fingerprint(twice[1])))


def test_easgd_pulls_every_worker_toward_the_center_it_evaluates(easgd_installed):
    # tau = 1 and alpha = 0.9 / 4: every step moves the center; an exchange-free EASGD would
    # leave the evaluated center at the initial parameters and the loss where it started.
    result = fred.run(
        tiny(
            strategy={"name": "easgd", "lr": 0.1, "tau": 1},
            stop={"max_updates": 200},
            eval={"every_updates": 50},
        )
    )
    loss = result.metrics["eval_loss"]
    assert loss.iloc[-1] < 0.8 * loss.iloc[0]
    assert result.updates["staleness"].max() >= 1  # the exchanges interleave: asynchronous, not in lock-step


def test_a_run_names_the_distribution_and_version_that_provided_its_strategy(easgd_installed, tmp_path):
    from fred.tools.replay import replay

    made = fred.run(easgd_scenario(), out=tmp_path / "run").summary
    assert (made["strategy_distribution"], made["strategy_version"]) == ("fred-easgd", "1.0")
    own = fred.run(tiny(stop={"max_updates": 2})).summary
    assert (own["strategy_distribution"], own["strategy_version"]) == ("fred", fred.__version__)
    assert replay(tmp_path / "run").notes == []
    # a run made with another version of the plug-in: the replay says so
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    (tmp_path / "run" / "summary.json").write_text(json.dumps({**summary, "strategy_version": "0.9"}))
    assert replay(tmp_path / "run").notes == [
        "the run's strategy came from fred-easgd 0.9 and this is fred-easgd 1.0: its recorded functions may "
        "compute differently"
    ]


def test_a_plugin_imported_before_the_registry_looks_is_still_its_distributions(easgd_installed):
    import fred_easgd  # noqa: F401 - registers easgd at once, as an in-tree module would

    assert registry.get("easgd").source == "fred-easgd 1.0 (entry point fred.strategies: easgd = fred_easgd)"
    assert registry.problems() == []


def test_a_plugin_that_fails_to_import_is_one_line_and_leaves_the_others(site, capsys):
    install_fake(
        site,
        "broken-plugin",
        {"broken": "broken_plugin"},
        {"broken_plugin": "raise RuntimeError('half written')\n"},
    )
    assert main(["list"]) == 0
    out, err = capsys.readouterr()
    assert "asgd " in out and "broken" not in out
    assert err == (
        "fred list: strategy plug-in broken-plugin 1.0 (entry point fred.strategies: broken = broken_plugin) "
        "failed to import (RuntimeError: half written); fix it or uninstall broken-plugin\n"
    )
    with pytest.raises(
        ScenarioError, match=r"strategy: .*broken = broken_plugin\) failed to import \(RuntimeError"
    ):
        validate(tiny(strategy={"name": "broken"}))
    assert validate(tiny(strategy={"name": "asgd"})).strategy.name == "asgd"


CONFIG = """
from typing import Literal
from fred.scenario.registry import register
from fred.scenario.schema import StrategyConfig

class Again(StrategyConfig):
    name: Literal[{name!r}] = {name!r}

@register(Again)
def start(sim, config):
    return lambda: sim.init_params
"""


def test_a_plugin_taking_an_in_tree_name_is_refused_naming_both(site):
    install_fake(site, "asgd-again", {"asgd": "asgd_again"}, {"asgd_again": CONFIG.format(name="asgd")})
    [problem] = registry.problems()
    assert problem.startswith(
        "strategy 'asgd' is defined 2 times, by strategies.asgd and by asgd-again 1.0 "
        "(entry point fred.strategies: asgd = asgd_again); uninstall all but one"
    )
    assert "asgd" not in registry.names() and "sasgd" in registry.names()
    with pytest.raises(
        ScenarioError, match="strategy 'asgd' is defined 2 times, by strategies.asgd and by asgd-again"
    ):
        validate(tiny(strategy={"name": "asgd"}))


def test_two_plugins_of_one_name_are_both_refused(easgd_installed):
    install_fake(
        easgd_installed, "easgd-again", {"easgd": "easgd_again"}, {"easgd_again": CONFIG.format(name="easgd")}
    )
    with pytest.raises(ValueError) as refused:
        registry.get("easgd")
    message = str(refused.value)
    # The entry points load in (name, module, distribution) order, never in the order of sys.path.
    assert message.startswith(
        "strategy 'easgd' is defined 2 times, by easgd-again 1.0 (entry point fred.strategies: "
        "easgd = easgd_again) and by fred-easgd 1.0 (entry point fred.strategies: easgd = fred_easgd)"
    )


def test_an_entry_point_named_unlike_its_strategy_is_named(site):
    install_fake(site, "misnamed", {"elastic": "misnamed"}, {"misnamed": CONFIG.format(name="elastic_sgd")})
    assert registry.problems() == [
        "strategy plug-in misnamed 1.0 (entry point fred.strategies: elastic = misnamed) registered no "
        "strategy "
        "'elastic' (it registered 'elastic_sgd'); name the entry point as its strategy config's name"
    ]
    assert "elastic_sgd" in registry.names()


SIGN_SGD = '''
"""signSGD with momentum on one worker: its step is the plug-in's own recorded function."""

import functools
from typing import Any, Literal, NamedTuple

import jax
import jax.numpy as jnp
from pydantic import Field

from fred.numerics.tape import op
from fred.scenario.registry import register
from fred.scenario.schema import GradientSteps, StrategyConfig


class SignSGD(StrategyConfig):
    name: Literal["signsgd"] = "signsgd"
    lr: float = Field(default=0.01, gt=0)

    def gradient_steps(self, scenario, updates):
        return GradientSteps(updates)  # one worker's gradient an update


class State(NamedTuple):  # on the tape as "sign_sgd:State": replay builds it again
    params: Any
    velocity: Any


@functools.cache
def step(lr: float):
    @op("sign_sgd:step", (lr,))
    @jax.jit
    def one(state, grad, count):
        velocity = jax.tree.map(lambda v, g: 0.9 * v + g / count, state.velocity, grad)
        return State(jax.tree.map(lambda p, v: p - lr * jnp.sign(v), state.params, velocity), velocity)

    return one


@register(SignSGD)
def start(sim, config):
    one, now = step(config.lr), {}
    now["state"] = State(sim.init_params, jax.tree.map(jnp.zeros_like, sim.init_params))

    def worker(w):
        version = 0
        while True:
            g = yield from sim.compute(w, now["state"].params)
            now["state"] = one(now["state"], g.grad, g.count)
            sim.applied([(w.index, version)], version)
            version += 1

    sim.process(worker(sim.workers[0]))
    return lambda: now["state"].params
'''


def test_a_plugins_own_recorded_functions_run_replay_and_resume(site, tmp_path):
    from fred.numerics import tape
    from fred.runs.runner import execute
    from fred.tools.replay import replay

    install_fake(site, "sign-sgd", {"signsgd": "sign_sgd"}, {"sign_sgd": SIGN_SGD})
    data = tiny(strategy={"name": "signsgd"}, cluster={"workers": 1}, stop={"max_updates": 30})
    made = fred.run(data, out=tmp_path / "run")
    recorded = tape.parse(*tape.read(tmp_path / "run" / "tape.npz")[:2])
    assert sum(call.name == "sign_sgd:step" for call in recorded.calls) == 30
    report = replay(tmp_path / "run")  # imports sign_sgd by the name on the tape, and its State too
    assert report.passed and report.leaves["equal"].all()
    # a checkpoint halfway: the resumed run fast-forwards through the plug-in's calls, then computes
    scenario = validate(data)
    (tmp_path / "ckpt").mkdir()
    execute(
        scenario,
        checkpointer=Once(tmp_path / "ckpt", 20, scenario.digest(), clock=itertools.count().__next__),
    )
    saved = checkpoint.load(tmp_path / "ckpt")
    assert saved.steps == 20 and saved.values
    same_run(execute(scenario, resume=saved), made)
    # a module that is neither fred's nor an installed plug-in's is still never imported
    with pytest.raises(
        ValueError, match="'json:dumps', outside fred, strategies and the installed strategy plug-ins"
    ):
        tape.resolve("json:dumps")


@pytest.mark.slow
def test_the_example_installs_with_pip_and_runs_from_the_command_line(tmp_path):
    target, source = tmp_path / "site", tmp_path / "fred-easgd"
    shutil.copytree(
        EXAMPLE, source, ignore=shutil.ignore_patterns("build", "*.egg-info")
    )  # setuptools builds in the tree
    pip = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--quiet",
            "--target",
            str(target),
            str(source),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert pip.returncode == 0, pip.stderr[-3000:]
    env = {**os.environ, "PYTHONPATH": str(target)}  # the installed copy, not the example's source
    fred_cli = [sys.executable, "-c", "from fred.tools.cli import entry; entry()"]
    listed = subprocess.run(
        [*fred_cli, "list"], capture_output=True, text=True, check=False, env=env, cwd=tmp_path
    )
    assert "[fred-easgd 0.1.0 (entry point fred.strategies: easgd = fred_easgd)]" in listed.stdout, (
        listed.stderr
    )
    digests = []
    for out in ("a", "b"):
        ran = subprocess.run(
            [
                *fred_cli,
                "run",
                str(EXAMPLE / "easgd.yaml"),
                "--set",
                "stop.max_updates=40",
                "--out",
                str(tmp_path / out),
                "--quiet",
            ],
            capture_output=True,
            text=True,
            check=False,
            env=env,
            cwd=tmp_path,
        )
        assert ran.returncode == 0, ran.stderr[-3000:]
        digests.append(json.loads((tmp_path / out / "summary.json").read_text())["params_sha256"])
    assert digests[0] == digests[1]


def test_a_plugin_that_calls_sys_exit_as_it_imports_is_one_line_and_leaves_the_others(site, capsys):
    # The registry caught Exception only: the plug-in's SystemExit(0) ended every command with status 0.
    install_fake(
        site, "exiting-plugin", {"exiting": "exiting_plugin"}, {"exiting_plugin": "import sys\nsys.exit(0)\n"}
    )
    assert main(["list"]) == 0
    out, err = capsys.readouterr()
    assert "asgd " in out and "exiting" not in out
    assert err == (
        "fred list: strategy plug-in exiting-plugin 1.0 (entry point fred.strategies: exiting "
        "= exiting_plugin) failed to import (SystemExit: it called sys.exit(0) as it imported); "
        "fix it or uninstall exiting-plugin\n"
    )
    refusal = r"strategy: .*exiting = exiting_plugin\) failed to import \(SystemExit"
    with pytest.raises(ScenarioError, match=refusal):
        validate(tiny(strategy={"name": "exiting"}))
    assert fred.run(tiny(stop={"max_updates": 2})).summary["status"] == "completed"


OLD_STYLE = '''
"""One worker's plain SGD, written to strategy contract 1.0: no gradient_steps, no strategy_api."""

from typing import Literal

import jax.numpy as jnp
from pydantic import Field

from fred.scenario.registry import register
from fred.scenario.schema import StrategyConfig
from strategies.sasgd import scaled_sum


class OldSGD(StrategyConfig):
    name: Literal["old_sgd"] = "old_sgd"
    lr: float = Field(default=0.1, gt=0){api}


@register(OldSGD)
def start(sim, config):
    now = {{"params": sim.init_params}}

    def worker(w):
        version = 0
        while True:
            g = yield from sim.compute(w, now["params"])
            scales = jnp.asarray([1.0, -config.lr / g.count], jnp.float32)
            now["params"] = scaled_sum([now["params"], g.grad], scales)
            sim.applied([(w.index, version)], version)
            version += 1

    sim.process(worker(sim.workers[0]))
    return lambda: now["params"]
'''


def install_old_sgd(site: Path, api: str = "") -> None:
    """A plug-in of contract 1.0 (``api``: a ``strategy_api`` line its config states)."""
    install_fake(site, "old-sgd", {"old_sgd": "old_sgd"}, {"old_sgd": OLD_STYLE.format(api=api)})


def test_a_plugin_of_contract_1_0_without_gradient_steps_runs_with_a_deprecation_warning(site):
    install_old_sgd(site)
    data = tiny(strategy={"name": "old_sgd"}, cluster={"workers": 1}, stop={"max_updates": 6})
    warned = (
        r"strategy 'old_sgd' \(old_sgd\) does not say how many gradient steps its updates take; fred "
        r"counts one an update\. Define gradient_steps"
    )
    with pytest.warns(DeprecationWarning, match=warned):
        scenario = validate(data)
    with pytest.warns(DeprecationWarning):
        assert scenario.strategy.gradient_steps(scenario, 6).steps == 6  # ASGD's count: one an update
        assert fred.run(data).summary["updates"] == 6


def test_a_plugin_stating_contract_1_1_must_say_its_gradient_steps(site):
    install_old_sgd(site, '\n    strategy_api = "1.1"')
    refusal = (
        r"strategy 'old_sgd' does not say how many gradient steps its updates take: its config needs "
        r"a gradient_steps\(scenario, updates\) method, which strategy_api 1.1 requires"
    )
    with pytest.raises(ScenarioError, match=refusal):
        validate(tiny(strategy={"name": "old_sgd"}, cluster={"workers": 1}))


@pytest.mark.parametrize(
    ("declared", "problem"),
    [
        (
            "1.9",
            "is written for strategy API 1.9, newer than this fred's 1.1 (fred 0.2.0): upgrade fred, or "
            "install a version of old-sgd written for strategy API 1.1 or older",
        ),
        ("2.0", "is written for strategy API 2.0, newer than this fred's 1.1"),
        (
            "0.9",
            "is written for strategy API 0.9, which this fred 0.2.0 no longer implements (it implements "
            "1.1): upgrade old-sgd",
        ),
        ("one", "states strategy_api 'one'; give the contract version it is written for as \"MAJOR.MINOR\""),
    ],
)
def test_a_plugin_written_for_a_contract_this_fred_does_not_implement_is_one_line(site, declared, problem):
    install_old_sgd(site, f"\n    strategy_api = {declared!r}")
    source = "strategy plug-in old-sgd 1.0 (entry point fred.strategies: old_sgd = old_sgd) "
    [said] = registry.problems()
    assert said.startswith(source + problem), said
    assert "old_sgd" not in registry.names() and "asgd" in registry.names()
    with pytest.raises(ScenarioError, match="strategy: " + source.replace("(", r"\(").replace(")", r"\)")):
        validate(tiny(strategy={"name": "old_sgd"}))


def test_fred_states_its_version_and_its_strategy_contract():
    import tomllib

    assert fred.strategy_api == "1.1" and registry.api_version(fred.strategy_api) == (1, 1)
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert pyproject["project"]["version"] == fred.__version__
    assert f"## {fred.__version__} " in (ROOT / "CHANGELOG.md").read_text()
