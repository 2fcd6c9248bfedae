"""Models from user code (model.kind: python): Flax linen and NNX, Equinox, and pure function pairs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import numpy as np
import pytest
import yaml

import fred
from fred.models.python import PythonModel
from fred.numerics import rng, user_code
from fred.numerics.data import load_dataset
from fred.numerics.gradients import Numerics
from fred.numerics.models import build_model, param_count
from fred.runs.memory import check_fits, data_shape, estimate
from fred.runs.work import check_evaluations
from fred.scenario.loading import validate
from fred.scenario.schema import DataConfig
from fred.tools.cli import main
from fred.tools.replay import replay
from tests.conftest import tiny

MODULE = "fred_test_user_models"
SOURCE = textwrap.dedent("""
    import math

    import equinox as eqx
    import flax.linen as nn
    import jax
    import jax.numpy as jnp
    from flax import nnx


    class LinenCNN(nn.Module):
        classes: int

        @nn.compact
        def __call__(self, x):
            x = nn.relu(nn.Conv(4, (3, 3))(x))
            return nn.Dense(self.classes)(x.reshape(x.shape[0], -1))


    def linen_cnn(outputs):
        return LinenCNN(outputs)


    class NNXMLP(nnx.Module):
        def __init__(self, features, hidden, outputs, rngs):
            self.hidden = nnx.Linear(features, hidden, rngs=rngs)
            self.out = nnx.Linear(hidden, outputs, rngs=rngs)

        def __call__(self, x):
            return self.out(nnx.relu(self.hidden(x.reshape(x.shape[0], -1))))


    def nnx_mlp(rngs, feature_shape, outputs, hidden=16):
        return NNXMLP(math.prod(feature_shape), hidden, outputs, rngs)


    def eqx_mlp(key, feature_shape, outputs):
        mlp = eqx.nn.MLP(math.prod(feature_shape), outputs, 16, 1, key=key)
        return eqx.nn.Sequential([eqx.nn.Lambda(jnp.ravel), mlp])


    def functions(outputs, hidden=16):
        def init(key):
            k1, k2 = jax.random.split(key)
            return {"w1": jax.random.normal(k1, (64, hidden)) * 0.1, "b1": jnp.zeros(hidden),
                    "w2": jax.random.normal(k2, (hidden, outputs)) * 0.1, "b2": jnp.zeros(outputs)}

        def apply(params, x):
            h = jax.nn.relu(x.reshape(x.shape[0], -1) @ params["w1"] + params["b1"])
            return h @ params["w2"] + params["b2"]

        return init, apply


    def batch_centred():
        init, apply = functions(10)
        return init, lambda params, x: apply(params, x - x.mean(axis=0))


    def linen_batchnorm():
        class Net(nn.Module):
            @nn.compact
            def __call__(self, x):
                x = nn.BatchNorm(use_running_average=False)(x.reshape(x.shape[0], -1))
                return nn.Dense(10)(x)
        return Net()


    def double_cross_entropy(outputs, label):
        return -2.0 * jax.nn.log_softmax(outputs)[label]


    def integer_params():
        init, apply = functions(10)
        return (lambda key: {**init(key), "step": jnp.zeros((), jnp.int32)}), apply


    def broken():
        raise RuntimeError("the factory's own failure")


    def exits():
        import sys
        sys.exit(0)


    def interrupted():
        raise KeyboardInterrupt


    NOT_CALLABLE = 3


    def returns_a_number():
        return 5


    def seven_outputs():
        return LinenCNN(7)
""")
STYLES = {
    "flax.linen": {"factory": f"{MODULE}:linen_cnn"},
    "flax.nnx": {"factory": f"{MODULE}:nnx_mlp", "args": {"hidden": 8}},
    "equinox": {"factory": f"{MODULE}:eqx_mlp"},
    "functions": {"factory": f"{MODULE}:functions"},
}


@pytest.fixture(scope="module")
def module_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("user_code")
    (folder / f"{MODULE}.py").write_text(SOURCE)
    sys.path.insert(0, str(folder))
    yield folder
    sys.path.remove(str(folder))
    sys.modules.pop(MODULE, None)


def scenario(model: dict, **overrides) -> dict:
    data = tiny(**overrides)
    data["model"] = {"kind": "python", **model}
    return data


SHORT_SSGD = {"strategy": {"name": "ssgd"}, "stop": {"max_updates": 6}}


class StyleRuns(dict):
    """Each style's run, made when a test first asks for it: the default run trains the plain
    functions only (importing Flax and Equinox and compiling their models takes 8 s on 2 cores)."""

    def __missing__(self, style: str) -> fred.RunResult:
        self[style] = fred.run(scenario(STYLES[style], **SHORT_SSGD))
        return self[style]


@pytest.fixture(scope="module")
def style_runs(module_dir) -> StyleRuns:
    return StyleRuns()


@pytest.mark.parametrize(
    "style", [pytest.param(s, marks=() if s == "functions" else (pytest.mark.slow,)) for s in STYLES]
)
def test_each_style_trains_on_digits_over_named_float32_parameters(style, style_runs):
    result = style_runs[style]
    assert result.summary["status"] == "completed"
    assert np.isfinite(result.summary["final_eval_loss"])
    names = sorted(result.params)
    expected = {
        "flax.linen": "Conv_0.kernel",
        "flax.nnx": "hidden.kernel",
        "equinox": "layers.1.layers.0.weight",
        "functions": "w1",
    }[style]
    assert expected in names, names
    assert all(np.asarray(v).dtype == np.float32 for v in result.params.values())


@pytest.mark.slow  # 5 s on 2 cores: a fresh process; tests/test_contract.py checks every strategy in one
def test_each_style_gives_the_same_bits_in_a_fresh_process(style_runs, module_dir, tmp_path):
    files = []
    for style, model in STYLES.items():
        path = module_dir / f"{style}.yaml"
        path.write_text(yaml.safe_dump(scenario(model, **SHORT_SSGD)))
        files.append(str(path))
    script = (
        "import json, sys, fred; "
        "print(json.dumps([fred.run(f).summary['params_sha256'] for f in sys.argv[1:]]))"
    )
    # The module is found in the scenario's folder, as a user's would be, from any working directory;
    # the process runs this checkout's fred.
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    out = subprocess.run(
        [sys.executable, "-c", script, *files],
        cwd=tmp_path,
        check=True,
        capture_output=True,
        text=True,
        env=env,
    )
    there = json.loads(out.stdout.strip().splitlines()[-1])
    assert there == [style_runs[style].summary["params_sha256"] for style in STYLES]


@pytest.mark.parametrize("style", [pytest.param("flax.linen", marks=pytest.mark.slow), "equinox"])
def test_the_exact_reduction_makes_two_workers_of_batch_4_one_of_batch_8(style, module_dir):
    def sha(workers: int, batch: int, name: str) -> str:
        data = scenario(
            STYLES[style],
            cluster={"workers": workers},
            data={"batch_size": batch},
            strategy={"name": name, "exact_tile": 4},
            stop={"max_updates": 4},
            eval={"every_updates": 1000},
        )
        return fred.run(data).summary["params_sha256"]

    assert sha(2, 4, "ssgd") == sha(1, 8, "sgd")


def test_a_model_whose_examples_share_their_batch_is_refused_exact_and_runs_fast(
    module_dir, tmp_path, capsys
):
    model = {"factory": f"{MODULE}:batch_centred"}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(scenario(model)))
    assert main(["run", str(path), "--out", str(tmp_path / "run"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "depend on the other examples in its batch" in err and "strategy.reduction: fast" in err
    assert not (tmp_path / "run").exists()
    fast = fred.run(scenario(model, strategy={"reduction": "fast"}, stop={"max_updates": 4}))
    assert fast.summary["status"] == "completed"


@pytest.mark.parametrize(
    ("factory", "args", "needle"),
    [
        ("no_such_module_here:make", {}, "cannot import 'no_such_module_here'"),
        (f"{MODULE}:nope", {}, f"'{MODULE}' has no 'nope'; it has: "),
        (f"{MODULE}:NOT_CALLABLE", {}, "is a builtins.int, not a function"),
        (f"{MODULE}:returns_a_number", {}, "returned a builtins.int; it must return a Flax module"),
        (
            f"{MODULE}:seven_outputs",
            {},
            "outputs of shape (4, 7) for 4 examples; this data set needs (4, 10)",
        ),
        (
            f"{MODULE}:functions",
            {"width": 3},
            "model.args: fred_test_user_models:functions rejected the arguments",
        ),
        (f"{MODULE}:broken", {}, "raised RuntimeError: the factory's own failure"),
        (
            f"{MODULE}:exits",
            {},
            f"model.factory: {MODULE}:exits raised SystemExit: 0",
        ),  # exit 0, no word, before
        (f"{MODULE}:integer_params", {}, "parameter 'step' is int32; fred trains float32 arrays only"),
        (f"{MODULE}:linen_batchnorm", {}, "keeps collections ['batch_stats'] besides 'params'"),
    ],
)
def test_a_factory_that_cannot_serve_is_exit_2_with_the_fix_and_nothing_written(
    factory, args, needle, module_dir, tmp_path, capsys
):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(scenario({"factory": factory, "args": args})))
    assert main(["run", str(path), "--out", str(tmp_path / "run"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert needle in err and "model." in err and "Traceback" not in err
    assert not (tmp_path / "run").exists()


def test_ctrl_c_in_the_users_code_stops_fred(module_dir):
    cfg = PythonModel(factory=f"{MODULE}:interrupted")
    with pytest.raises(KeyboardInterrupt):
        user_code.call_factory(cfg, user_code.checked_factory(cfg), jax.random.PRNGKey(0), (8, 8, 1), 10)


def test_the_checks_before_a_run_trace_a_python_model_once(module_dir, monkeypatch):
    traced = []
    sizes = user_code.sizes
    monkeypatch.setattr(user_code, "sizes", lambda *args: traced.append(args) or sizes(*args))
    linen = validate(scenario({**STYLES["functions"], "args": {"hidden": 11}}))
    shape = data_shape(linen)
    check_fits(linen)
    check_evaluations(linen)
    assert estimate(linen, shape).params == linen.model.param_count(shape.feature_shape, shape.outputs) > 0
    assert len(traced) == 1


def test_a_factory_path_without_a_function_is_refused_by_the_scenario(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(scenario({"factory": "mymodels.make"})))
    assert main(["run", str(path), "--quiet"]) == 2
    assert "model.factory: got 'mymodels.make'; give 'package.module:function'" in capsys.readouterr().err


def test_a_loss_by_name_or_by_import_path(module_dir):
    dataset = load_dataset(DataConfig(), rng.stream(0, "data", "load"))

    def evaluate(loss: str | None) -> float:
        model = build_model(PythonModel(factory=f"{MODULE}:functions", loss=loss), dataset.feature_shape, 10)
        params = model.init(jax.random.PRNGKey(0))
        return Numerics(model, "classification", "exact").evaluate(params, dataset.x_eval, dataset.y_eval)[0]

    default, named = evaluate(None), evaluate("cross_entropy")
    assert named == pytest.approx(default, rel=1e-6)
    assert evaluate(f"{MODULE}:double_cross_entropy") == pytest.approx(2 * default, rel=1e-6)
    assert evaluate("mse") != pytest.approx(default)  # squared error against the one-hot label


def test_cross_entropy_on_regression_targets_is_refused(module_dir):
    data = scenario(
        {"factory": f"{MODULE}:functions", "loss": "cross_entropy"},
        data={"source": {"kind": "synthetic", "task": "regression", "features": 64}},
    )
    with pytest.raises(ValueError, match="cross_entropy needs class labels"):
        fred.run(data)


@pytest.mark.slow  # 4 s on 2 cores (tests/test_replay.py replays built-in models in the default run)
def test_a_python_model_run_replays_bit_for_bit(module_dir, tmp_path):
    fred.run(scenario(STYLES["flax.linen"], stop={"max_updates": 6}), out=tmp_path / "run")
    assert replay(tmp_path / "run").passed


def test_the_memory_estimate_sizes_a_python_model_without_building_it(module_dir, monkeypatch):
    for style, model in STYLES.items():
        cfg = PythonModel(**model)
        built = build_model(cfg, (8, 8, 1), 10)
        count, width = cfg.probe((8, 8, 1), 10)
        assert count == param_count(built.init(jax.random.PRNGKey(0))), style
        assert width == built.width >= 64, style  # at least one example's 8 x 8 pixels
    linen = validate(scenario(STYLES["flax.linen"]))
    assert linen.model.probe((8, 8, 1), 10).width == 8 * 8 * 4  # the convolution's output, per example
    parts = [what for what, _ in estimate(linen, data_shape(linen)).parts]
    assert parts[-1] == "evaluation"
    monkeypatch.setenv("FRED_MEMORY_LIMIT_GB", "1e-6")
    with pytest.raises(ValueError, match="out of memory: this run would hold about"):
        check_fits(linen)


def test_no_user_code_refuses_run_and_sweep_before_anything_runs(module_dir, tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(scenario(STYLES["functions"])))
    assert main(["run", str(path), "--out", str(tmp_path / "run"), "--no-user-code"]) == 2
    assert (
        "model.factory 'fred_test_user_models:functions' would be imported and run" in capsys.readouterr().err
    )
    assert (
        main(
            [
                "sweep",
                str(path),
                "--grid",
                "strategy.lr=0.1,0.2",
                "--runs",
                str(tmp_path / "runs"),
                "--out",
                str(tmp_path / "sweep.parquet"),
                "--no-user-code",
            ]
        )
        == 2
    )
    assert "--no-user-code refuses user code" in capsys.readouterr().err
    assert not any((tmp_path / name).exists() for name in ("run", "runs", "sweep.parquet"))
    (tmp_path / "killed.checkpoint").mkdir()  # a checkpoint's scenario is checked before resuming it
    (tmp_path / "killed.checkpoint" / "scenario.yaml").write_text(path.read_text())
    assert main(["run", "--resume", str(tmp_path / "killed"), "--no-user-code"]) == 2
    assert "killed.checkpoint/scenario.yaml: model.factory" in capsys.readouterr().err


def test_no_user_code_refuses_a_compared_scenario_before_anything_runs_and_reads_finished_runs(
    module_dir, tmp_path, capsys
):
    plain, coded = tmp_path / "plain.yaml", tmp_path / "coded.yaml"
    plain.write_text(yaml.safe_dump(tiny(stop={"max_updates": 4}, eval={"every_updates": 2})))
    coded.write_text(yaml.safe_dump(scenario(STYLES["functions"])))
    args = ["compare", "--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "cmp"), "--no-user-code"]
    # the refused file comes last: nothing is run for the one before it either
    assert main([*args, str(plain), str(coded), "--seeds", "2"]) == 2
    assert capsys.readouterr().err == (
        f"fred: {coded}: model.factory 'fred_test_user_models:functions' would be imported "
        "and run, and --no-user-code refuses user code; leave --no-user-code out only if "
        "you trust that code\n"
    )
    assert not (tmp_path / "runs").exists() and not (tmp_path / "cmp").exists()
    # a finished run of user code is only read: its table and plots, no import
    fred.run(scenario(STYLES["functions"], stop={"max_updates": 4}), out=tmp_path / "made")
    sys.modules.pop(MODULE, None)
    assert main([*args, str(plain), str(tmp_path / "made")]) == 0
    assert MODULE not in sys.modules and (tmp_path / "cmp" / "comparison.csv").is_file()


@pytest.mark.slow
def test_the_bring_your_own_tutorial_runs_as_written(tmp_path):
    """Every file and command of docs/bring-your-own.md, in a fresh folder, as a reader would."""
    import re
    import shlex

    doc = (Path(__file__).parents[1] / "docs" / "bring-your-own.md").read_text()
    files = iter(["make_data.py", "mycnn.py", "sgp.yaml"])
    commands = []
    for lang, body in re.findall(r"```(\w+)\n(.*?)```", doc, re.S):
        if lang in ("python", "yaml"):
            (tmp_path / next(files)).write_text(body)
        elif lang == "bash":
            commands += [
                (line, 0) for line in body.splitlines() if line.strip() and not line.startswith("pip ")
            ]
        elif lang == "text":
            commands += [(line[2:], 2) for line in body.splitlines() if line.startswith("$ ")]
    fred_bin = Path(sys.executable).parent / "fred"
    for command, status in commands:
        line = f"{shlex.quote(str(fred_bin))} {command[5:]}" if command.startswith("fred ") else command
        line = (
            line.replace("python ", f"{shlex.quote(sys.executable)} ", 1)
            if line.startswith("python ")
            else line
        )
        done = subprocess.run(["bash", "-c", line], cwd=tmp_path, capture_output=True, text=True)
        assert done.returncode == status, (command, done.stderr[-2000:])
        if command.startswith("fred replay"):
            assert "bitwise check: passed" in done.stdout
