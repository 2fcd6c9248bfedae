"""One contract over every registered strategy: it runs, it is deterministic, its records are whole.

A new strategy module is picked up here automatically; give it a tiny scenario
in ``CLUSTER`` only if it cannot run on the default four workers.
"""

from __future__ import annotations

import pandas as pd
import pytest

import fred
from fred.records import EVENT_COLUMNS, METRIC_COLUMNS, UPDATE_COLUMNS
from strategies import registry
from tests.conftest import tiny

CLUSTER = {"sgd": {"workers": 1}}


def contract_scenario(name: str) -> dict:
    return tiny(
        strategy={"name": name},
        cluster=CLUSTER.get(name, {}) | {"jitter": {"kind": "lognormal", "sigma": 0.2}},
        stop={"max_updates": 10},
        eval={"every_updates": 3},
    )


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
    traffic = events[events["kind"].isin(["send", "push", "fetch", "allreduce"])]
    assert traffic["bytes"].sum() == result.summary["bytes_sent"]
    assert set(updates["worker"]) <= set(range(result.summary["workers"]))
