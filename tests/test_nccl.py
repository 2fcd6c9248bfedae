"""NCCL's all-reduce (its tuning model's choice and time), a node stated by its bus bandwidth, and
what a data-parallel step costs around its buckets: each against its closed form."""

from __future__ import annotations

import math

import numpy as np
import pytest
import simpy

import fred
from fred.scenario.loading import ScenarioError
from fred.scenario.schema import NetworkConfig
from fred.simulation import nccl
from fred.simulation.collectives import allreduce_time_s
from fred.simulation.compute import ComputeModel
from fred.simulation.engine import Simulation
from fred.simulation.network import Network
from fred.simulation.worker import Worker
from tests.conftest import tiny
from tests.test_buckets import two_bucket_simulation

NODE = nccl.Fabric(ranks=8, nodes=1, intra_busbw_bps=150e9, inter_busbw_bps=50e9)
CLUSTER = nccl.Fabric(ranks=64, nodes=8, intra_busbw_bps=150e9, inter_busbw_bps=50e9)


def test_a_ring_inside_one_node_is_nccls_latency_plus_the_bytes_at_its_algorithm_bandwidth():
    n = 25 * 2**20
    got = nccl.estimate(n, "ring", "Simple", NODE)
    latency_s = (8.4 + 2 * 7 * 3.4) * 1e-6  # base + 2(p-1) NVLink steps
    algbw = 150e9 * 8 / (2 * 7)  # the bus bandwidth times p / 2(p-1)
    assert got.latency_s == pytest.approx(latency_s, rel=1e-12)
    assert got.time_s == pytest.approx(latency_s + n / algbw, rel=1e-12)


def test_across_nodes_the_ring_takes_the_nics_rate_and_pays_the_network_steps():
    n = 25 * 2**20
    got = nccl.estimate(n, "ring", "LL128", CLUSTER)
    steps, across = 2 * 63, 2 * 7
    latency_s = (10.0 + (steps - across) * 1.9 + across * 4.0) * 1e-6
    algbw = 50e9 * 0.92 * 64 / steps  # the NICs bound the bus; LL128 moves 92 % of it
    assert got.time_s == pytest.approx(latency_s + n / algbw, rel=1e-12)
    simple = nccl.estimate(
        n, "ring", "Simple", CLUSTER
    )  # a large message: the ring's plateau, 1.9x its latency
    assert simple.latency_s == pytest.approx(
        1.9 * (8.4 + (steps - across) * 3.4 + across * 9.6) * 1e-6, rel=1e-12
    )


def test_the_tree_is_half_the_bus_bandwidth_with_log2_nodes_network_steps_and_its_size_correction():
    n = 2**20  # 64 B x 2^14: the correction table's entry 14
    got = nccl.estimate(n, "tree", "LL128", CLUSTER)
    latency_s = (4.4 + 2 * ((8 - 1) * 1.2 + 3 * 8.5)) * 1e-6
    algbw = min(50e9 * 0.9, 80e9) * 0.915 * 0.5 * nccl.TREE_CORRECTION["LL128"][14]
    assert got.latency_s == pytest.approx(latency_s, rel=1e-12)
    assert got.time_s == pytest.approx(latency_s + n / algbw, rel=1e-12)


def test_nccl_picks_low_latency_protocols_for_small_messages_and_bandwidth_for_large_ones():
    small, medium, large = (nccl.choose(n, CLUSTER) for n in (2**12, 2**20, 2**28))
    assert (small.algorithm, small.protocol) == ("tree", "LL")
    assert (medium.algorithm, medium.protocol) == ("tree", "LL128")
    assert large.algorithm == "ring" and large.protocol in ("LL128", "Simple")
    for n in (2**12, 2**20, 2**28):  # the pick is the least time of every pair
        pick = nccl.choose(n, CLUSTER)
        assert pick.time_s == min(
            nccl.estimate(n, a, p, CLUSTER).time_s for a in nccl.NCCL_ALGORITHMS for p in nccl.PROTOCOLS
        )
    only_ring = nccl.choose(2**12, CLUSTER, algorithms=["ring"], protocols=["Simple"])
    assert (only_ring.algorithm, only_ring.protocol) == ("ring", "Simple")
    assert nccl.choose(2**20, nccl.Fabric(1, 1, 1e9, 1e9)).time_s == 0.0  # alone: nothing to do


def test_an_unknown_algorithm_or_protocol_is_refused():
    with pytest.raises(ValueError, match="algorithms: ring, tree"):
        nccl.estimate(1e6, "butterfly", "LL", NODE)


def _ddp(workers: int, **extra) -> dict:
    cluster = {"workers": workers, "devices_per_node": workers, "compute": {"step_time_s": 0.1}}
    data = tiny(
        strategy={"name": "arsgd"},
        cluster=cluster,
        stop={"max_updates": 2},
        workload={"profile": "resnet50", "timing_only": True},
        network={"allreduce": "nccl", "intra_node": {"busbw_bps": 1.5e11}},
    )
    for key, value in extra.items():
        data[key] = {**data.get(key, {}), **value}
    return data


def test_a_run_with_nccl_takes_the_step_plus_nccls_time_and_reports_its_pick():
    result = fred.run(fred.validate(_ddp(8)))
    pick = nccl.choose(102_400_000, nccl.Fabric(8, 1, 1.5e11, 1.25e9))
    assert result.summary["sim_time_s"] == pytest.approx(2 * (0.1 + pick.time_s), rel=1e-9)
    assert result.summary["nccl"] == [
        f"1.024e+08 bytes over 8 ranks on 1 nodes: {pick.algorithm}/{pick.protocol}, "
        f"{pick.time_s * 1e3:.4g} ms"
    ]


def test_a_nodes_bus_bandwidth_sets_its_devices_links():
    p, n = 4, 1e8
    scenario = fred.validate(
        tiny(
            cluster={"workers": p, "devices_per_node": p},
            network={"sharing": "fcfs", "intra_node": {"busbw_bps": 1e11, "latency_s": 0.0}},
        )
    )
    crew = [Worker(i, lambda: np.arange(1)) for i in range(p)]
    net = Network(scenario.network, devices_per_node=p)
    sim = Simulation(simpy.Environment(), crew, net, ComputeModel(scenario), None, None, 0, 0)  # type: ignore[arg-type]
    for w in crew:
        sim.process(sim.allreduce(crew, w, n))
    sim.env.run()
    assert sim.now == pytest.approx(2 * (p - 1) / p * n / 1e11, rel=1e-9)  # nccl-tests' busbw, read back


@pytest.mark.parametrize("share, overhead_s", [(0.0, 2e-3), (0.25, 0.0), (0.25, 2e-3)])
def test_a_bucketed_step_pays_each_buckets_overhead_and_slows_while_its_collectives_fly(share, overhead_s):
    # Two buckets: the first ready at 0.4 of the step (after its copy), all-reduced while the backward
    # pass goes on at 1 - share of its speed; the last after the step and its own copy.
    p, step_s, ready, first_bytes, last_bytes = 4, 0.1, 0.4, 2e7, 1e7
    cfg = NetworkConfig(sharing="fcfs", latency_s=1e-5, bandwidth_bps=1e9)
    compute = {"step_time_s": step_s, "collective_share": share, "bucket_overhead_s": overhead_s}
    scenario = fred.validate(tiny(strategy={"name": "arsgd"}, cluster={"workers": p, "compute": compute}))
    sim = two_bucket_simulation(scenario, cfg, first_bytes, last_bytes, ready)
    crew = sim.workers
    for w in crew:
        sim.process(sim.backprop_allreduce(w, None, sim.workers))
    sim.env.run()
    first, last = (allreduce_time_s("ring", p, n, cfg) for n in (first_bytes, last_bytes))
    assert first < (1 - ready) * step_s  # the first all-reduce ends inside the backward pass
    # while it flies the step loses share x its time; each bucket's copy is on the step
    expected = step_s + 2 * overhead_s + share * first + last
    assert sim.now == pytest.approx(expected, rel=1e-9)


def test_interference_off_and_no_bucket_cost_keep_the_bits_of_the_plain_bucketed_step():
    plain = fred.run(fred.validate(_ddp(8)))
    zero = fred.run(
        fred.validate(
            _ddp(
                8,
                cluster={"compute": {"step_time_s": 0.1, "collective_share": 0.0, "bucket_overhead_s": 0.0}},
            )
        )
    )
    assert zero.summary["sim_time_s"] == plain.summary["sim_time_s"]
    assert zero.events.equals(plain.events)


@pytest.mark.parametrize(
    "network, words",
    [
        ({"allreduce": "ring", "nccl": {"protocols": ["LL"]}}, "apply only with allreduce: nccl"),
        ({"allreduce": "nccl", "hierarchical": True}, "drop hierarchical"),
        ({"allreduce": "nccl", "nccl": {"protocols": ["LL256"]}}, "LL128"),
        ({"allreduce": "nccl", "nccl": {"algorithms": []}}, "algorithms"),
        ({"server": {"busbw_bps": 1e9}}, "intra_node.busbw_bps"),
    ],
)
def test_bad_nccl_settings_are_refused_with_the_fix(network, words):
    with pytest.raises(ScenarioError, match=words):
        fred.validate(tiny(network=network))


def test_the_collective_share_must_leave_the_device_some_speed():
    with pytest.raises(ScenarioError, match="collective_share"):
        fred.validate(tiny(cluster={"compute": {"step_time_s": 0.1, "collective_share": 1.0}}))


def test_nccls_log2_of_the_nodes_rounds_down():
    assert nccl.estimate(2**20, "tree", "LL", nccl.Fabric(24, 3, 1e11, 1e10)).latency_s == pytest.approx(
        (4.4 + 2 * ((8 - 1) * 0.52 * 1.8 + math.floor(math.log2(3)) * 5.0)) * 1e-6, rel=1e-12
    )


def test_a_bucket_cost_without_buckets_is_refused_with_the_fix():
    with pytest.raises(ScenarioError, match="drop bucket_overhead_s or use"):
        fred.validate(
            tiny(
                strategy={"name": "asgd"},
                cluster={"compute": {"step_time_s": 0.1, "bucket_overhead_s": 1e-4}},
            )
        )


def test_a_bucket_cost_is_paid_by_the_all_reduced_step_alone():
    # one bucket (no bucket_bytes): its cost once a step, before the whole gradient's all-reduce
    plain = fred.run(fred.validate(_ddp(8)))
    costed = fred.run(
        fred.validate(_ddp(8, cluster={"compute": {"step_time_s": 0.1, "bucket_overhead_s": 1e-3}}))
    )
    assert costed.summary["sim_time_s"] == pytest.approx(plain.summary["sim_time_s"] + 2 * 1e-3, rel=1e-9)
