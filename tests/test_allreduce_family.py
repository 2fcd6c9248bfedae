"""The all-reduce family: AR-SGD, Local SGD, HPSGD and Pipe-SGD against the papers' timing models."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import fred
from fred.numerics.codecs import QUANTIZERS
from fred.numerics.codecs.quantize import fp16_truncate, int8_quantize
from fred.scenario.schema import NetworkConfig
from fred.simulation.network import ring_allreduce_time_s
from tests.conftest import tiny

NET = {"latency_s": 2e-4, "bandwidth_bps": 1e8, "reduce_s_per_byte": 1e-10, "sync_s": 1e-3}


def iteration_period(result: fred.RunResult, worker: str = "worker0", last: int = 5) -> np.ndarray:
    starts = result.events[(result.events["entity"] == worker) & (result.events["kind"] == "compute")][
        "start_s"
    ]
    return np.diff(starts.to_numpy())[-last:]


@pytest.mark.parametrize("level, segments", [(1, 1), (2, 4)])
@pytest.mark.parametrize("bound", ["compute", "communication"])
def test_pipe_sgd_steady_state_iteration_is_the_max_of_compute_and_communication(level, segments, bound):
    p, param_bytes = 4, 2_000_000
    l_comm = ring_allreduce_time_s(p, param_bytes, NetworkConfig(**NET), segments=segments)
    l_up = 0.002
    l_comp = 2 * l_comm if bound == "compute" else l_comm / 3
    data = tiny(
        cluster={"workers": p, "compute": {"step_time_s": l_comp}},
        network=NET,
        workload={"param_bytes": param_bytes},
        strategy={
            "name": "pipe_sgd",
            "staleness": 1,
            "pipeline_level": level,
            "segments": segments,
            "update_s": l_up,
        },
        stop={"max_updates": 25},
    )
    period = iteration_period(fred.run(data))
    np.testing.assert_allclose(period, max(l_up + l_comp, l_comm), rtol=1e-9)


def test_pipe_sgd_without_staleness_or_compression_is_arsgd():
    pipe = fred.run(tiny(strategy={"name": "pipe_sgd", "staleness": 0}, stop={"max_updates": 15}))
    ar = fred.run(tiny(strategy={"name": "arsgd"}, stop={"max_updates": 15}))
    assert pipe.summary["params_sha256"] == ar.summary["params_sha256"]


def test_pipe_sgd_staleness_is_exactly_k_after_warm_up():
    result = fred.run(tiny(strategy={"name": "pipe_sgd", "staleness": 2}, stop={"max_updates": 20}))
    assert (result.updates["staleness"] <= 2).all()
    assert (result.updates[result.updates["update"] > 2]["staleness"] == 2).all()


@pytest.mark.parametrize("scheme, ratio", [("fp16", 0.5), ("int8", 0.25)])
def test_compression_shrinks_the_bytes_on_the_wire_and_changes_the_numbers(scheme, ratio):
    plain = fred.run(tiny(strategy={"name": "pipe_sgd"}, stop={"max_updates": 10}))
    packed = fred.run(
        tiny(strategy={"name": "pipe_sgd", "compression": {"kind": scheme}}, stop={"max_updates": 10})
    )
    tensors = len(plain.params)
    expected = (
        QUANTIZERS[scheme]().wire_bytes(plain.summary["param_bytes"], tensors) / plain.summary["param_bytes"]
    )
    assert expected == pytest.approx(ratio, abs=0.01)
    assert packed.summary["bytes_sent"] == pytest.approx(plain.summary["bytes_sent"] * expected)
    assert packed.summary["params_sha256"] != plain.summary["params_sha256"]


def test_compression_time_is_charged_on_the_compute_thread():
    data = tiny(
        strategy={"name": "pipe_sgd", "compression": {"kind": "fp16"}, "codec_s_per_byte": 1e-8},
        stop={"max_updates": 6},
    )
    result = fred.run(data)
    codec = result.events[result.events["kind"].isin(["compress", "decompress"])]
    assert len(codec) > 0
    assert codec["end_s"].sub(codec["start_s"]).to_numpy() == pytest.approx(
        1e-8 * result.summary["param_bytes"]
    )


@settings(max_examples=50, deadline=None)
@given(arrays(np.float32, st.integers(1, 64), elements=st.floats(-1e6, 1e6, width=32)))
def test_fp16_truncation_zeroes_exactly_the_low_16_mantissa_bits(x):
    out = np.asarray(fp16_truncate({"x": x})["x"])
    bits_in, bits_out = x.view(np.uint32), out.view(np.uint32)
    assert (bits_out & 0xFFFF == 0).all()
    assert (bits_out >> 16 == bits_in >> 16).all()


@settings(max_examples=50, deadline=None)
@given(arrays(np.float32, st.integers(1, 64), elements=st.floats(-1e3, 1e3, width=32)))
def test_int8_quantisation_error_is_at_most_half_a_level(x):
    out = np.asarray(int8_quantize({"x": x})["x"])
    half_level = (float(x.max()) - float(x.min())) / 255 / 2
    # float32 arithmetic on the way back adds a few ulps of the range on top of the bound
    slack = 4 * np.finfo(np.float32).eps * max(abs(float(x.max())), abs(float(x.min())), 1e-30)
    assert np.abs(out.astype(np.float64) - x.astype(np.float64)).max() <= half_level + slack


def test_local_sgd_syncing_every_step_is_close_to_arsgd():
    # Local SGD averages parameters (sum_j (x - lr g_j)) / n; AR-SGD averages gradients
    # x - lr (sum_j g_j) / n. Equal in exact arithmetic; float32 rounding differs by ulps.
    local = fred.run(tiny(strategy={"name": "local_sgd", "sync_every": 1}, stop={"max_updates": 20}))
    ar = fred.run(tiny(strategy={"name": "arsgd"}, stop={"max_updates": 20}))
    for name in ar.params:
        np.testing.assert_allclose(local.params[name], ar.params[name], rtol=1e-4, atol=1e-6)
    assert local.summary["sim_time_s"] == pytest.approx(ar.summary["sim_time_s"])


def test_local_sgd_communicates_once_per_round():
    result = fred.run(tiny(strategy={"name": "local_sgd", "sync_every": 8}, stop={"max_updates": 5}))
    per_worker = result.events[result.events["kind"] == "allreduce"].groupby("entity").size()
    computes = result.events[result.events["kind"] == "compute"].groupby("entity").size()
    assert (per_worker == 5).all() and (computes >= 40).all()


def hpsgd_run(k: int = 2, gamma: int = 8, windows: int = 8) -> tuple[fred.RunResult, float, float]:
    """HPSGD with t_sync = k t_train, run for `windows` Local-SGD rounds plus warm-up."""
    t_train, p = 0.01, 4
    bandwidth = 1e8
    param_bytes = int(k * t_train * bandwidth / (2 * (p - 1) / p))  # ring time = k t_train, no latency
    window = (gamma + 1) * t_train + k * t_train
    data = tiny(
        cluster={"workers": p, "compute": {"step_time_s": t_train}},
        network={"latency_s": 0.0, "bandwidth_bps": bandwidth},
        workload={"param_bytes": param_bytes},
        strategy={"name": "hpsgd", "lr": 0.05},
        stop={"max_sim_time_s": window * (windows + 1), "max_updates": None},
        eval={"every_s": window, "every_updates": None},
    )
    return fred.run(data), window, (gamma + 1) / k + 1


@pytest.mark.parametrize("k", [1, 2, 4])
def test_hpsgd_synchronises_as_often_as_the_paper_says(k):
    result, window, expected = hpsgd_run(k=k)
    starts = result.events[(result.events["entity"] == "worker0") & (result.events["kind"] == "allreduce")][
        "start_s"
    ]
    counts = [((starts >= w * window) & (starts < (w + 1) * window)).sum() for w in range(1, 8)]
    assert all(abs(c - expected) <= 1 for c in counts), (counts, expected)


def test_hpsgd_workers_alike_train_on_the_same_version():
    # Without jitter every worker syncs at the same instants, so each round's gradients were
    # all computed on the same W (worker 0 used to read one version behind the others).
    result, _, _ = hpsgd_run(k=2)
    reads = result.updates.groupby("update")["version_read"].nunique()
    assert len(reads) > 5 and (reads == 1).all()


def test_hpsgd_applies_each_sum_one_synchronisation_late():
    result, _, _ = hpsgd_run(k=2)
    syncs = result.events[(result.events["entity"] == "worker0") & (result.events["kind"] == "allreduce")]
    ends, starts = syncs["end_s"].to_numpy(), syncs["start_s"].to_numpy()
    applied = result.updates.groupby("update")["sim_time_s"].first().to_numpy()
    assert len(applied) in (len(ends) - 1, len(ends) - 2)  # the last sum(s) are still pending
    for u, t in enumerate(applied):  # update u+1 applies round u's sum, when round u+1 begins
        assert ends[u] <= t <= starts[u + 1]
    assert (result.updates["staleness"] >= 1).all() or result.updates["update"].min() == 1
