"""workload.timing_only: the same schedule as a run with real gradients, without the numbers.

The mode is honest only because simulated timing never depends on the numbers, so
every supported strategy's timing-only tables are compared with its real run's.
"""

from __future__ import annotations

import math

import pandas as pd
import pytest

import fred
from fred.numerics.gradients import Numerics
from fred.scenario import registry
from fred.scenario.loading import ScenarioError, validate
from tests.conftest import cluster_for, tiny

SUPPORTED = [s.name for s in registry.all_strategies() if s.timing_only]
UNSUPPORTED = [s.name for s in registry.all_strategies() if not s.timing_only]


def busy(strategy: dict, **overrides) -> dict:
    """Uneven compute and links that queue, so that the schedule has something to get wrong."""
    return tiny(
        strategy=strategy,
        cluster={
            "workers": 4,
            "jitter": {"kind": "lognormal", "sigma": 0.3},
            "stragglers": [{"worker": 1, "slow_factor": 2}],
        },
        workload={"param_bytes": 2_000_000},
        stop={"max_updates": 16},
        **overrides,
    )


def timing_only(data: dict) -> dict:
    return {**data, "workload": {**data.get("workload", {}), "timing_only": True}}


@pytest.mark.parametrize("name", SUPPORTED)
def test_timing_only_runs_have_the_real_runs_events_and_updates(name):
    data = busy({"name": name})
    real, timed = fred.run(data), fred.run(timing_only(data))
    pd.testing.assert_frame_equal(timed.events, real.events)
    pd.testing.assert_frame_equal(timed.updates, real.updates)
    pd.testing.assert_frame_equal(
        timed.metrics[["sim_time_s", "updates"]], real.metrics[["sim_time_s", "updates"]]
    )
    assert timed.metrics[["eval_loss", "eval_accuracy", "train_loss"]].isna().all().all()
    assert timed.summary["sim_time_s"] == real.summary["sim_time_s"]
    assert timed.summary["status"] == "completed" and timed.summary["params_sha256"] is None
    assert timed.params == {}


def test_sgp_timing_on_other_topologies_matches_too():
    for strategy in (
        {"name": "sgp", "topology": "ring"},
        {"name": "sgp", "peers": 2},
        {"name": "osgp", "overlap": 2},
    ):
        data = busy(strategy)
        pd.testing.assert_frame_equal(fred.run(timing_only(data)).events, fred.run(data).events)


def test_a_timing_only_run_computes_no_gradient_and_no_evaluation(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a timing-only run asked for numbers")

    monkeypatch.setattr(Numerics, "_call", refuse)  # every gradient call goes through it
    monkeypatch.setattr(Numerics, "evaluate", refuse)
    result = fred.run(timing_only(busy({"name": "sgp"})))
    assert result.summary["updates"] == 16


def test_a_timing_only_run_is_deterministic_and_round_trips(tmp_path):
    data = timing_only(busy({"name": "arsgd"}))
    first = fred.run(data, out=tmp_path / "first")
    second = fred.load_run(fred.run(data, out=tmp_path / "second").path)
    for table in ("events", "updates", "metrics"):
        pd.testing.assert_frame_equal(getattr(first, table), getattr(second, table))
    assert second.params == {} and second.summary["params_sha256"] is None
    assert second.summary["final_eval_loss"] is None and not math.isnan(second.summary["sim_time_s"])


@pytest.mark.parametrize("name", UNSUPPORTED)
def test_strategies_that_need_gradients_are_refused_with_the_supported_list(name):
    data = timing_only(tiny(strategy={"name": name}, cluster=cluster_for(name)))
    with pytest.raises(ScenarioError) as err:
        validate(data)
    [message] = err.value.problems
    assert f"workload.timing_only: strategy {name!r} needs real gradients" in message
    assert all(supported in message for supported in SUPPORTED)


def test_ssgd_on_a_parameter_server_matches_too():
    # Its server loop is SASGD's, which runs timing-only.
    data = busy({"name": "ssgd", "aggregation": "ps"})
    timed, real = fred.run(timing_only(data)), fred.run(data)
    pd.testing.assert_frame_equal(timed.events, real.events)
    pd.testing.assert_frame_equal(timed.updates, real.updates)


def test_a_loss_target_is_refused_because_there_are_no_losses():
    with pytest.raises(ScenarioError, match="stop.target_eval_loss is never reached in a timing-only run"):
        validate(timing_only(tiny(strategy={"name": "sgp"}, stop={"target_eval_loss": 0.5})))


def test_parameter_server_timing_on_the_logical_clock_and_with_softsync_matches_too():
    for strategy in ({"name": "asgd", "clock": "logical"}, {"name": "sasgd", "n_soft": 2}):
        data = busy(strategy)
        timed, real = fred.run(timing_only(data)), fred.run(data)
        pd.testing.assert_frame_equal(timed.events, real.events)
        pd.testing.assert_frame_equal(timed.updates, real.updates)


@pytest.mark.parametrize("name", ["ssgd", "asgd"])
def test_a_timing_only_run_takes_any_batch_whatever_its_tile(name):
    # No gradient, no tiles: a tile the batch is not whole tiles of was refused all the same.
    data = timing_only(
        tiny(strategy={"name": name, "exact_tile": 8}, data={"batch_size": 12}, stop={"max_updates": 4})
    )
    assert validate(data).strategy.exact_tile == 8
    assert fred.run(data).summary["updates"] == 4


def test_a_timing_only_run_is_not_refused_over_data_it_never_reads():
    # 1,024 workers of 8-row batches take 8,192 rows a step from 8,000 examples: a real run's batches
    # do not fit, but a timing-only run draws none.
    data = timing_only(
        tiny(
            strategy={"name": "ssgd"},
            cluster={"workers": 1024},
            stop={"max_updates": 2},
            data={"source": {"kind": "synthetic", "examples": 10_000}, "eval_fraction": 0.2},
        )
    )
    assert fred.run(data).summary["updates"] == 2
