"""Fairly shared links: max–min rates, transfers that slow each other, and the closed forms
that idle links must still give, for every algorithm and both ways of sharing."""

from __future__ import annotations

import numpy as np
import pytest
import simpy

import fred
from fred.scenario.loading import ScenarioError
from fred.scenario.schema import FaultsConfig, NetworkConfig
from fred.simulation.collectives import ALGORITHMS, allreduce_time_s, hierarchical_time_s
from fred.simulation.engine import Simulation
from fred.simulation.flows import Channel, Flow, progressive_filling
from fred.simulation.network import Network
from fred.simulation.worker import Worker
from tests.conftest import tiny
from tests.test_network import run_allreduce

NET = dict(latency_s=25e-6, bandwidth_bps=1.25e9, reduce_s_per_byte=2e-10, sync_s=1e-4)
FAIR = dict(NET, sharing="fair")


def sim_of(p: int, devices_per_node: int = 1, faults: FaultsConfig | None = None, **network) -> Simulation:
    cfg = NetworkConfig(**network)
    crew = [Worker(i, lambda: np.arange(1)) for i in range(p)]
    return Simulation(
        simpy.Environment(),
        crew,
        Network(cfg, 1, devices_per_node),
        None,
        None,
        None,
        0,
        0,  # type: ignore[arg-type]
        faults=faults,
    )


def sends(sim: Simulation, transfers: list[tuple[str, str, float, float]]) -> list[float]:
    """Run ``(src, dst, nbytes, at_s)`` transfers; each one's arrival time."""
    done = [0.0] * len(transfers)

    def go(k, src, dst, nbytes, at_s):
        yield sim.env.timeout(at_s)
        yield from sim.send(src, dst, nbytes)
        done[k] = sim.now

    for k, t in enumerate(transfers):
        sim.process(go(k, *t))
    sim.env.run()
    return done


def flow(*channels: Channel) -> Flow:
    return Flow(channels, 1.0, 0.0, 0.0, lambda: None)


def test_progressive_filling_gives_the_textbook_max_min_rates():
    # Links of capacity 1 and 2; A crosses both, B only the first, C only the second:
    # the first link is the bottleneck (A = B = 1/2), and C takes what A leaves of the second.
    one, two = Channel(lambda: 1.0), Channel(lambda: 2.0)
    a, b, c = flow(one, two), flow(one), flow(two)
    for f in (a, b, c):
        for ch in f.channels:
            ch.flows[f] = None
    assert progressive_filling([a, b, c]) == [0.5, 0.5, 1.5]


@pytest.mark.parametrize("sharing", ["fair", "fcfs"])
@pytest.mark.parametrize("algorithm", list(ALGORITHMS))
@pytest.mark.parametrize("p", [2, 3, 5, 8, 16, 64])
def test_idle_links_give_the_closed_form_whichever_the_sharing(sharing, algorithm, p):
    net = dict(NET, allreduce=algorithm, sharing=sharing)
    finished = run_allreduce(sim_of(p, **net), 102e6)
    assert finished == [finished[0]] * p
    assert finished[0] == pytest.approx(
        allreduce_time_s(algorithm, p, 102e6, NetworkConfig(**net)), rel=1e-9, abs=0
    )


@pytest.mark.parametrize("across", list(ALGORITHMS))
@pytest.mark.parametrize("p, per_node", [(2, 2), (8, 4), (16, 4), (64, 8)])
def test_hierarchical_on_fair_links_gives_its_closed_form(across, p, per_node):
    cfg = dict(
        FAIR, allreduce=across, hierarchical=True, intra_node={"latency_s": 3e-6, "bandwidth_bps": 5e10}
    )
    finished = run_allreduce(sim_of(p, per_node, **cfg), 102e6)
    expected = hierarchical_time_s(across, p // per_node, per_node, 102e6, NetworkConfig(**cfg))
    assert max(finished) == pytest.approx(expected, rel=1e-9, abs=0)


# Algorithms that keep every link busy in every round; a tree leaves most links idle most of
# the time, so two trees sharing each round take twice as long as one, above this bound.
@pytest.mark.parametrize("algorithm", ["ring", "recursive_doubling", "halving_doubling"])
def test_two_allreduces_on_the_same_links_finish_together_at_the_busiest_links_bound(algorithm):
    p, n = 8, 1e8
    sim = sim_of(p, **dict(FAIR, allreduce=algorithm))
    finished: list[float] = []

    def member(w, group):
        yield from sim.allreduce(group, w, n)
        finished.append(sim.now)

    first, second = sim.workers, list(sim.workers)  # two groups of the same members: two collectives at once
    for group in (first, second):
        for w in group:
            sim.process(member(w, group))
    sim.env.run()
    alone = allreduce_time_s(algorithm, p, n, NetworkConfig(**FAIR, allreduce=algorithm))
    busiest_bytes = max(_sent_per_link(algorithm, p, n))  # each link carries this for each collective
    bound = alone + busiest_bytes / NET["bandwidth_bps"]  # one more collective's bytes on the busiest link
    assert max(finished) == min(finished)  # neither is served first
    assert max(finished) == pytest.approx(bound, rel=0.01)


def _sent_per_link(algorithm: str, p: int, n: float) -> list[float]:
    from fred.simulation.collectives import bytes_sent, ring_phases

    rounds = ring_phases(p) if algorithm == "ring" else ALGORITHMS[algorithm](p)
    return bytes_sent(rounds, p, n)


def test_first_come_first_served_serves_the_first_collective_first():
    p, n = 8, 1e8
    sim = sim_of(p, **dict(NET, sharing="fcfs"))
    finished: dict[int, float] = {}

    def member(w, group, k):
        yield from sim.allreduce(group, w, n)
        finished[k] = sim.now

    for k, group in enumerate((sim.workers, list(sim.workers))):
        for w in group:
            sim.process(member(w, group, k))
    sim.env.run()
    alone = allreduce_time_s("ring", p, n, NetworkConfig(**NET))
    assert finished[0] == pytest.approx(alone, rel=1e-12)  # the first is not slowed at all
    assert finished[1] > 1.9 * alone  # the second waits for it


def test_an_incast_into_a_server_shares_its_downlink():
    n, bw = 1e6, NET["bandwidth_bps"]
    fair = sends(sim_of(4, **FAIR), [(f"worker{i}", "worker3", n, 0.0) for i in range(3)])
    fcfs = sends(
        sim_of(4, **dict(NET, sharing="fcfs")), [(f"worker{i}", "worker3", n, 0.0) for i in range(3)]
    )
    assert fair == pytest.approx([3 * n / bw + NET["latency_s"]] * 3, rel=1e-12)  # all three at a third each
    assert fcfs == pytest.approx(
        [(k + 1) * n / bw + NET["latency_s"] for k in range(3)], rel=1e-12
    )  # one after another


def test_a_flow_that_joins_later_takes_half_and_the_first_speeds_up_when_it_ends():
    n, bw, lat = 1e6, NET["bandwidth_bps"], NET["latency_s"]
    d = n / bw
    first, second = sends(
        sim_of(3, **FAIR), [("worker0", "worker2", n, 0.0), ("worker1", "worker2", n, d / 2)]
    )
    # alone for d/2 (half sent), then both at bw/2: the first's other half takes d, the second's
    # first half too; the second then sends its last half alone in d/2
    assert first == pytest.approx(1.5 * d + lat, rel=1e-12)
    assert second == pytest.approx(2.0 * d + lat, rel=1e-12)


def test_a_degraded_link_slows_a_flow_already_on_it():
    n, bw, lat = 1e6, NET["bandwidth_bps"], NET["latency_s"]
    d = n / bw
    faults = FaultsConfig(
        link_degrade=[{"entity": "worker0", "at_s": d / 2, "duration_s": 10.0, "bandwidth_factor": 0.25}]
    )
    sim = sim_of(2, faults=faults, **FAIR)
    sim.faults.start()
    (arrived,) = sends(sim, [("worker0", "worker1", n, 0.0)])
    assert arrived == pytest.approx(
        d / 2 + (n / 2) / (0.25 * bw) + lat, rel=1e-12
    )  # the second half at a quarter


def test_an_oversubscribed_switch_shares_its_core_among_flows_between_nodes():
    n, bw, lat = 1e6, NET["bandwidth_bps"], NET["latency_s"]
    ring = [(f"worker{i}", f"worker{(i + 1) % 4}", n, 0.0) for i in range(4)]  # four flows on disjoint NICs
    free = sends(sim_of(4, **FAIR), ring)
    blocking = sends(sim_of(4, **dict(FAIR, oversubscription=4.0)), ring)  # core: 4 NICs' worth / 4
    assert free == pytest.approx([n / bw + lat] * 4, rel=1e-12)
    assert blocking == pytest.approx([4 * n / bw + lat] * 4, rel=1e-12)


def test_inside_a_node_flows_do_not_cross_the_core():
    n = 1e6
    cfg = dict(FAIR, oversubscription=100.0, intra_node={"latency_s": 1e-6, "bandwidth_bps": 1e10})
    (inside,) = sends(sim_of(4, 2, **cfg), [("worker0", "worker1", n, 0.0)])
    assert inside == pytest.approx(1e-6 + n / 1e10, rel=1e-12)


@pytest.mark.parametrize("p", [2, 64])
def test_a_ring_is_two_flows_whatever_its_size(p):
    started = []
    sim = sim_of(p, **FAIR)
    start = sim.flows.start
    sim.flows.start = lambda *a: started.append(1) or start(*a)  # type: ignore[method-assign]
    run_allreduce(sim, 1e8)
    assert len(started) == 2  # one per phase, across every member's link


def test_a_ring_moves_at_its_slowest_links_pace():
    n, p = 1e8, 8
    faults = FaultsConfig(
        link_degrade=[{"entity": "worker3", "at_s": 0.0, "duration_s": 100.0, "bandwidth_factor": 0.5}]
    )
    sim = sim_of(p, faults=faults, **FAIR)
    sim.faults.start()
    finished = run_allreduce(sim, n)
    slow = NetworkConfig(**dict(FAIR, bandwidth_bps=NET["bandwidth_bps"] / 2))
    assert max(finished) == pytest.approx(allreduce_time_s("ring", p, n, slow), rel=1e-9)


@pytest.mark.parametrize(
    "network, words",
    [
        ({"oversubscription": 2.0, "sharing": "fcfs"}, "needs sharing: fair"),
        ({"oversubscription": 0.5, "sharing": "fair"}, "oversubscription"),
        ({"oversubscription": 0, "sharing": "fair"}, "oversubscription"),
        ({"sharing": "tcp"}, "fair"),
    ],
)
def test_bad_sharing_is_refused_with_the_fix(network, words):
    with pytest.raises(ScenarioError, match=words):
        fred.validate(tiny(network=network))


@pytest.mark.parametrize("strategy", ["ssgd", "asgd", "sgp", "pipe_sgd", "grouped_hybrid"])
def test_strategies_on_fair_links_are_deterministic_and_complete(strategy):
    scenario = tiny(
        strategy={"name": strategy},
        cluster={"workers": 4},
        stop={"max_updates": 6},
        network={"sharing": "fair"},
        faults={"message_loss": {"probability": 0.2, "retransmit_timeout_s": 0.01}},
    )
    first, second = fred.run(fred.validate(scenario)), fred.run(fred.validate(scenario))
    assert first.summary["status"] == "completed"
    assert first.summary["params_sha256"] == second.summary["params_sha256"]
    assert first.events.equals(second.events)
    assert (first.events["kind"] == "lost").any()  # the loss path ran
