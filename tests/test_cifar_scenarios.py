"""The shipped ResNet-20 CIFAR-10 scenarios, their quick synthetic variants and the small
transformer: they validate, run a couple of updates, and replay bit for bit.

The CIFAR-10 scenarios read the user's own download; here they run on a folder of a few dozen
images written in the official format. ResNet-20 runs cost tens of seconds on two cores, so the
default run checks one quick scenario and the transformer; the rest are in ``pytest -m slow``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

import fred
from fred.scenario.model_workloads import scenario_workload
from fred.scenario.schema import base_step_time_s
from fred.tools.replay import replay
from tests.conftest import load_shipped, missing_data, shipped_scenarios
from tests.test_cifar_text_data import cifar10_folder

ROOT = Path(__file__).resolve().parents[1]
REAL = [p for p in shipped_scenarios() if p.parent.name == "cifar"]
QUICK = [p for p in shipped_scenarios() if p.parent.name == "quick" and p.parent.parent.name == "cifar"]
TRANSFORMER = ROOT / "scenarios" / "text" / "transformer.yaml"


def test_the_cifar_scenarios_are_the_four_baselines_on_resnet20_with_eight_workers_of_32():
    assert (
        sorted(p.stem for p in REAL) == sorted(p.stem for p in QUICK) == ["asgd", "local_sgd", "sgp", "ssgd"]
    )
    for path in REAL + QUICK:
        scenario = load_shipped(path)
        model = scenario.model
        assert (model.kind, model.depth, model.width, model.norm) == ("resnet", 20, 16, "group")
        assert scenario.cluster.workers == 8 and scenario.data.batch_size % 8 == 0
        assert scenario.strategy.name == path.stem
        assert scenario_workload(scenario).param_count == 269_722
        # timed with the model's own training FLOPs: 3 x 81.1 MFLOP an image
        assert base_step_time_s(scenario) == pytest.approx(
            scenario.data.batch_size * 3 * 81.1e6 / 5e12, rel=1e-3
        )
    assert (
        yaml.safe_load((REAL[0].parent / "cifar10.yaml").read_text())["data"]["source"]["path"]
        == "cifar-10-batches-py"
    )
    for path in REAL:  # the one thing a user sets, the CIFAR-10 folder, is not here
        assert missing_data(path) and "cifar-10-batches-py does not exist" in missing_data(path)
        scenario = load_shipped(path)
        assert (scenario.data.source.kind, scenario.data.batch_size) == ("cifar10", 32)
        if scenario.strategy.name == "ssgd":
            assert scenario.strategy.aggregation == "allreduce"
    for path in QUICK:
        source = fred.load_scenario(path).data
        assert source.source.kind == "synthetic_images" and source.eval_examples <= 32


def quick_run(path: Path, tmp_path: Path, check_replay: bool = True, **overrides) -> fred.RunResult:
    result = fred.run(path, out=tmp_path / "run", **overrides)
    assert result.summary["status"] == "completed"
    assert np.isfinite(result.metrics["eval_loss"]).all()
    if check_replay:  # a second compilation of every program: the slow suite's
        assert replay(tmp_path / "run").passed, "its numerics replayed from the tape give the same bits"
    return result


@pytest.mark.slow  # 10 s on 2 cores; tests/test_resnet_exact.py runs the ResNet in the default run
def test_the_quick_ssgd_scenario_runs(tmp_path):
    result = quick_run(
        ROOT / "scenarios" / "cifar" / "quick" / "ssgd.yaml",
        tmp_path,
        check_replay=False,
        stop={"max_updates": 2},
    )
    assert result.summary["updates"] == 2 and result.summary["param_bytes"] == 4 * 269_722


@pytest.mark.slow  # 10 s on 2 cores; tests/test_deep_models.py trains the transformer in the default run
def test_the_transformer_scenario_runs_and_replays(tmp_path):
    result = quick_run(TRANSFORMER, tmp_path, stop={"max_updates": 4})
    assert result.summary["updates"] == 4 and 0.0 <= result.summary["final_eval_accuracy"] <= 1.0


@pytest.mark.slow
def test_the_transformer_scenario_learns_the_chain(tmp_path):
    losses = quick_run(TRANSFORMER, tmp_path, check_replay=False).metrics["eval_loss"].to_numpy()
    assert losses[0] == pytest.approx(np.log(64), rel=0.05)  # a guess among 64 tokens
    assert losses[-1] < 0.6 * losses[0]  # well below: each token has 4 successors


@pytest.mark.slow
@pytest.mark.parametrize("path", QUICK, ids=lambda p: p.stem)
def test_every_quick_scenario_runs_and_replays(path, tmp_path):
    quick_run(path, tmp_path, stop={"max_updates": 2})


@pytest.mark.slow
@pytest.mark.parametrize("path", REAL, ids=lambda p: p.stem)
def test_every_cifar10_scenario_runs_on_a_folder_in_the_official_format(path, tmp_path):
    folder, _ = cifar10_folder(
        tmp_path / "data", per_batch=52, test=8
    )  # 260 images: 8 workers' batches of 32
    result = quick_run(
        path,
        tmp_path,
        data={"source": {"path": str(folder)}},
        stop={"max_updates": 1, "max_sim_time_s": 0.01},
    )
    assert result.scenario.data.source.path == str(folder)
    assert len(result.metrics) >= 2
