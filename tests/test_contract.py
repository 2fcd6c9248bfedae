"""One contract over every registered strategy: it runs, it is deterministic, its records are whole.

A new strategy module is picked up here automatically; what the tests must know of
it beyond its registration (one worker only, ...) is in ``tests/conftest.py``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import fred
import strategies
from fred.runs.records import EVENT_COLUMNS, METRIC_COLUMNS, UPDATE_COLUMNS
from fred.runs.runner import WALL_CLOCK_KEYS
from fred.scenario import registry
from fred.scenario.loading import merge
from fred.scenario.schema import GradientSteps, StrategyConfig
from tests.conftest import cluster_for, tiny


def contract_scenario(name: str) -> dict:
    return tiny(
        strategy={"name": name},
        cluster=cluster_for(name) | {"jitter": {"kind": "lognormal", "sigma": 0.2}},
        stop={"max_updates": 10, "max_sim_time_s": 60.0},  # a strategy that stops updating fails, not hangs
        eval={"every_updates": 3},
    )


def fingerprint(result: fred.RunResult) -> dict:
    """What must be the same in any process: the summary but its wall time, and every table."""
    tables = {
        t: hashlib.sha256(getattr(result, t).to_csv().encode()).hexdigest()
        for t in ("events", "updates", "metrics")
    }
    return {**{k: v for k, v in result.summary.items() if k not in WALL_CLOCK_KEYS}, **tables}


ANOTHER_PROCESS = """
import json, sys
import fred
from tests.test_contract import contract_scenario, fingerprint
import strategies
from fred.scenario import registry
print(json.dumps({name: fingerprint(fred.run(contract_scenario(name))) for name in registry.names()}))
"""


@pytest.fixture(scope="module")
def in_another_process() -> dict:
    """Every strategy's contract run, made in a fresh interpreter with another string-hash seed."""
    env = {**os.environ, "PYTHONHASHSEED": str(1 + int(os.environ.get("PYTHONHASHSEED", "0") or 0) % 1000)}
    done = subprocess.run(
        [sys.executable, "-c", ANOTHER_PROCESS],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


@pytest.fixture(scope="module", params=registry.names())
def twice(request):
    data = contract_scenario(request.param)
    return request.param, fred.run(data), fred.run(data)


def test_every_strategy_runs_to_its_stop_condition(twice):
    name, result, _ = twice
    assert result.summary["status"] == "completed"
    assert result.summary["stop_reason"] == "max_updates"
    assert result.summary["updates"] == 10
    assert result.summary["strategy"] == name


def test_every_strategy_is_deterministic(twice):
    _, first, second = twice
    assert first.summary["params_sha256"] == second.summary["params_sha256"]
    for table in ("events", "updates", "metrics"):
        pd.testing.assert_frame_equal(getattr(first, table), getattr(second, table))


# 5 s on 2 cores: every strategy again in a fresh process (tests/test_determinism.py checks one in the
# default run)
@pytest.mark.slow
def test_every_strategy_gives_the_same_bits_in_another_process(twice, in_another_process):
    # Iterating a set of names, or anything keyed on id() or hash(), passes the test above
    # and fails this one.
    name, first, _ = twice
    assert in_another_process[name] == json.loads(json.dumps(fingerprint(first)))


def test_every_strategy_leaves_complete_consistent_records(twice):
    _, result, _ = twice
    assert list(result.events.columns) == EVENT_COLUMNS
    assert list(result.updates.columns) == UPDATE_COLUMNS
    assert list(result.metrics.columns) == METRIC_COLUMNS
    updates, events, metrics = result.updates, result.events, result.metrics
    assert updates["update"].nunique() == result.summary["updates"] == updates["update"].max()
    assert (updates["staleness"] >= 0).all()
    assert (updates["staleness"] == updates["version_applied"] - updates["version_read"]).all()
    assert updates["sim_time_s"].is_monotonic_increasing
    assert (events["end_s"] >= events["start_s"]).all()
    assert events["end_s"].max() <= result.summary["sim_time_s"] + 1e-12
    assert (events["kind"] == "compute").sum() >= result.summary["updates"]
    assert metrics["updates"].iloc[0] == 0 and metrics["updates"].iloc[-1] == result.summary["updates"]
    assert metrics["sim_time_s"].is_monotonic_increasing
    traffic = events[
        events["kind"].isin(["send", "push", "fetch", "allreduce", "allgather", "reduce_scatter"])
    ]
    assert traffic["bytes"].sum() == result.summary["bytes_sent"]
    assert set(updates["worker"]) <= set(range(result.summary["workers"]))


def steps_agree(result: fred.RunResult) -> None:
    """The gradient steps the strategy says its updates take (what bounds a run's work, and the
    shortest time its updates can last) are what it computed for them, within a factor of 2 and
    a step of each worker (in flight at the stop, or not yet made by a worker the jitter slowed)."""
    scenario, n = result.scenario, result.summary["workers"]
    declared = scenario.strategy.gradient_steps(scenario, result.summary["updates"]).steps
    made = int(
        result.events["kind"].isin(["compute", "probe"]).sum()
    )  # a grouped-hybrid probe's steps are timed alike
    assert made / 2 - n <= declared <= 2 * made + n, (declared, made)


def test_every_strategy_says_how_many_gradient_steps_its_updates_take(twice):
    name, result, _ = twice
    assert type(result.scenario.strategy).gradient_steps is not StrategyConfig.gradient_steps, (
        f"{name} answers gradient_steps only with StrategyConfig's refusal"
    )
    steps_agree(result)


# settings that make an update take many gradient steps, declared through the strategy's config
MANY_STEPS = {
    "local_sgd": {"strategy": {"sync_every": 6}},
    "diloco": {"strategy": {"inner_steps": 12, "replica_workers": 2}},
    "pipe_sgd": {"strategy": {"staleness": 20}},
    "sasgd": {"strategy": {"n_soft": 1}},
    "grouped_hybrid": {"strategy": {"probe_iterations": 30, "group_size": 2}},
    "hpsgd": {"workload": {"param_bytes": 25_000_000}},  # a 30 ms all-reduce: Pt steps three times in one
}


@pytest.mark.parametrize("name", MANY_STEPS)
def test_settings_that_make_an_update_take_many_steps_are_counted(name):
    steps_agree(fred.run(merge(contract_scenario(name), MANY_STEPS[name])))


def test_a_strategy_that_does_not_say_its_steps_is_refused_naming_the_method(monkeypatch):
    from typing import Literal

    from fred.scenario.loading import ScenarioError, validate

    class Silent(StrategyConfig):
        name: Literal["silent"] = "silent"

    monkeypatch.setitem(
        registry._REGISTRY, "silent", registry.get("asgd")._replace(name="silent", config=Silent)
    )
    with pytest.raises(
        ScenarioError,
        match=r"strategy 'silent' does not say how many gradient steps its updates take: "
        r"its config needs a gradient_steps\(scenario, updates\) method",
    ):
        validate(tiny(strategy={"name": "silent"}))


def test_a_second_strategy_of_the_same_name_is_refused_naming_both_modules():
    config = registry.config_class("asgd")
    with pytest.raises(
        ValueError, match=r"'asgd' is registered twice, by strategies.asgd and by (tests.)?test_contract;"
    ):
        registry.register(config)(lambda sim, cfg: None)


def test_a_strategy_module_that_fails_to_import_is_named(tmp_path):
    # Every command imports every strategy; a traceback from inside validation named none.
    package = tmp_path / "strategies"
    package.mkdir()
    shutil.copy(Path(strategies.__file__), package / "__init__.py")
    (package / "half_written.py").write_text("raise RuntimeError('not finished')\n")
    done = subprocess.run(
        [sys.executable, "-c", "import strategies"],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        cwd=tmp_path,
    )
    assert "strategies/half_written.py failed to import (RuntimeError: not finished)" in done.stderr
    assert "rename it _half_written.py" in done.stderr


def test_a_strategy_without_lr_gets_the_tiny_scenario_without_it(monkeypatch):
    # The tiny scenario's lr went to every strategy, and one without it was refused ("unknown key").
    from typing import Literal

    from fred.scenario.loading import validate
    from fred.scenario.schema import StrategyConfig

    class NoLr(StrategyConfig):
        name: Literal["no_lr"] = "no_lr"
        inner_lr: float = 0.1

        def gradient_steps(self, scenario, updates):
            return GradientSteps(updates)

    monkeypatch.setitem(registry._REGISTRY, "no_lr", registry.get("asgd")._replace(name="no_lr", config=NoLr))
    assert validate(tiny(strategy={"name": "no_lr"})).strategy == NoLr()
    assert "lr" in tiny(strategy={"name": "asgd"})["strategy"]
