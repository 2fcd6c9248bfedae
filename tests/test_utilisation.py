"""Compute utilisation: each worker's compute time over the run's simulated time, in closed form."""

from __future__ import annotations

import pytest

import fred
from fred.scenario.schema import NetworkConfig
from fred.simulation.collectives import allreduce_time_s
from fred.tools.compare import comparison_table, readable_table
from tests.conftest import tiny

NET = {"latency_s": 2e-4, "bandwidth_bps": 1e8, "reduce_s_per_byte": 1e-10, "sync_s": 1e-3}


def timed(strategy: dict, param_bytes: float, updates: int, workers: int = 4) -> fred.RunResult:
    return fred.run(
        tiny(
            cluster={"workers": workers, "compute": {"step_time_s": 0.01}},
            network=NET,
            workload={"param_bytes": param_bytes, "timing_only": True},
            strategy=strategy,
            stop={"max_updates": updates},
        )
    )


def test_ssgd_computes_a_step_then_waits_for_its_all_reduce():
    # every round: a 10 ms step, then the ring all-reduce of the gradient; nothing else
    result = timed({"name": "ssgd"}, 1e6, updates=5)
    reduce_s = allreduce_time_s("ring", 4, 1e6, NetworkConfig(**NET))
    expected = 0.01 / (0.01 + reduce_s)
    assert result.summary["sim_time_s"] == pytest.approx(5 * (0.01 + reduce_s), rel=1e-12)
    assert result.summary["compute_utilisation"] == pytest.approx(expected, rel=1e-12)
    per_worker = result.summary["compute_utilisation_per_worker"]
    assert list(per_worker) == [f"worker{i}" for i in range(4)]
    assert per_worker == pytest.approx({name: expected for name in per_worker}, rel=1e-12)


def test_streaming_diloco_whose_exchanges_the_overlap_hides_computes_all_the_time():
    streaming = {"name": "diloco", "inner_steps": 4, "fragments": 2, "overlap_steps": 1}
    hidden = timed(streaming, 1e4, updates=4, workers=2)  # each all-reduce shorter than a step
    # The run ends as worker0 applies the 4th outer step, after inner step 4 + 3 * 2 + 1 = 11: it
    # computed all the time; worker1's 11th step ended then too, but the run ended first.
    assert hidden.summary["sim_time_s"] == pytest.approx(0.11, rel=1e-12)
    per_worker = hidden.summary["compute_utilisation_per_worker"]
    assert per_worker == pytest.approx({"worker0": 1.0, "worker1": 10 / 11}, rel=1e-12)
    blocking = timed({**streaming, "overlap_steps": 0}, 1e4, updates=4, workers=2)
    reduce_s = allreduce_time_s("ring", 2, 1e4 * 1040 / 1210, NetworkConfig(**NET))  # fragment 0's
    assert blocking.summary["sim_time_s"] > 0.10 + 2 * reduce_s  # it waits for every all-reduce
    assert blocking.summary["compute_utilisation"] < hidden.summary["compute_utilisation"]


def test_fred_compare_shows_the_mean_utilisation():
    result = timed({"name": "ssgd"}, 1e6, updates=5)
    table, _ = comparison_table([result])
    assert table["compute_utilisation"].tolist() == [result.summary["compute_utilisation"]]
    text = readable_table(table, width=200)
    assert "compute" in text and f"{result.summary['compute_utilisation']:.1%}" in text
