"""The double binary tree (two trees, two lanes) and lanes in the rounds model.

The parametrized closed-form, sum-bits and hierarchical tests of ``test_collectives.py`` and
``test_flows.py`` run every algorithm, this one included; here is what is particular to it."""

from __future__ import annotations

import pytest

from fred.scenario.schema import NetworkConfig
from fred.simulation.collectives import (
    Step,
    _in_order_tree,
    allreduce_time_s,
    double_binary_tree,
    lanes,
    run_rounds,
)
from tests.test_network import bare_sim, run_allreduce

NET = dict(latency_s=25e-6, bandwidth_bps=1.25e9, reduce_s_per_byte=2e-10, sync_s=1e-4)
SIZES = [2, 3, 5, 6, 7, 8, 16, 64]  # 3, 6 and 7: where one readiness per member made the two trees clash


@pytest.mark.parametrize("sharing", ["fair", "fcfs"])
@pytest.mark.parametrize("p", SIZES)
def test_idle_links_give_the_double_binary_trees_closed_form(sharing, p):
    net = dict(NET, allreduce="double_binary_tree", sharing=sharing)
    finished = run_allreduce(bare_sim(p, **net), 102e6)
    assert finished == [finished[0]] * p
    expected = allreduce_time_s("double_binary_tree", p, 102e6, NetworkConfig(**net))
    assert finished[0] == pytest.approx(expected, rel=1e-9, abs=0)


def test_the_closed_form_by_hand():
    # p = 8 (D = 3): 5 hops up of a half, then the root's hop and two levels of two halves each
    a, n = NET["latency_s"], 102e6
    b, g = 1 / NET["bandwidth_bps"], NET["reduce_s_per_byte"]
    cfg = NetworkConfig(**NET)
    assert allreduce_time_s("double_binary_tree", 8, n, cfg) == pytest.approx(
        5 * (a + n / 2 * b + n / 2 * g) + 3 * a + 5 * n / 2 * b + NET["sync_s"], rel=1e-12
    )
    # p = 6 (D = 2, not a power of two): 4 hops up, 3 latencies and 4 halves down
    assert allreduce_time_s("double_binary_tree", 6, n, cfg) == pytest.approx(
        4 * (a + n / 2 * b + n / 2 * g) + 3 * a + 4 * n / 2 * b + NET["sync_s"], rel=1e-12
    )
    # two members: each sends the other its half and gets the sum back, as in a ring
    assert allreduce_time_s("double_binary_tree", 2, n, cfg) == pytest.approx(
        allreduce_time_s("ring", 2, n, cfg), rel=1e-12
    )


def test_the_first_tree_is_nccls():
    # ncclGetBtree's picture for 14 ranks: 0 -> 8; 8 -> 4, 12; 4 -> 2, 6; 12 -> 10, 13; ...
    tree = _in_order_tree(14)
    children = {x: kids for x, (_, _, kids) in enumerate(tree) if kids}
    assert children == {0: [8], 8: [4, 12], 4: [2, 6], 12: [10, 13], 2: [1, 3], 6: [5, 7], 10: [9, 11]}
    assert [parent for parent, _, _ in tree] == [-1, 2, 4, 2, 8, 6, 4, 6, 0, 10, 12, 10, 8, 12]


def _interior(rounds, lane):
    return {s.dst for steps in rounds for s in steps if s.lane == lane and s.reduce}


@pytest.mark.parametrize("p", SIZES + [9, 12, 13, 33])
def test_every_member_is_inside_at_most_one_tree(p):
    rounds = double_binary_tree(p)
    both = _interior(rounds, 0) & _interior(rounds, 1)
    assert both == (set() if p % 2 == 0 or p < 3 else {0})  # an odd p's first root has one child


@pytest.mark.parametrize("p", SIZES + [9, 12, 13, 33])
def test_each_round_is_a_matching_of_one_lane_and_every_member_gets_both_halves_of_everyone(p):
    rounds = double_binary_tree(p)
    has = [[{i} for i in range(p)] for _ in range(2)]  # per lane: whose halves each member's copy holds
    for steps in rounds:
        assert len({s.lane for s in steps}) == 1
        assert len({s.src for s in steps}) == len(steps) == len({s.dst for s in steps})
        assert all(s.fraction == 0.5 and s.hops == 1 for s in steps)
        lane = steps[0].lane
        before = [set(h) for h in has[lane]]
        for s in steps:
            has[lane][s.dst] = has[lane][s.dst] | before[s.src] if s.reduce else set(before[s.src])
    assert all(h == set(range(p)) for lane in has for h in lane)
    assert lanes(rounds) == 2


def test_a_lane_does_not_wait_for_another_and_a_step_of_no_lane_waits_for_both():
    # lane 0: 0 -> 1 takes 1 s; lane 1: 2 -> 1 then 1 -> 3, which need not wait for it; then a
    # step of no lane from 1, which waits for both of 1's lanes
    rounds = [
        [Step(0, 1, 1.0, False, 1, 0)],
        [Step(2, 1, 0.5, False, 1, 1)],
        [Step(1, 3, 0.5, False, 1, 1)],
        [Step(1, 2, 0.25, False)],
    ]
    booked: list[tuple[int, int, float]] = []

    def book(src, dst, nbytes, at_s):
        booked.append((src, dst, at_s))
        return at_s + nbytes

    assert run_rounds(book, rounds, 4, 1.0, 0.0, 0.0) == 1.25
    assert booked == [(0, 1, 0.0), (2, 1, 0.0), (1, 3, 0.5), (1, 2, 1.0)]


def test_as_flows_too_a_lane_does_not_wait_for_another_and_a_step_of_no_lane_waits_for_both():
    import simpy

    from fred.simulation.rounds_as_flows import RoundsAsFlows

    rounds = [
        [Step(0, 1, 1.0, False, 1, 0)],
        [Step(2, 1, 0.5, False, 1, 1)],
        [Step(1, 3, 0.5, False, 1, 1)],
        [Step(1, 2, 0.25, False)],
    ]
    env = simpy.Environment()
    started: list[tuple[int, int, float]] = []
    done: list[float] = []

    def post(src, dst, nbytes, hops, arrive, sent):  # a transfer takes nbytes seconds
        started.append((src, dst, env.now))
        env.timeout(nbytes).callbacks.append(lambda _: (sent(), arrive()))

    def later(delay_s, then):
        env.timeout(delay_s).callbacks.append(lambda _: then())

    RoundsAsFlows(rounds, 4, 1.0, 0.0, post, later, lambda: done.append(env.now))
    env.run()
    assert sorted(started, key=lambda s: s[2]) == [(0, 1, 0.0), (2, 1, 0.0), (1, 3, 0.5), (1, 2, 1.0)]
    assert done == [1.25]


@pytest.mark.parametrize("p", [8, 13, 16])
def test_the_two_trees_never_share_a_link_at_once_on_idle_links(monkeypatch, p):
    # Why the closed form holds under both sharings: every transfer has its links to itself.
    # (NCCL mirrors the second tree for an even p; at 8 and 16 the mirror's broadcasts meet.)
    _as_flows_only(monkeypatch)  # a flow per transfer, to watch
    sim = bare_sim(p, allreduce="double_binary_tree", sharing="fair", **NET)
    intervals: dict[int, list[list[float]]] = {}  # a channel's transfers: [first byte, last byte left]
    start = sim.flows.start

    def spy(channels, nbytes, latency_s, arrive, sent=None):
        span = [sim.now, float("inf")]
        for channel in channels:
            intervals.setdefault(id(channel), []).append(span)

        def left():
            span[1] = sim.now
            if sent is not None:
                sent()

        return start(channels, nbytes, latency_s, arrive, left)

    sim.flows.start = spy  # type: ignore[method-assign]
    run_allreduce(sim, 1e6)
    assert sum(len(v) for v in intervals.values()) == 2 * 2 * 2 * (p - 1)  # 2 links x 2 trees x up and down
    for spans in intervals.values():
        spans.sort()
        assert all(b0 >= a1 * (1 - 1e-12) for (_, a1), (b0, _) in zip(spans, spans[1:]))


# Timed in one piece on idle links: the same times as a flow per step, and, once anything else
# touches its links, the same times as if it had been flows all along.

ALGORITHMS_AS_ROUNDS = ["recursive_doubling", "halving_doubling", "binary_tree", "double_binary_tree"]


def _handed_back(monkeypatch) -> list[int]:
    """Counts the all-reduces handed back to flows while they held their links."""
    from fred.simulation import rounds_as_flows

    count: list[int] = []
    hand_back = rounds_as_flows._Held.hand_back

    def spy(held):
        count.extend([1] if held.held else [])
        hand_back(held)

    monkeypatch.setattr(rounds_as_flows._Held, "hand_back", spy)
    return count


def _as_flows_only(monkeypatch):
    from fred.simulation import algorithms

    monkeypatch.setattr(algorithms, "on_idle_links", lambda *args: False)


def _collective_and_a_send(p, algorithm, send_at_s, faults=None, **extra):
    """When each member leaves the all-reduce, and when a send that starts during it arrives."""
    from fred.scenario.schema import FaultsConfig

    sim = bare_sim(p, allreduce=algorithm, sharing="fair", **dict(NET, **extra))
    if faults is not None:
        sim.faults.config = FaultsConfig(**faults)
        sim.faults.start()
    finished: list[float] = []
    arrived: list[float] = []

    def member(w):
        yield from sim.allreduce(sim.workers, w, 1e8)
        finished.append(sim.now)

    def sender():
        yield sim.env.timeout(send_at_s)
        yield from sim.send("worker3", f"worker{p - 1}", 2e8)
        arrived.append(sim.now)

    for w in sim.workers:
        sim.process(member(w))
    if send_at_s is not None:
        sim.process(sender())
    sim.env.run()
    return finished, arrived


@pytest.mark.parametrize("algorithm", ALGORITHMS_AS_ROUNDS)
@pytest.mark.parametrize("p", [5, 8])
@pytest.mark.parametrize("send_at_s", [None, 0.0, 0.03, 0.0801, 0.2, 0.37])
def test_a_send_into_an_all_reduce_timed_in_one_piece_meets_it_as_it_would_its_flows(
    monkeypatch, algorithm, p, send_at_s
):
    handed_back = _handed_back(monkeypatch)
    whole = _collective_and_a_send(p, algorithm, send_at_s)
    alone_s = allreduce_time_s(algorithm, p, 1e8, NetworkConfig(**NET))
    assert len(handed_back) == (send_at_s is not None and send_at_s < alone_s)
    _as_flows_only(monkeypatch)
    flows = _collective_and_a_send(p, algorithm, send_at_s)
    assert whole[0] == pytest.approx(flows[0], rel=1e-12, abs=0)
    assert whole[1] == pytest.approx(flows[1], rel=1e-12, abs=0)


@pytest.mark.parametrize("algorithm", ALGORITHMS_AS_ROUNDS)
@pytest.mark.parametrize("at_s", [0.0, 0.05, 0.21])
def test_a_link_degraded_during_an_all_reduce_timed_in_one_piece_slows_it_as_its_flows(
    monkeypatch, algorithm, at_s
):
    faults = {
        "link_degrade": [{"entity": "worker2", "at_s": at_s, "duration_s": 0.1, "bandwidth_factor": 0.3}]
    }
    handed_back = _handed_back(monkeypatch)
    whole = _collective_and_a_send(8, algorithm, None, faults)
    alone_s = allreduce_time_s(algorithm, 8, 1e8, NetworkConfig(**NET))
    assert len(handed_back) == (at_s < alone_s)
    _as_flows_only(monkeypatch)
    flows = _collective_and_a_send(8, algorithm, None, faults)
    assert whole[0] == pytest.approx(flows[0], rel=1e-12, abs=0)
    assert (whole[0][0] > alone_s) == (at_s < alone_s)  # slowed while it runs


@pytest.mark.parametrize("algorithm", ALGORITHMS_AS_ROUNDS)
def test_an_all_reduce_on_shared_nics_runs_as_flows_and_keeps_its_times(monkeypatch, algorithm):
    # two workers a node share its NIC: rounds cross a channel twice, so no piece is timed whole
    def run():
        import numpy as np
        import simpy

        from fred.simulation.engine import Simulation
        from fred.simulation.network import Network
        from fred.simulation.worker import Worker

        cfg = NetworkConfig(allreduce=algorithm, sharing="fair", **NET)
        crew = [Worker(i, lambda: np.arange(1)) for i in range(8)]
        sim = Simulation(simpy.Environment(), crew, Network(cfg, 1, 2), None, None, None, 0, 0)  # type: ignore[arg-type]
        return run_allreduce(sim, 1e8)

    whole = run()
    _as_flows_only(monkeypatch)
    assert whole == run()


@pytest.mark.parametrize("algorithm", ALGORITHMS_AS_ROUNDS)
@pytest.mark.parametrize("p", [2, 7, 13, 64])
def test_on_idle_links_every_algorithm_is_timed_in_one_piece(monkeypatch, algorithm, p):
    from fred.simulation import algorithms

    answers: list[bool] = []
    on_idle_links = algorithms.on_idle_links
    monkeypatch.setattr(
        algorithms, "on_idle_links", lambda *args: answers.append(on_idle_links(*args)) or answers[-1]
    )
    finished = run_allreduce(bare_sim(p, allreduce=algorithm, sharing="fair", **NET), 102e6)
    assert answers == [True]
    expected = allreduce_time_s(algorithm, p, 102e6, NetworkConfig(allreduce=algorithm, **NET))
    assert finished[0] == pytest.approx(expected, rel=1e-9, abs=0)


@pytest.mark.parametrize("sharing", ["fair", "fcfs"])
@pytest.mark.parametrize("p, per_node", [(8, 4), (12, 4), (64, 8)])
def test_a_hierarchical_double_binary_tree_takes_its_closed_form_under_both_sharings(sharing, p, per_node):
    # inside a node the steps are of no lane: they join the two trees' lanes at the leaders
    import numpy as np
    import simpy

    from fred.simulation.collectives import hierarchical_time_s
    from fred.simulation.engine import Simulation
    from fred.simulation.network import Network
    from fred.simulation.worker import Worker

    cfg = NetworkConfig(
        allreduce="double_binary_tree",
        hierarchical=True,
        sharing=sharing,
        intra_node={"latency_s": 3e-6, "bandwidth_bps": 5e10},
        **NET,
    )
    crew = [Worker(i, lambda: np.arange(1)) for i in range(p)]
    sim = Simulation(simpy.Environment(), crew, Network(cfg, 1, per_node), None, None, None, 0, 0)  # type: ignore[arg-type]
    finished = run_allreduce(sim, 102e6)
    expected = hierarchical_time_s("double_binary_tree", p // per_node, per_node, 102e6, cfg)
    assert max(finished) == pytest.approx(expected, rel=1e-9, abs=0)
