"""Nodes of several devices and devices of several workers: who shares which link and which device."""

from __future__ import annotations

import numpy as np
import pytest
import simpy

import fred
from fred.scenario.loading import ScenarioError
from fred.scenario.schema import FaultsConfig, NetworkConfig
from fred.simulation.compute import ComputeModel
from fred.simulation.engine import Simulation
from fred.simulation.network import Network
from fred.simulation.worker import Worker
from tests.conftest import tiny

NIC = dict(latency_s=50e-6, bandwidth_bps=1.25e9)
INTRA = dict(latency_s=2e-6, bandwidth_bps=1e11)


def cluster(
    workers: int,
    devices_per_node: int = 1,
    workers_per_device: int = 1,
    faults=None,
    sharing: str = "fair",
    host_overhead_s: float = 0.0,
) -> Simulation:
    net = Network(
        NetworkConfig(intra_node=INTRA, sharing=sharing, **NIC), workers_per_device, devices_per_node
    )
    crew = [Worker(i, lambda: np.arange(1)) for i in range(workers)]
    scenario = fred.validate(
        tiny(
            cluster={
                "workers": workers,
                "devices_per_node": devices_per_node,
                "workers_per_device": workers_per_device,
                "compute": {"host_overhead_s": host_overhead_s},
            }
        )
    )
    return Simulation(
        simpy.Environment(),
        crew,
        net,
        ComputeModel(scenario),
        None,
        None,
        0,
        0,  # type: ignore[arg-type]
        faults=faults,
    )


def arrivals(sim: Simulation, transfers: list[tuple[int, int, float]]) -> list[float]:
    done = [0.0] * len(transfers)

    def go(k, src, dst, nbytes):
        yield from sim.send(f"worker{src}", f"worker{dst}", nbytes)
        done[k] = sim.now

    for k, t in enumerate(transfers):
        sim.process(go(k, *t))
    sim.env.run()
    return done


def test_inside_a_node_a_transfer_takes_the_devices_link_and_across_nodes_the_nic():
    n = 1e6
    inside, across = arrivals(cluster(4, devices_per_node=2), [(0, 1, n), (2, 1, n)])
    assert inside == pytest.approx(INTRA["latency_s"] + n / INTRA["bandwidth_bps"], rel=1e-12)
    assert across == pytest.approx(NIC["latency_s"] + n / NIC["bandwidth_bps"], rel=1e-12)


def test_the_workers_of_a_node_share_its_nic():
    n = 1e6
    alone = NIC["latency_s"] + n / NIC["bandwidth_bps"]
    both = NIC["latency_s"] + 2 * n / NIC["bandwidth_bps"]
    fair = arrivals(cluster(4, devices_per_node=2), [(0, 2, n), (1, 3, n)])  # both leave node 0 at once
    assert fair == pytest.approx([both, both], rel=1e-12)  # at half its rate each
    first, second = arrivals(cluster(4, devices_per_node=2, sharing="fcfs"), [(0, 2, n), (1, 3, n)])
    assert (first, second) == pytest.approx((alone, both), rel=1e-12)  # one after the other
    flat = arrivals(cluster(4), [(0, 2, n), (1, 3, n)])  # one NIC each: side by side
    assert flat == pytest.approx([alone, alone], rel=1e-12)


def test_workers_on_one_device_take_turns_computing():
    sim = cluster(4, devices_per_node=1, workers_per_device=2)
    step_s = sim.compute_model.duration_s(0, 0.0)
    done, waits = {}, []
    sim.tracers.append(
        lambda kind, entity, s, e, nbytes, peer: waits.append((entity, s, e)) if kind == "wait" else None
    )

    def step(w):
        yield from sim.compute(w, None)
        done[w.index] = sim.now

    for w in sim.workers:
        sim.process(step(w))
    sim.env.run()
    assert done == pytest.approx({0: step_s, 1: 2 * step_s, 2: step_s, 3: 2 * step_s}, rel=1e-12)
    assert [(e, s) for e, s, _ in waits] == [
        ("worker1", 0.0),
        ("worker3", 0.0),
    ]  # the second of each device waited


@pytest.mark.parametrize("workers_per_device", [1, 2, 4])
def test_host_overhead_runs_off_a_shared_device_beside_the_others_device_time(workers_per_device):
    """k processes, each step 0.01 s on the device and 0.004 s on the host, for three steps each:
    the host parts overlap the others' device time, so the device is the bottleneck when
    k * 0.01 >= 0.01 + 0.004 and each process then steps every k * 0.01 s."""
    sim = cluster(workers_per_device, workers_per_device=workers_per_device, host_overhead_s=0.004)
    device_s, host_s = 0.01, 0.004
    done = {}

    def steps(w):
        for _ in range(3):
            yield from sim.compute(w, None)
        done[w.index] = sim.now

    for w in sim.workers:
        sim.process(steps(w))
    sim.env.run()
    if workers_per_device == 1:  # no sharing: host and device time add, as on a flat cluster
        assert done == pytest.approx({0: 3 * (device_s + host_s)}, rel=1e-12)
    else:  # all start their host part at 0; then the device serves them in turn, 3 rounds of k
        k = workers_per_device
        assert max(done.values()) == pytest.approx(host_s + 3 * k * device_s, rel=1e-12)
        assert min(done.values()) == pytest.approx(host_s + 2 * k * device_s + device_s, rel=1e-12)


def test_degrading_a_worker_on_a_shared_nic_degrades_its_node():
    faults = FaultsConfig(link_degrade=[{"entity": "worker0", "at_s": 0.0, "bandwidth_factor": 0.5}])
    sim = cluster(4, devices_per_node=2, faults=faults)
    sim.faults.start()
    n = 1e6
    done = {}

    def later(src, dst):
        yield sim.env.timeout(1e-3)  # after the degradation took hold
        yield from sim.send(f"worker{src}", f"worker{dst}", n)
        done[src] = sim.now - 1e-3

    sim.process(later(1, 3))  # worker 1 shares worker 0's NIC
    sim.env.run()
    assert done[1] == pytest.approx(NIC["latency_s"] + n / (0.5 * NIC["bandwidth_bps"]), rel=1e-12)


def test_flat_is_the_default_and_changes_nothing():
    base = fred.run(
        fred.validate(tiny(strategy={"name": "ssgd"}, cluster={"workers": 4}, stop={"max_updates": 3}))
    )
    explicit = fred.run(
        fred.validate(
            tiny(
                strategy={"name": "ssgd"},
                stop={"max_updates": 3},
                cluster={"workers": 4, "devices_per_node": 1, "workers_per_device": 1},
            )
        )
    )
    assert base.summary["params_sha256"] == explicit.summary["params_sha256"]
    assert base.events.equals(explicit.events)


@pytest.mark.parametrize("strategy", ["ssgd", "asgd", "sgp", "hpsgd", "local_sgd"])
def test_strategies_run_on_nodes_of_shared_devices(strategy):
    r = fred.run(
        fred.validate(
            tiny(
                strategy={"name": strategy},
                stop={"max_updates": 4},
                cluster={"workers": 8, "devices_per_node": 2, "workers_per_device": 2},
            )
        )
    )
    assert r.summary["status"] == "completed"


@pytest.mark.parametrize(
    "cluster_cfg, words",
    [
        ({"workers": 6, "devices_per_node": 4}, "6 workers do not fill whole nodes of devices_per_node 4"),
        ({"workers": 4, "workers_per_device": 3}, "give a multiple of 3 workers"),
        ({"workers": 4, "devices_per_node": 0}, "devices_per_node"),
    ],
)
def test_workers_that_do_not_fill_the_nodes_are_refused_with_the_fix(cluster_cfg, words):
    with pytest.raises(ScenarioError, match=words):
        fred.validate(tiny(cluster=cluster_cfg))


def test_a_hierarchical_all_reduce_on_nodes_of_one_worker_is_refused_with_the_fix():
    with pytest.raises(ScenarioError, match="give nodes several workers"):
        fred.validate(tiny(network={"hierarchical": True}))


def test_a_partial_intra_node_link_keeps_the_other_default():
    cfg = NetworkConfig(intra_node={"bandwidth_bps": 5e10})
    assert (cfg.intra_node.latency_s, cfg.intra_node.bandwidth_bps) == (5e-6, 5e10)


def test_transport_efficiency_slows_the_nics_not_the_devices_links():
    n = 1e6
    net = Network(NetworkConfig(intra_node=INTRA, efficiency=0.5, **NIC), 1, 2)
    sim = Simulation(
        simpy.Environment(), [Worker(i, lambda: np.arange(1)) for i in range(4)], net, None, None, None, 0, 0
    )  # type: ignore[arg-type]
    inside, across = arrivals(sim, [(0, 1, n), (2, 1, n)])
    assert inside == pytest.approx(INTRA["latency_s"] + n / INTRA["bandwidth_bps"], rel=1e-12)
    assert across == pytest.approx(NIC["latency_s"] + n / (0.5 * NIC["bandwidth_bps"]), rel=1e-12)


@pytest.mark.parametrize("algorithm", ["ring", "recursive_doubling", "halving_doubling", "binary_tree"])
def test_closed_forms_take_the_efficiency(algorithm):
    from fred.simulation.collectives import allreduce_time_s
    from tests.test_network import bare_sim, run_allreduce

    net = dict(efficiency=0.7, allreduce=algorithm, reduce_s_per_byte=1e-10, **NIC)
    finished = run_allreduce(bare_sim(6, **net), 5e7)
    assert max(finished) == pytest.approx(allreduce_time_s(algorithm, 6, 5e7, NetworkConfig(**net)), rel=1e-9)


def test_host_overhead_is_added_to_every_step_whatever_the_speed():
    scenario = fred.validate(
        tiny(
            cluster={
                "workers": 2,
                "speed": {1: 2.0},
                "compute": {"step_time_s": 0.01, "host_overhead_s": 0.003},
            }
        )
    )
    compute = ComputeModel(scenario)
    assert [compute.duration_s(w) for w in (0, 1)] == pytest.approx([0.013, 0.008], rel=1e-12)


def test_a_profile_goes_with_a_host_overhead(tmp_path):
    from fred.scenario.loading import load_scenario

    (tmp_path / "v100.yaml").write_text("step_time_s: 0.05\n")
    (tmp_path / "s.yaml").write_text(
        "name: s\nstrategy: {name: sgd, lr: 0.1}\nstop: {max_updates: 1}\n"
        "cluster: {compute: {profile: v100.yaml, host_overhead_s: 0.01}}\n"
    )
    compute = load_scenario(tmp_path / "s.yaml").cluster.compute
    assert (compute.step_time_s, compute.host_overhead_s) == (0.05, 0.01)
