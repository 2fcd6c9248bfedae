"""Sites joined by wide-area links, and TCP-like sharing by round-trip time: each against its closed form."""

from __future__ import annotations

import numpy as np
import pytest
import simpy

import fred
from fred.scenario.loading import ScenarioError
from fred.simulation.compute import ComputeModel
from fred.simulation.engine import Simulation
from fred.simulation.network import Network
from fred.simulation.worker import Worker
from tests.conftest import tiny

NIC_BPS, NIC_S, WAN_BPS, WAN_S = 1.25e9, 50e-6, 1.25e8, 0.03


def _sim(workers: int = 4, server: bool = False, **network) -> Simulation:
    net = {
        "latency_s": NIC_S,
        "bandwidth_bps": NIC_BPS,
        "sites": {"nodes": [workers // 2, workers // 2], "latency_s": WAN_S, "bandwidth_bps": WAN_BPS},
    } | network
    scenario = fred.validate(tiny(cluster={"workers": workers}, network=net))
    crew = [Worker(i, lambda: np.arange(1)) for i in range(workers)]
    links = Network(scenario.network)
    if server:
        links.add("server", server=True)
    return Simulation(simpy.Environment(), crew, links, ComputeModel(scenario), None, None, 0, 0)  # type: ignore[arg-type]


def _sends(sim: Simulation, pairs: list[tuple[str, str]], nbytes: float) -> dict[tuple[str, str], float]:
    done: dict[tuple[str, str], float] = {}

    def send(src: str, dst: str):
        yield from sim.send(src, dst, nbytes)
        done[(src, dst)] = sim.now

    for src, dst in pairs:
        sim.process(send(src, dst))
    sim.env.run()
    return done


def test_a_transfer_between_sites_runs_at_the_wide_area_rate_and_pays_its_latency():
    n = 1e8
    done = _sends(_sim(), [("worker0", "worker2"), ("worker1", "worker0")], n)
    assert done[("worker0", "worker2")] == pytest.approx(NIC_S + WAN_S + n / WAN_BPS, rel=1e-12)
    assert done[("worker1", "worker0")] == pytest.approx(
        NIC_S + n / NIC_BPS, rel=1e-12
    )  # inside site 0: no WAN


def test_flows_leaving_a_site_share_its_wide_area_link():
    n = 1e8
    done = _sends(_sim(), [("worker0", "worker2"), ("worker1", "worker3")], n)
    assert list(done.values()) == pytest.approx([NIC_S + WAN_S + 2 * n / WAN_BPS] * 2, rel=1e-12)


def test_a_flat_ring_across_two_sites_moves_at_the_wide_area_rate():
    p, n = 4, 1e8
    sim = _sim(p)
    for w in sim.workers:
        sim.process(sim.allreduce(sim.workers, w, n))
    sim.env.run()
    # each phase: (p-1)/p n at the slowest link's rate, p-1 latencies of the slowest hop
    assert sim.now == pytest.approx(2 * ((p - 1) / p * n / WAN_BPS + (p - 1) * (NIC_S + WAN_S)), rel=1e-9)


def test_a_hierarchical_all_reduce_by_site_crosses_the_wide_area_once_each_way():
    p, n = 4, 1e8
    sim = _sim(p, hierarchical=True, hierarchy="site")
    for w in sim.workers:
        sim.process(sim.allreduce(sim.workers, w, n))
    sim.env.run()
    inside = NIC_S + n / NIC_BPS  # two members a site: one transfer to the leader, one back
    across = 2 * (n / 2 / WAN_BPS + NIC_S + WAN_S)  # a ring of the two leaders: two phases of n/2
    assert sim.now == pytest.approx(2 * inside + across, rel=1e-9)


def test_rtt_sharing_gives_the_nearer_flow_more_of_a_link_as_cm02_does():
    # SimGrid's CM02 on one 1.25e9 B/s uplink: 100 MB with a 50 us route beside 100 MB with a 1 ms
    # route finish at 0.0840 s and 0.16005 s; equal shares give 0.16005 s and 0.161 s.
    def run(sharing: str) -> dict:
        scenario = fred.validate(
            tiny(
                cluster={"workers": 2},
                network={
                    "sharing": sharing,
                    "latency_s": 50e-6,
                    "bandwidth_bps": 1.25e9,
                    "server": {"latency_s": 1e-3},
                },
            )
        )
        crew = [Worker(i, lambda: np.arange(1)) for i in range(2)]
        links = Network(scenario.network)
        links.add("server", server=True)
        sim = Simulation(simpy.Environment(), crew, links, ComputeModel(scenario), None, None, 0, 0)  # type: ignore[arg-type]
        return _sends(sim, [("worker0", "worker1"), ("worker0", "server")], 1e8)

    rtt, fair = run("rtt"), run("fair")
    near_rate = 1.25e9 * (1 / 50e-6) / (1 / 50e-6 + 1 / 1e-3)
    alone_bytes = (1e-3 - 50e-6) * 1.25e9  # the near flow alone until the far one's bytes start
    near_s = 1e-3 + (1e8 - alone_bytes) / near_rate
    assert rtt[("worker0", "worker1")] == pytest.approx(near_s, rel=1e-12) and round(near_s, 4) == 0.0840
    far_left = 1e8 - (near_s - 1e-3) * (1.25e9 - near_rate)
    assert rtt[("worker0", "server")] == pytest.approx(near_s + far_left / 1.25e9, rel=1e-9)
    assert round(rtt[("worker0", "server")], 5) == 0.16005
    assert fair[("worker0", "worker1")] == pytest.approx(0.16005, rel=1e-12)
    assert fair[("worker0", "server")] == pytest.approx(0.161, rel=1e-12)


def test_equal_latencies_share_alike_under_rtt_and_fair():
    n = 1e8
    rtt = _sends(_sim(sharing="rtt"), [("worker0", "worker2"), ("worker1", "worker3")], n)
    fair = _sends(_sim(), [("worker0", "worker2"), ("worker1", "worker3")], n)
    assert list(rtt.values()) == pytest.approx(list(fair.values()), rel=1e-12)


def test_a_degraded_site_link_slows_what_crosses_it():
    data = tiny(
        cluster={"workers": 4, "compute": {"step_time_s": 0.01}},
        strategy={"name": "arsgd"},
        workload={"param_bytes": 10**7, "timing_only": True},
        stop={"max_updates": 4},
        network={"sites": {"nodes": [2, 2]}},
        faults={"link_degrade": [{"entity": "site1", "at_s": 0.0, "bandwidth_factor": 0.5}]},
    )
    slow = fred.run(fred.validate(data))
    data["faults"] = {}
    healthy = fred.run(fred.validate(data))
    assert slow.summary["sim_time_s"] > healthy.summary["sim_time_s"]
    assert slow.summary["links_degraded"] == 1
    again = fred.run(fred.validate(data))  # deterministic across runs
    assert again.summary["sim_time_s"] == healthy.summary["sim_time_s"]


@pytest.mark.parametrize(
    "network, cluster, words",
    [
        ({"sites": {"nodes": [2, 0]}}, {"workers": 2}, "site 1 has no nodes"),
        ({"sites": {"nodes": [2, 1]}}, {"workers": 4}, "give sites that add up to 4 nodes"),
        ({"sites": {"nodes": [2, 2]}, "sharing": "fcfs"}, {"workers": 4}, "sites need sharing: fair or rtt"),
        ({"hierarchical": True, "hierarchy": "site"}, {"workers": 4}, "needs network.sites"),
        ({"sites": {"nodes": [1]}}, {"workers": 1}, "at least 2"),
    ],
)
def test_bad_sites_are_refused_with_the_fix(network, cluster, words):
    with pytest.raises(ScenarioError, match=words):
        fred.validate(tiny(cluster=cluster, network=network))


def test_a_fault_on_a_site_that_does_not_exist_names_the_sites():
    with pytest.raises(ScenarioError, match="site0, site1"):
        fred.validate(
            tiny(
                cluster={"workers": 4},
                strategy={"name": "arsgd"},
                network={"sites": {"nodes": [2, 2]}},
                faults={"link_degrade": [{"entity": "site7", "at_s": 0.0, "bandwidth_factor": 0.5}]},
            )
        )


def test_the_bytes_between_sites_are_what_crosses_the_wide_area_links():
    # A flat ring of 4 over 2 sites crosses each site's uplink once a phase: 2 phases x (p-1)/p n x 2 sites;
    # hierarchical by site, the leaders' ring of 2 moves n/2 a phase over each uplink.
    n = 10**7

    def run(**network):
        data = tiny(
            cluster={"workers": 4, "compute": {"step_time_s": 0.01}},
            strategy={"name": "arsgd"},
            workload={"param_bytes": n, "timing_only": True},
            stop={"max_updates": 3},
            network={"sites": {"nodes": [2, 2]}} | network,
        )
        return fred.run(fred.validate(data)).summary

    flat, by_site = run(), run(hierarchical=True, hierarchy="site")
    assert flat["bytes_between_sites"] == pytest.approx(3 * 2 * 2 * 3 / 4 * n, rel=1e-12)
    assert by_site["bytes_between_sites"] == pytest.approx(3 * 2 * 2 * n / 2, rel=1e-12)
    assert "bytes_between_sites" not in fred.run(fred.validate(tiny(stop={"max_updates": 1}))).summary


def test_stragglers_and_crashes_act_across_sites_as_inside_one():
    base = tiny(
        cluster={"workers": 4, "compute": {"step_time_s": 0.01}},
        strategy={"name": "arsgd"},
        workload={"param_bytes": 10**6, "timing_only": True},
        stop={"max_updates": 4},
        network={"sites": {"nodes": [2, 2]}},
    )
    plain = fred.run(fred.validate(base)).summary
    slow = fred.run(
        fred.validate(
            {**base, "cluster": {**base["cluster"], "stragglers": [{"worker": 3, "slow_factor": 5}]}}
        )
    )
    assert slow.summary["sim_time_s"] > plain["sim_time_s"]
    crash = {**base, "faults": {"worker_crash": [{"worker": 2, "at_s": 0.005}], "sync_timeout_s": 0.5}}
    crashed = fred.run(fred.validate(crash)).summary
    assert crashed["status"] == "completed" and crashed["worker_crashes"] == 1
