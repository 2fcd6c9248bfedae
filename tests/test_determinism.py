"""Same scenario, same seed: the same bits, in this process or another one."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

import fred
from tests.conftest import tiny

SCENARIOS = {
    "asgd-stragglers": tiny(
        cluster={
            "workers": 6,
            "jitter": {"kind": "lognormal", "sigma": 0.3},
            "stragglers": [{"worker": 2, "slow_factor": 3}, {"worker": 4, "delay_s": 0.02}],
            "random_straggle": {"probability": 0.2, "delay_s": 0.05},
        }
    ),
    "ssgd-ps-by-label": tiny(strategy={"name": "ssgd", "aggregation": "ps"}, data={"sharding": "by_label"}),
    "ssgd-ring-dirichlet": tiny(
        strategy={"name": "ssgd"}, data={"sharding": "dirichlet", "dirichlet_alpha": 0.3}
    ),
}
TABLES = ("events", "updates", "metrics")


@pytest.mark.parametrize("name", SCENARIOS)
def test_two_runs_in_one_process_are_identical(name):
    first, second = fred.run(SCENARIOS[name]), fred.run(SCENARIOS[name])
    assert first.summary["params_sha256"] == second.summary["params_sha256"]
    for table in TABLES:
        pd.testing.assert_frame_equal(getattr(first, table), getattr(second, table))


def test_a_run_in_a_fresh_process_gives_the_same_bits(tmp_path):
    data = SCENARIOS["asgd-stragglers"]
    here = fred.run(data, out=tmp_path / "here")
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(data))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "fred.tools.cli",
            "run",
            str(path),
            "--out",
            str(tmp_path / "there"),
            "--quiet",
        ],
        check=True,
    )
    there = fred.load_run(tmp_path / "there")
    assert there.summary["params_sha256"] == here.summary["params_sha256"]
    for table in TABLES:
        pd.testing.assert_frame_equal(getattr(here, table), getattr(there, table))
    saved = json.loads((tmp_path / "here" / "summary.json").read_text())
    assert saved["params_sha256"] == here.summary["params_sha256"]


def test_a_different_seed_gives_a_different_run():
    base = SCENARIOS["asgd-stragglers"]
    assert fred.run(base).summary["params_sha256"] != fred.run({**base, "seed": 8}).summary["params_sha256"]


@settings(max_examples=8, deadline=None)
@given(
    strategy=st.sampled_from(["asgd", "ssgd", "sasgd", "fasgd", "bfasgd"]),
    workers=st.integers(1, 6),
    sigma=st.floats(0, 0.5),
    straggle=st.floats(0, 0.5),
    seed=st.integers(0, 2**31),
)
def test_any_small_scenario_repeats_exactly(strategy, workers, sigma, straggle, seed):
    strategy_cfg = {"name": strategy}
    if strategy == "bfasgd":
        strategy_cfg |= {"c_push": 0.01, "c_fetch": 0.05}
    data = tiny(
        seed=seed,
        strategy=strategy_cfg,
        cluster={
            "workers": workers,
            "jitter": {"kind": "lognormal", "sigma": sigma},
            "random_straggle": {"probability": straggle, "delay_s": 0.03},
        },
        stop={"max_updates": 6},
        eval={"every_updates": 3},
    )
    first, second = fred.run(data), fred.run(data)
    assert first.summary["params_sha256"] == second.summary["params_sha256"]
    for table in TABLES:
        pd.testing.assert_frame_equal(getattr(first, table), getattr(second, table))


def test_the_garbage_collectors_schedule_changes_nothing_and_is_restored_after_a_run(monkeypatch):
    import gc

    from fred.runs import controller

    scenario = tiny(strategy={"name": "sgp"}, stop={"max_updates": 24})
    before = gc.get_threshold()
    usual = fred.run(scenario)  # collections raised to controller.GC_THRESHOLD while it steps
    assert gc.get_threshold() == before
    monkeypatch.setattr(controller, "GC_THRESHOLD", (10, 1, 1))
    gc.set_threshold(10, 1, 1)  # a full collection every hundred allocations, during the steps too
    try:
        eager = fred.run(scenario)
    finally:
        gc.set_threshold(*before)
    assert eager.summary["params_sha256"] == usual.summary["params_sha256"]
    pd.testing.assert_frame_equal(eager.events, usual.events)
