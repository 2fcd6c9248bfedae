"""All-reduce algorithms: the simulated time on idle links against each closed form, the
schedules' shape, and the sum's bits, which no algorithm may change."""

from __future__ import annotations

import numpy as np
import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from fred.scenario.schema import NetworkConfig
from fred.simulation.collectives import (
    ALGORITHMS,
    allreduce_time_s,
    binary_tree,
    bytes_sent,
    halving_doubling,
    recursive_doubling,
)
from tests.test_network import bare_sim, run_allreduce

ALL = list(ALGORITHMS)  # ring first
NET = dict(latency_s=25e-6, bandwidth_bps=1.25e9, reduce_s_per_byte=2e-10, sync_s=1e-4)


@pytest.mark.parametrize("algorithm", ALL)
@pytest.mark.parametrize("p", [2, 3, 5, 8, 16, 64])
def test_idle_links_take_the_closed_form_time(algorithm, p):
    nbytes = 102e6  # ResNet-50's gradient
    finished = run_allreduce(bare_sim(p, allreduce=algorithm, **NET), nbytes)
    expected = allreduce_time_s(algorithm, p, nbytes, NetworkConfig(allreduce=algorithm, **NET))
    assert finished == [finished[0]] * p  # everyone leaves together
    assert finished[0] == pytest.approx(expected, rel=1e-9, abs=0)


@settings(max_examples=40, deadline=None)
@given(
    algorithm=st.sampled_from(list(ALGORITHMS)),
    p=st.integers(2, 40),
    nbytes=st.floats(1.0, 1e9),
    latency_s=st.floats(0, 1e-3),
    bandwidth_bps=st.floats(1e6, 1e11),
    reduce_s_per_byte=st.floats(0, 1e-8),  # slower than the link too: the formula has no max in it
)
def test_closed_form_holds_for_any_constants(
    algorithm, p, nbytes, latency_s, bandwidth_bps, reduce_s_per_byte
):
    net = dict(
        latency_s=latency_s,
        bandwidth_bps=bandwidth_bps,
        reduce_s_per_byte=reduce_s_per_byte,
        allreduce=algorithm,
    )
    finished = run_allreduce(bare_sim(p, **net), nbytes)
    assert max(finished) == pytest.approx(
        allreduce_time_s(algorithm, p, nbytes, NetworkConfig(**net)), rel=1e-9
    )


def test_recursive_doubling_grows_with_log_p_and_the_ring_does_not():
    # Why the SGP paper's AR-SGD slowed down with more nodes: each doubling adds a whole-message swap.
    n = 102e6
    rd = [allreduce_time_s("recursive_doubling", p, n, NetworkConfig(**NET)) for p in (4, 8, 16, 32)]
    ring = [allreduce_time_s("ring", p, n, NetworkConfig(**NET)) for p in (4, 8, 16, 32)]
    assert all(b - a == pytest.approx(rd[1] - rd[0], rel=1e-9) for a, b in zip(rd, rd[1:]))
    assert ring[-1] / ring[0] < 1.4 < rd[-1] / rd[0]


def test_the_binary_tree_beats_the_ring_on_small_messages_and_loses_on_large_ones():
    # 64 members: the ring's 126 latencies against the tree's 16; the tree's 22 whole messages against 2
    tree, ring = (
        lambda n, a=a: allreduce_time_s(a, 64, n, NetworkConfig(**NET)) for a in ("binary_tree", "ring")
    )
    assert tree(1e3) < 0.2 * ring(1e3)
    assert tree(102e6) > 8 * ring(102e6)


@pytest.mark.parametrize("schedule", [recursive_doubling, halving_doubling, binary_tree])
@pytest.mark.parametrize("p", [2, 3, 5, 6, 7, 8, 12, 64])
def test_each_round_is_a_matching_and_every_member_ends_with_every_contribution(schedule, p):
    rounds = schedule(p)
    has = [{i} for i in range(p)]  # whose contributions each member's result holds (whole-message view)
    for steps in rounds:
        assert len({s.src for s in steps}) == len(steps) and len({s.dst for s in steps}) == len(steps)
        before = [set(h) for h in has]
        for s in steps:
            has[s.dst] |= before[s.src] if s.reduce or s.fraction == 1.0 else set()
    if schedule in (recursive_doubling, binary_tree):  # whole messages: the view is exact
        assert all(h == set(range(p)) for h in has)


@pytest.mark.parametrize("p", [4, 5, 16])
def test_halving_doubling_sends_what_rabenseifner_does(p):
    q = 1 << (p.bit_length() - 1)
    sent = bytes_sent(halving_doubling(p), p, 1.0)
    extra = 1.0 if p != q else 0.0
    assert sent[q - 1] == pytest.approx(2 * (q - 1) / q)  # a member with no helper role
    assert sent[0] == pytest.approx(2 * (q - 1) / q + extra)  # folds a leftover member in, hands it back


@pytest.mark.parametrize("p", [2, 3, 5, 6, 7, 8, 12, 64])
def test_binary_tree_is_a_heap_floor_log2_p_deep_and_its_parents_take_one_child_a_round(p):
    rounds = binary_tree(p)
    up = [s for steps in rounds for s in steps if s.reduce]
    assert sorted((s.src, s.dst) for s in up) == [
        (c, (c - 1) // 2) for c in range(1, p)
    ]  # each child once, to its parent
    down = [s for steps in rounds for s in steps if not s.reduce]
    assert sorted((s.dst, s.src) for s in down) == [(c, (c - 1) // 2) for c in range(1, p)]
    assert all(s.reduce for steps in rounds[: len(rounds) // 2] for s in steps)  # all up, then all down
    depth = (
        p.bit_length() - 1
    )  # two rounds a level, each way; one at the deepest level when it has no right child
    assert len(rounds) == 2 * (2 * depth - (p == 1 << depth))
    first_up = [steps[0].src for steps in rounds if steps[0].reduce and steps[0].dst == 0]
    assert first_up == ([2, 1] if p > 2 else [1])  # the right child (the smaller subtree) first
    assert bytes_sent(rounds, p, 1.0) == [
        float(c > 0) + len([d for d in (2 * c + 1, 2 * c + 2) if d < p]) for c in range(p)
    ]


@pytest.mark.parametrize("algorithm", ALL)
def test_the_sum_is_the_same_bits_whatever_the_algorithm(algorithm):
    values = [np.float32(v) for v in (0.1, 1e8, -1e8, 3.3, 7e-5)]

    def sums(sim) -> list[bytes]:
        results: list = []

        def member(w):
            results.append((yield from sim.allreduce(sim.workers, w, 1e6, {"x": values[w.index]})))

        for w in sim.workers:
            sim.process(member(w))
        sim.env.run()
        return [np.asarray(r["x"]).tobytes() for r in results]

    assert sums(bare_sim(5, allreduce=algorithm, **NET)) == sums(bare_sim(5, **NET))


def test_trace_counts_what_each_member_sends():
    sim = bare_sim(8, allreduce="recursive_doubling", **NET)
    events: list = []
    sim.tracers.append(lambda kind, entity, s, e, nbytes, peer: events.append((kind, entity, nbytes)))
    run_allreduce(sim, 1e6)
    assert [n for kind, _, n in events if kind == "allreduce"] == [3e6] * 8  # log2 8 whole messages each


@pytest.mark.parametrize("name", ["tree", "double_tree"])
def test_an_unknown_algorithm_is_refused_naming_the_choices(name):
    with pytest.raises(ValueError, match="recursive_doubling.*binary_tree"):
        NetworkConfig(allreduce=name)


@pytest.mark.parametrize("strategy", ["ssgd", "local_sgd", "hpsgd", "pipe_sgd", "grouped_hybrid"])
def test_every_allreduce_strategy_runs_on_every_algorithm(strategy):
    import fred
    from tests.conftest import tiny

    runs = {
        a: fred.run(
            fred.validate(
                tiny(
                    strategy={"name": strategy},
                    cluster={"workers": 5},
                    network={"allreduce": a, "reduce_s_per_byte": 1e-9},  # no two tie
                    workload={"param_bytes": 10**8},
                    stop={"max_updates": 6},
                )
            )
        )
        for a in ALL
    }
    assert {a: r.summary["status"] for a, r in runs.items()} == dict.fromkeys(ALL, "completed")
    times = {a: r.summary["sim_time_s"] for a, r in runs.items()}
    assert len(set(times.values())) == len(ALL), times  # the algorithm changes the clock ...
    # ... and not the numbers, except where compute goes on during the collective (HPSGD's local
    # steps) or groups form by speed (the hybrid): there how much fits in it is the point
    if strategy not in ("hpsgd", "grouped_hybrid"):
        assert len({r.summary["params_sha256"] for r in runs.values()}) == 1


PER_NODE = {2: 2, 3: 3, 5: 5, 8: 4, 16: 4, 64: 8}  # p -> devices per node: whole nodes of 1, 2, 4 and 8


@pytest.mark.parametrize("across", ALL)
@pytest.mark.parametrize("p", list(PER_NODE))
def test_hierarchical_on_idle_links_takes_its_closed_form_time(across, p):
    from fred.simulation.collectives import hierarchical_time_s
    from fred.simulation.engine import Simulation
    from fred.simulation.network import Network
    from fred.simulation.worker import Worker

    cfg = NetworkConfig(
        allreduce=across, hierarchical=True, intra_node={"latency_s": 3e-6, "bandwidth_bps": 5e10}, **NET
    )
    crew = [Worker(i, lambda: np.arange(1)) for i in range(p)]
    sim = Simulation(simpy.Environment(), crew, Network(cfg, 1, PER_NODE[p]), None, None, None, 0, 0)  # type: ignore[arg-type]
    finished = run_allreduce(sim, 102e6)
    expected = hierarchical_time_s(across, p // PER_NODE[p], PER_NODE[p], 102e6, cfg)
    assert max(finished) == pytest.approx(expected, rel=1e-9, abs=0)


def test_hierarchical_beats_a_flat_recursive_doubling_over_shared_nics():
    # 4 nodes of 8 devices on 10 GbE: flat, eight workers' whole messages queue on each NIC
    # in the rounds that cross nodes; hierarchical, one per NIC, and the rest over PCIe
    from fred.simulation.engine import Simulation
    from fred.simulation.network import Network
    from fred.simulation.worker import Worker

    def simulated_s(hierarchical: bool) -> float:
        cfg = NetworkConfig(allreduce="recursive_doubling", hierarchical=hierarchical, **NET)
        crew = [Worker(i, lambda: np.arange(1)) for i in range(32)]
        sim = Simulation(simpy.Environment(), crew, Network(cfg, 1, 8), None, None, None, 0, 0)  # type: ignore[arg-type]
        return max(run_allreduce(sim, 102e6))

    flat_s, hierarchical_s = simulated_s(False), simulated_s(True)
    assert flat_s > allreduce_time_s(
        "recursive_doubling", 32, 102e6, NetworkConfig(**NET)
    )  # the NICs are shared
    assert hierarchical_s < 0.5 * flat_s


def test_hierarchical_keeps_its_numbers_and_survives_a_crash():
    import fred
    from tests.conftest import tiny

    def run(network, faults=None):
        return fred.run(
            fred.validate(
                tiny(
                    strategy={"name": "ssgd"},
                    stop={"max_updates": 5},
                    faults=faults or {},
                    cluster={"workers": 8, "devices_per_node": 4},
                    network=network,
                )
            )
        )

    flat, hier = run({}), run({"hierarchical": True, "allreduce": "halving_doubling"})
    assert flat.summary["params_sha256"] == hier.summary["params_sha256"]
    crashed = run(
        {"hierarchical": True}, {"worker_crash": [{"worker": 0, "at_s": 0.015}], "sync_timeout_s": 0.01}
    )
    assert crashed.summary["status"] == "completed"  # node 0 goes on with three members and a new leader
