"""HPSGD in the paper's setting: the per-step barrier, the scenarios' constants, and the
validation section (scenarios/hpsgd/validation.py)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

import fred
from fred.scenario.loading import ScenarioError, load_scenario
from scenarios.hpsgd import validation
from tests.conftest import tiny

ROOT = Path(__file__).resolve().parents[1]
PAPER = sorted((ROOT / "scenarios" / "hpsgd").glob("paper_*.yaml"))


def starts(result: fred.RunResult) -> dict[str, list[float]]:
    steps = result.events[result.events["kind"] == "compute"]
    return {w: list(g["start_s"]) for w, g in steps.groupby("entity")}


def straggling(barrier: bool) -> fred.RunResult:
    return fred.run(
        tiny(
            strategy={"name": "hpsgd", "barrier": barrier},
            cluster={"workers": 4, "stragglers": [{"worker": 1, "slow_factor": 2}]},
            stop={"max_updates": 10},
        )
    )


def test_with_the_barrier_every_worker_starts_each_step_together():
    begun = starts(straggling(barrier=True))
    steps = min(len(s) for s in begun.values())
    for k in range(steps):
        assert len({s[k] for s in begun.values()}) == 1, k
    assert all(len(s) in (steps, steps + 1) for s in begun.values())


def test_without_the_barrier_a_fast_worker_does_not_wait_for_a_slow_one():
    begun = starts(straggling(barrier=False))
    assert (
        len(begun["worker0"]) == 2 * len(begun["worker1"])
        or len(begun["worker0"]) > len(begun["worker1"]) + 2
    )
    assert straggling(barrier=False).scenario.strategy.barrier is False  # the default is today's


def test_the_barrier_never_waits_for_the_synchronisation():
    # One all-reduce spans several steps: Pt keeps stepping at the compute's pace.
    result = slow_links(barrier=True)
    step_s = 0.01
    begun = starts(result)["worker0"]
    assert begun[5] == pytest.approx(5 * step_s)
    reduces = result.events[(result.events["kind"] == "allreduce") & (result.events["entity"] == "worker0")]
    assert (reduces["end_s"] - reduces["start_s"]).min() > 3 * step_s


def slow_links(**strategy) -> fred.RunResult:
    # One all-reduce (30 MB at 1.25 GB/s: 36 ms) spans several 10 ms steps.
    return fred.run(
        tiny(
            strategy={"name": "hpsgd", **strategy},
            cluster={"workers": 4},
            workload={"param_bytes": 30_000_000},
            stop={"max_sim_time_s": 0.5},
        )
    )


def test_gloos_barrier_waits_for_the_sync_and_syncs_every_other_step():
    result = slow_links(barrier=True, barrier_waits_for_sync=True)
    ev = result.events
    reduces = ev[(ev["kind"] == "allreduce") & (ev["entity"] == "worker0")]
    begun = starts(result)["worker0"]
    sync_s, step_s = float((reduces["end_s"] - reduces["start_s"]).iloc[1]), 0.01
    # Two steps take a step and an all-reduce: the second step's end waits for the sync in flight.
    assert begun[4] - begun[2] == pytest.approx(step_s + sync_s)
    assert abs(len(reduces) - len(begun) / 2) <= 1.5  # the all-reduce in flight at the end is not traced
    plain = slow_links(barrier=True)
    assert len(starts(plain)["worker0"]) > 1.5 * len(begun)  # the paper's barrier never waits for Ps


def test_waiting_for_the_sync_needs_the_barrier():
    with pytest.raises(ScenarioError, match="barrier_waits_for_sync"):
        fred.run(tiny(strategy={"name": "hpsgd", "barrier_waits_for_sync": True}, stop={"max_updates": 2}))


def test_the_paper_scenarios_carry_the_derived_constants():
    param_bytes, flops = validation.cifar_resnet101()
    assert param_bytes == 4 * 42_512_970  # the CIFAR-10 ResNet-101's published parameter count
    assert len(PAPER) == 9
    for path in PAPER:
        s = load_scenario(path)
        n = s.cluster.workers
        assert (s.cluster.workers_per_device, s.cluster.devices_per_node) == (n // 4, 4), path
        assert s.workload.param_bytes == param_bytes and s.workload.flops_per_example == pytest.approx(
            flops, rel=1e-9
        )
        assert s.cluster.compute.device_flops == pytest.approx(validation.v100_flops(), rel=1e-9)
        assert s.network.intra_node.bandwidth_bps == pytest.approx(validation.host_loopback_bps())
        assert s.network.intra_node.latency_s == pytest.approx(
            validation.TENSORS * validation.LOOPBACK_MESSAGE_S
        )
        assert s.data.batch_size == validation.BATCH and s.workload.timing_only


def test_the_module_loads_by_path_as_docs_make_validation_loads_it():
    path = ROOT / "scenarios" / "hpsgd" / "validation.py"
    spec = importlib.util.spec_from_file_location("validation_hpsgd", path)
    loaded = importlib.util.module_from_spec(spec)  # not in sys.modules, as make_validation leaves it
    spec.loader.exec_module(loaded)
    assert loaded.cifar_resnet101() == validation.cifar_resnet101()


@pytest.mark.slow  # 4 s on 2 cores: the quick section's runs
def test_the_quick_section_is_structured_and_computed(monkeypatch):
    text = validation.section(quick=True)
    assert text.startswith("## ")
    rows = [
        line
        for line in text.splitlines()
        if re.match(r"\| (4|8|16) \| (Local SGD|SSGD) \| .*`fred run ", line)
    ]
    assert len(rows) == 6
    for line in rows:
        assert re.search(r"\| [+-]\d+ % \|", line), line
    assert re.search(
        r"[-+]\d+\.\d %", text
    )  # signed errors with a decimal, as the validation page's test reads them
    # The numbers come from the runs: make the GPU twice as fast and every prediction moves.
    real = validation.run

    def faster(method, n, quick, **overrides):
        return real(
            method, n, quick, cluster={"compute": {"device_flops": 2 * validation.v100_flops()}}, **overrides
        )

    monkeypatch.setattr(validation, "run", faster)
    moved = [line for line in validation.section(quick=True).splitlines() if line in rows]
    assert moved == []


def test_gloos_barrier_stops_the_gain_over_ssgd_at_twice_when_an_all_reduce_outlasts_a_step():
    small = {"data": {"batch_size": 8}}  # k near 6.6 at 16 workers
    gloo = validation.run("hpsgd", 16, quick=True, strategy={"barrier_waits_for_sync": True}, **small)
    ssgd = validation.run("ssgd", 16, quick=True, **small)
    assert validation.gain(gloo, ssgd) == pytest.approx(1.0, abs=0.05)
    assert gloo.allreduce > 0.5  # Pt blocked waiting for its Ps
    assert gloo.compute + gloo.gpu_wait + gloo.barrier + gloo.allreduce == pytest.approx(1.0)


def test_hpsgd_keeps_the_gpus_busy_and_ssgd_does_not():
    hp, ssgd = validation.run("hpsgd", 16, quick=True), validation.run("ssgd", 16, quick=True)
    assert (
        hp.gpu_busy > 0.97 and hp.allreduce == 0.0 and hp.barrier > 0.3
    )  # the step under way at the end is not traced
    assert ssgd.gpu_busy < 0.8 and ssgd.allreduce > 0.4 and ssgd.barrier == 0.0
    for m in (hp, ssgd):
        assert m.compute + m.gpu_wait + m.barrier + m.allreduce == pytest.approx(1.0)
    # With identical workers the gain over SSGD is the ratio of the GPUs' busy time.
    assert validation.gain(hp, ssgd) == pytest.approx(hp.gpu_busy / ssgd.gpu_busy - 1, abs=0.02)
