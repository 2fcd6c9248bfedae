"""Sharded data parallelism (``ssgd`` with ``sharding: zero1 | zero2 | zero3``): SSGD's numbers bit
for bit, the collectives' closed forms on idle links, and the memory per worker by stage."""

from __future__ import annotations

import numpy as np
import pytest
import simpy

import fred
from fred.runs.memory import worker_memory
from fred.scenario.loading import ScenarioError
from fred.scenario.schema import NetworkConfig
from fred.scenario.workloads import Layer
from fred.simulation.buckets import LayerShare, layer_plan
from fred.simulation.collectives import allgather_time_s, allreduce_time_s, reduce_scatter_time_s
from fred.simulation.compute import ComputeModel
from fred.simulation.engine import Simulation
from fred.simulation.network import Network
from fred.simulation.worker import Worker
from tests.conftest import tiny
from tests.test_network import bare_sim

NET = {"latency_s": 2e-5, "bandwidth_bps": 1.25e9, "reduce_s_per_byte": 1e-10, "sync_s": 5e-5}
STAGES = ["zero1", "zero2", "zero3"]
ADAM = {"kind": "adam"}


def ssgd(sharding: str, **overrides) -> dict:
    return tiny(strategy={"name": "ssgd", "lr": 0.01, "optimizer": ADAM, "sharding": sharding}, **overrides)


def compute_starts(result: fred.RunResult, worker: str = "worker0") -> np.ndarray:
    events = result.events
    return events[(events["entity"] == worker) & (events["kind"] == "compute")]["start_s"].to_numpy()


@pytest.mark.parametrize("stage", STAGES)
def test_every_stage_gives_ssgds_parameters_bit_for_bit(stage):
    plain = fred.run(ssgd("none", stop={"max_updates": 8}))
    sharded = fred.run(ssgd(stage, stop={"max_updates": 8}))
    assert sharded.summary["params_sha256"] == plain.summary["params_sha256"]
    assert sharded.summary["updates"] == plain.summary["updates"]


@pytest.mark.parametrize("stage", ["zero2", "zero3"])
def test_bucketed_stages_give_ssgds_parameters_bit_for_bit(stage):
    workload = {"profile": "resnet50", "bucket_bytes": 25 * 2**20}
    plain = fred.run(ssgd("none", workload=workload, stop={"max_updates": 4}))
    sharded = fred.run(ssgd(stage, workload=workload, stop={"max_updates": 4}))
    assert sharded.summary["params_sha256"] == plain.summary["params_sha256"]
    assert (sharded.events["kind"] == "reduce_scatter").sum() > 4 * 4  # several buckets a round


def test_the_reduce_scatter_returns_the_all_reduces_sum_in_its_own_time():
    p, n = 4, 8e6
    sim = bare_sim(p, **NET)
    got: dict[int, object] = {}

    def member(w):
        got[w.index] = yield from sim.reduce_scatter(sim.workers, w, n, {"x": np.float32(w.index + 1)})

    for w in sim.workers:
        sim.process(member(w))
    sim.env.run()
    assert sim.now == pytest.approx(reduce_scatter_time_s(p, n, NetworkConfig(**NET)), rel=1e-9)
    assert all(v == {"x": np.float32(10)} for v in got.values())


@pytest.mark.parametrize("stage", ["zero1", "zero2"])
def test_stages_1_and_2_take_compute_reduce_scatter_and_the_parameters_all_gather(stage):
    p, n, step_s = 4, 4_000_000, 0.01
    data = ssgd(stage, network=NET, workload={"param_bytes": n}, stop={"max_updates": 6})
    period = np.diff(compute_starts(fred.run(data)))
    cfg = NetworkConfig(**NET)
    expected = step_s + reduce_scatter_time_s(p, n, cfg) + allgather_time_s(p, n / p, cfg)
    np.testing.assert_allclose(period, expected, rtol=1e-9)
    # the same as an all-reduce on a ring, but for one more synchronisation cost S
    assert expected == pytest.approx(step_s + allreduce_time_s("ring", p, n, cfg) + cfg.sync_s, rel=1e-12)


def test_stage_3_moves_one_and_a_half_times_ddps_bytes():
    runs = {s: fred.run(ssgd(s, network=NET, stop={"max_updates": 6})) for s in ("none", "zero1", "zero3")}
    ddp = runs["none"].summary["bytes_sent"]
    assert runs["zero3"].summary["bytes_sent"] == pytest.approx(1.5 * ddp, rel=1e-12)
    gathers = runs["zero1"].events[runs["zero1"].events["kind"] == "allgather"]["bytes"].sum()
    # stages 1 and 2: an all-reduce's bytes, whose last all-gather the stop at the 6th update cuts off
    assert runs["zero1"].summary["bytes_sent"] + gathers / 5 == pytest.approx(ddp, rel=1e-12)


def layered_simulation(p: int, layers: tuple[LayerShare, ...], step_s: float) -> Simulation:
    scenario = fred.validate(ssgd("zero3", cluster={"workers": p, "compute": {"step_time_s": step_s}}))
    crew = [Worker(i, lambda: np.arange(1)) for i in range(p)]
    message = sum(layer.nbytes for layer in layers)
    return Simulation(
        simpy.Environment(),
        crew,
        Network(NetworkConfig(**NET)),
        ComputeModel(scenario),
        None,
        None,  # type: ignore[arg-type]
        message,  # type: ignore[arg-type]
        0,
        layers=layers,
    )


def one_step(sim: Simulation) -> list[float]:
    done: list[float] = []

    def member(w):
        yield from sim.backprop_sharded(w, None, sim.workers)
        done.append(sim.now)

    for w in sim.workers:
        sim.process(member(w))
    sim.env.run()
    return done


@pytest.mark.parametrize("sharing", ["fcfs", "fair"])
def test_stage_3_hides_every_gather_but_the_first_when_each_layer_computes_longer(sharing):
    p, k, layer_bytes = 4, 6, 2e6
    cfg = NetworkConfig(**NET)
    gather_s = allgather_time_s(p, layer_bytes / p, cfg)
    step_s = 3 * k * gather_s * 1.5  # each forward pass of a layer: 1.5 gathers; its backward 3
    sim = layered_simulation(p, tuple(LayerShare(layer_bytes, 1 / k) for _ in range(k)), step_s)
    expected = gather_s + step_s + reduce_scatter_time_s(p, k * layer_bytes, cfg)
    assert one_step(sim) == pytest.approx([expected] * p, rel=1e-9)


def test_stage_3_exposes_the_gathers_when_layers_compute_faster_than_they_gather():
    p, k, layer_bytes = 4, 6, 2e6
    cfg = NetworkConfig(**NET)
    gather_s = allgather_time_s(p, layer_bytes / p, cfg)
    step_s = 3 * k * gather_s / 4  # each forward pass a quarter of a gather, each backward half
    sim = layered_simulation(p, tuple(LayerShare(layer_bytes, 1 / k) for _ in range(k)), step_s)
    # the gathers go back to back; after the last one, the first layer's backward pass
    expected = 2 * k * gather_s + 2 * step_s / (3 * k) + reduce_scatter_time_s(p, k * layer_bytes, cfg)
    assert one_step(sim) == pytest.approx([expected] * p, rel=1e-9)


def test_the_layer_plan_shares_the_step_and_the_message():
    layers = [Layer("a", 40, 1), Layer("b", 0, 2), Layer("c", 120, 1)]
    assert layer_plan(layers, 1600.0) == (
        LayerShare(400.0, 0.25),
        LayerShare(0.0, 0.5),
        LayerShare(1200.0, 0.25),
    )
    assert layer_plan([Layer("x", 0, 0)], 8.0) == (LayerShare(8.0, 1.0),)


# LLaMA-2 7B: 6,738,415,616 parameters (Touvron et al. 2023, "Llama 2", table 1 and the released
# config), float32 as fred's messages are; Adam keeps two more copies (its moments).
LLAMA_7B_BYTES = 4 * 6_738_415_616
GPU_BYTES = 80e9


def seven_billion(sharding: str) -> dict:
    return ssgd(
        sharding,
        cluster={"workers": 8, "compute": {"step_time_s": 1.0}},
        workload={"param_bytes": LLAMA_7B_BYTES, "timing_only": True},
        stop={"max_updates": 1},
    )


@pytest.mark.parametrize(
    "sharding, psi_bytes, fits",
    [
        ("none", 16, False),
        ("zero1", 4 + 4 + 8 / 8, True),
        ("zero2", 4 + 12 / 8, True),
        ("zero3", 16 / 8, True),
    ],
)
def test_does_a_7b_model_fit_on_8_gpus_of_80_gb(sharding, psi_bytes, fits):
    # Model states per worker, as ZeRO's paper counts them (its section 5.1), for float32 Adam:
    # 4 bytes of parameters, 4 of gradient and 8 of moments a parameter, stage by stage split over 8.
    scenario = fred.validate(seven_billion(sharding))
    before = worker_memory(scenario)  # from the scenario alone, before a run
    assert before is not None
    assert before["total"] == pytest.approx(psi_bytes * LLAMA_7B_BYTES / 4, rel=1e-12)
    assert (before["total"] <= GPU_BYTES) is fits
    summary = fred.run(scenario).summary
    assert summary["memory_per_worker_bytes"] == pytest.approx(before, rel=1e-12)


def test_the_estimate_before_a_run_counts_the_models_own_parameters():
    scenario = fred.validate(ssgd("zero3"))
    run = fred.run(scenario)
    assert worker_memory(scenario) == run.summary["memory_per_worker_bytes"]
    assert run.summary["memory_per_worker_bytes"]["parameters"] == run.summary["param_bytes"] / 4


@pytest.mark.parametrize(
    "strategy, overrides, words",
    [
        ({"aggregation": "ps"}, {}, "with aggregation: ps drop sharding"),
        ({"compression": {"kind": "topk", "ratio": 0.1}}, {}, "drop one of the two"),
        ({}, {"cluster": {"workers": 4, "compute": {"collective_share": 0.2}}}, "collective_share"),
        ({}, {"cluster": {"workers": 4, "workers_per_device": 2}}, "workers_per_device"),
        ({}, {"faults": {"worker_crash": [{"worker": 1, "at_s": 0.05}]}}, "drop faults.worker_crash"),
    ],
)
def test_what_sharding_does_not_model_is_refused_with_the_fix(strategy, overrides, words):
    data = ssgd("zero3", **overrides)
    data["strategy"].update(strategy)
    with pytest.raises((ScenarioError, ValueError), match=words):
        fred.validate(data)
