"""Gossip: SGP's push-sum, Overlap-SGP, D-PSGD and AD-PSGD."""

from __future__ import annotations

import math

import numpy as np
import pytest

import fred
from fred.runs.runner import build
from fred.scenario.loading import validate
from strategies._push_sum import mixing, run_push_sum
from strategies.sgp import SGP
from tests.conftest import tiny


def push_sum(workers: int, **config):
    scenario = validate(tiny(cluster={"workers": workers}, strategy={"name": "sgp", "lr": 0.0, **config}))
    built = build(scenario)
    return built.sim, run_push_sum(built.sim, scenario.strategy)


def total(state) -> dict[str, np.ndarray]:
    return {k: sum(np.asarray(node.x[k], np.float64) for node in state.nodes) for k in state.nodes[0].x}


@pytest.mark.parametrize("workers", [4, 8, 6])
def test_push_sum_conserves_mass_every_iteration(workers):
    sim, state = push_sum(workers, init_spread=0.5)
    start = total(state)
    for k in range(1, 12):
        sim.env.run(until=(k + 0.5) * 0.01)  # mid-compute: every share of iteration k-1 consumed
        assert all(node.iteration == k for node in state.nodes)
        weights = sum(node.w for node in state.nodes)
        if workers & (workers - 1) == 0:
            assert weights == workers  # halves of powers of two: exact
        else:
            assert weights == pytest.approx(workers, abs=1e-12)
        now = total(state)
        for name in start:  # float32 shares: a few ulps per iteration
            np.testing.assert_allclose(now[name], start[name], rtol=1e-5, atol=1e-5)


def test_every_node_converges_to_the_initial_average():
    sim, state = push_sum(8, init_spread=0.5)
    start = {k: v / 8 for k, v in total(state).items()}
    sim.env.run(until=60.5 * 0.01)
    for node in state.nodes:
        z = state.z(node)
        for name in start:
            np.testing.assert_allclose(np.asarray(z[name]), start[name], atol=1e-4)


def test_sgp_on_the_complete_graph_is_ar_sgd_up_to_rounding():
    # Uniform 1/n mixing averages x - lr g_i over nodes; AR-SGD averages the g_i.
    # Equal in exact arithmetic; float32 rounding differs (rtol 1e-4 after 15 iterations).
    sgp = fred.run(tiny(strategy={"name": "sgp", "topology": "complete"}, stop={"max_updates": 15 * 4}))
    ar = fred.run(tiny(strategy={"name": "arsgd"}, stop={"max_updates": 15}))
    for name in ar.params:
        np.testing.assert_allclose(sgp.params[name], ar.params[name], rtol=1e-4, atol=1e-6)


def test_osgp_without_overlap_is_sgp_bit_for_bit():
    sgp = fred.run(tiny(strategy={"name": "sgp"}, stop={"max_updates": 60}))
    osgp = fred.run(tiny(strategy={"name": "osgp", "overlap": 0}, stop={"max_updates": 60}))
    assert osgp.summary["params_sha256"] == sgp.summary["params_sha256"]


def test_one_osgp_never_waits_for_the_message_it_just_caused():
    slow_net = {"latency_s": 0.004, "bandwidth_bps": 1e6}  # a share takes longer than a step
    sgp = fred.run(tiny(strategy={"name": "sgp"}, network=slow_net, stop={"max_updates": 80}))
    osgp = fred.run(tiny(strategy={"name": "osgp", "overlap": 1}, network=slow_net, stop={"max_updates": 80}))
    assert osgp.summary["sim_time_s"] < 0.8 * sgp.summary["sim_time_s"]


@pytest.mark.parametrize("peers", [1, 2])
def test_each_iteration_sends_to_the_directed_exponential_peers(peers):
    n = 8
    result = fred.run(
        tiny(cluster={"workers": n}, strategy={"name": "sgp", "peers": peers}, stop={"max_updates": 10 * n})
    )
    sends = result.events[result.events["kind"] == "send"]
    for i in range(n):
        mine = sends[sends["entity"] == f"worker{i}"]["peer"].tolist()
        expected = []
        for k in range(len(mine) // peers):
            expected += sorted(f"worker{(i + 2 ** ((peers * k + m) % 3)) % n}" for m in range(peers))
        assert sorted(mine[: len(expected)]) == sorted(expected)
        assert len(mine) >= 9 * peers


def test_mixing_is_column_stochastic_for_every_named_topology():
    for topology in ["directed_exponential", "ring", "complete"]:
        for n in [1, 2, 5, 8]:
            shares = mixing(SGP(topology=topology), n)
            for k in range(4):
                for i in range(n):
                    assert math.isclose(sum(p for _, p in shares(k, i)), 1.0, abs_tol=1e-12)


def test_explicit_matrices_must_be_column_stochastic():
    bad = [[[0.5, 0.6], [0.5, 0.4]], [[0.5, 0.5], [0.5, 0.6]]]
    with pytest.raises(fred.ScenarioError, match="matrix 1 is not column-stochastic: column 1 sums to 1.1"):
        validate(tiny(cluster={"workers": 2}, strategy={"name": "sgp", "topology": bad}))
    with pytest.raises(fred.ScenarioError, match="must be 4 x 4"):
        validate(tiny(strategy={"name": "sgp", "topology": [[[1.0, 0.0], [0.0, 1.0]]]}))


def test_a_time_varying_list_of_matrices_is_used_in_turn():
    swap = [[0.5, 0.5], [0.5, 0.5]]
    keep = [[1.0, 0.0], [0.0, 1.0]]
    result = fred.run(
        tiny(
            cluster={"workers": 2},
            strategy={"name": "sgp", "topology": [swap, keep]},
            stop={"max_updates": 8},
        )
    )
    sends = result.events[result.events["kind"] == "send"]
    assert len(sends) == 2 * 2  # iterations 0 and 2 exchange, 1 and 3 do not


def test_dpsgd_talks_to_both_ring_neighbours_every_iteration():
    result = fred.run(tiny(strategy={"name": "dpsgd"}, stop={"max_updates": 20}))
    sends = result.events[(result.events["kind"] == "send") & (result.events["entity"] == "worker0")]
    assert set(sends["peer"]) == {"worker1", "worker3"}
    assert (sends.groupby("peer").size() >= 4).all()


def test_the_bipartite_exponential_graph_is_the_sgp_authors_and_pairs_every_node_each_iteration():
    from strategies.dpsgd import bipartite_phone_book

    # Their graph manager for 8 nodes: active (odd) rank r has r+1, r-1, r+3, r+5 (r-3 = r+5,
    # r-5 = r+3 already in); passive (even) ranks the mirror images.
    assert bipartite_phone_book(8)[1] == [2, 0, 4, 6]
    assert bipartite_phone_book(8)[0] == [7, 1, 5, 3]
    for n in (2, 4, 6, 8, 16, 32):
        book = bipartite_phone_book(n)
        for k in range(3 * n):
            peer = [book[i][k % len(book[i])] for i in range(n)]
            assert all(
                peer[peer[i]] == i and peer[i] % 2 != i % 2 for i in range(n)
            )  # a perfect matching, odd-even


def dpsgd_period_s(**strategy) -> float:
    """Seconds between worker 0's gradient steps: 1 MB messages on a 1e8 bytes/s, 1 ms link."""
    result = fred.run(
        tiny(
            strategy={"name": "dpsgd", "topology": "bipartite_exponential", **strategy},
            network={"bandwidth_bps": 1e8, "latency_s": 1e-3},
            workload={"param_bytes": 1_000_000},
            stop={"max_updates": 24},
        )
    )
    starts = result.events[(result.events["entity"] == "worker0") & (result.events["kind"] == "compute")][
        "start_s"
    ]
    return float(np.diff(starts.to_numpy())[-1])


def test_a_blocking_exchange_sends_a_pairs_two_copies_one_after_the_other():
    one_copy_s = 1e-3 + 1_000_000 / 1e8
    assert dpsgd_period_s() == pytest.approx(0.01 + one_copy_s, rel=1e-12)  # both ways at once (full duplex)
    assert dpsgd_period_s(exchange="blocking") == pytest.approx(0.01 + 2 * one_copy_s, rel=1e-12)


def test_bipartite_pairwise_averaging_keeps_the_sum_and_reaches_consensus():
    from strategies.dpsgd import bipartite_mixing, passive

    scenario = validate(tiny(cluster={"workers": 8}, strategy={"name": "sgp", "lr": 0.0, "init_spread": 0.5}))
    sim = build(scenario).sim
    state = run_push_sum(sim, scenario.strategy, debiased=False, shares=bipartite_mixing(8), passive=passive)
    start = total(state)
    first = min(start)

    def spread() -> float:
        return float(np.ptp(np.stack([np.asarray(n.x[first]) for n in state.nodes]), axis=0).max())

    spread0 = spread()
    sim.env.run(until=40.5 * 0.01)
    assert all(
        node.iteration >= 8 and node.w == 1.0 for node in state.nodes
    )  # doubly stochastic: weights stay 1
    for name, value in total(state).items():
        np.testing.assert_allclose(value, start[name], rtol=1e-5, atol=1e-5)
    assert (
        spread0 > 0.1 and spread() <= 1e-6 * spread0
    )  # the pairings of the exponential graph mix 8 nodes fully


def test_bipartite_dpsgd_refuses_an_odd_node_count():
    from fred.scenario.loading import ScenarioError

    with pytest.raises(ScenarioError, match="even cluster.workers"):
        validate(
            tiny(cluster={"workers": 5}, strategy={"name": "dpsgd", "topology": "bipartite_exponential"})
        )


def test_adpsgd_averages_pairs_and_learns():
    result = fred.run(
        tiny(strategy={"name": "adpsgd"}, stop={"max_updates": 600}, eval={"every_updates": 200})
    )
    assert result.metrics["eval_loss"].iloc[-1] < result.metrics["eval_loss"].iloc[0] / 2
    sends = result.events[result.events["kind"] == "send"]
    assert len(sends) % 2 == 0 and len(sends) > 0  # one copy each way per exchange
    assert (result.updates["staleness"] >= 0).all()


def test_a_node_without_a_self_weight_keeps_nothing_of_its_own():
    # A column-stochastic matrix may give p_ii = 0: node i then sends all of x_i and w_i away
    # and x_i <- the shares it receives. It kept its whole x_i and w_i as well, doubling the
    # mass every iteration (weights 2, 4, 8, ...), which shrank the step in z = x / w.
    swap = [[0.0, 1.0], [1.0, 0.0]]
    sim, state = push_sum(2, topology=[swap], init_spread=0.5)
    start = total(state)
    firsts = [node.x for node in state.nodes]
    for k in range(1, 5):
        sim.env.run(until=(k + 0.5) * 0.01)
        assert [node.w for node in state.nodes] == [1.0, 1.0]
        now = total(state)
        for name in start:
            np.testing.assert_allclose(now[name], start[name], rtol=1e-6, atol=1e-6)
    for name in start:  # an even number of swaps (lr 0): each node has its own start back
        np.testing.assert_array_equal(np.asarray(state.nodes[0].x[name]), np.asarray(firsts[0][name]))


def test_a_node_without_a_self_weight_whose_in_neighbours_crashed_fails_the_run_saying_why():
    # It received no share at all (w = 0) and the run ended in an IndexError traceback.
    swap = [[0.0, 1.0], [1.0, 0.0]]
    result = fred.run(
        tiny(
            cluster={"workers": 2},
            strategy={"name": "sgp", "topology": [swap]},
            stop={"max_updates": 50},
            faults={"worker_crash": [{"worker": 1, "at_s": 0.05}], "sync_timeout_s": 0.01},
        )
    )
    assert result.summary["status"] == "failed"
    assert "push-sum node 0 received no share" in result.summary["failure"]
    assert "give the node a self weight (p_ii > 0)" in result.summary["failure"]


def test_explicit_matrices_must_give_every_node_a_share():
    nobody_to_1 = [[1.0, 1.0], [0.0, 0.0]]  # column-stochastic, but node 1 would receive nothing: w_1 = 0
    with pytest.raises(fred.ScenarioError, match="matrix 0 has row 1 all zero"):
        validate(tiny(cluster={"workers": 2}, strategy={"name": "sgp", "topology": [nobody_to_1]}))


@pytest.mark.parametrize(
    ("n", "hops"), [(2, [1]), (3, [1, 2]), (5, [1, 2, 4]), (6, [1, 2, 4]), (8, [1, 2, 4]), (12, [1, 2, 4, 8])]
)
def test_the_directed_exponential_graph_cycles_through_every_hop_up_to_n_minus_1(n, hops):
    # The paper (seed 004): node i sends to i + 2^0, i + 2^1, ..., i + 2^log2(n-1) mod n, in turn.
    # floor(log2 n) hops dropped the longest one whenever n is not a power of two
    # (3 nodes: a plain ring; 6 nodes: 1, 2 and never 4).
    shares = mixing(SGP(), n)
    for k in range(2 * len(hops)):
        assert shares(k, 0) == [(0, 0.5), (hops[k % len(hops)] % n, 0.5)]
