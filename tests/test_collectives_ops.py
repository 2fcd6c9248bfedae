"""The collective objects chosen from the network section, and the reduce-scatter and broadcast.

On a ring each of the reduce-scatter and the all-gather (of the reduce-scatter's ``n/p`` shards)
is half an all-reduce's transfer: each member sends ``(p-1)/p`` of the message in each, and the
two take the ring all-reduce's time, less one synchronisation cost ``S``.
"""

from __future__ import annotations

import pytest

from fred.scenario.schema import FaultsConfig, NetworkConfig
from fred.simulation import algorithms
from fred.simulation.collectives import (
    allgather_time_s,
    allreduce_time_s,
    binomial_broadcast,
    broadcast_time_s,
    bytes_sent,
    reduce_scatter_time_s,
    ring,
    ring_allgather,
    ring_reduce_scatter,
)
from tests.test_network import bare_sim

NET = dict(latency_s=25e-6, bandwidth_bps=1.25e9, reduce_s_per_byte=2e-10, sync_s=1e-4)
SIZES = [2, 3, 5, 8, 13]


def timed(sim, collective, nbytes: float) -> float:
    """When ``collective`` among all of ``sim``'s workers ends, started at 0 on idle links."""
    names = [w.name for w in sim.workers]
    sim.env.process(collective.run(names, nbytes))
    sim.env.run()
    return sim.now


@pytest.mark.parametrize("p", SIZES)
def test_on_a_ring_reduce_scatter_and_all_gather_each_send_half_an_all_reduces_bytes(p):
    n = 96e6
    all_reduce = bytes_sent(ring(p), p, n)
    scatter = bytes_sent(ring_reduce_scatter(p), p, n)
    gather = bytes_sent(ring_allgather(p), p, n / p)  # each member contributes its shard
    for whole, first, second in zip(all_reduce, scatter, gather):
        assert first == pytest.approx(whole / 2, rel=1e-12)
        assert second == pytest.approx(whole / 2, rel=1e-12)
        assert first == pytest.approx((p - 1) / p * n, rel=1e-12)


@pytest.mark.parametrize("p", SIZES)
def test_on_a_ring_reduce_scatter_then_all_gather_take_an_all_reduces_time(p):
    n, cfg = 96e6, NetworkConfig(**NET)
    both_s = reduce_scatter_time_s(p, n, cfg) + allgather_time_s(p, n / p, cfg) - cfg.sync_s
    assert both_s == pytest.approx(allreduce_time_s("ring", p, n, cfg), rel=1e-12)


@pytest.mark.parametrize("sharing", ["fcfs", "fair"])
@pytest.mark.parametrize("p", SIZES)
def test_the_reduce_scatter_on_idle_links_takes_its_closed_form_time(sharing, p):
    sim = bare_sim(p, sharing=sharing, **NET)
    done_s = timed(sim, algorithms.reduce_scatter_for(sim.transport), 96e6)
    assert done_s == pytest.approx(reduce_scatter_time_s(p, 96e6, NetworkConfig(**NET)), rel=1e-9)


@pytest.mark.parametrize("sharing", ["fcfs", "fair"])
@pytest.mark.parametrize("p", SIZES + [16])
def test_the_broadcast_on_idle_links_takes_its_closed_form_time(sharing, p):
    sim = bare_sim(p, sharing=sharing, **NET)
    done_s = timed(sim, algorithms.broadcast_for(sim.transport), 96e6)
    assert done_s == pytest.approx(broadcast_time_s(p, 96e6, NetworkConfig(**NET)), rel=1e-9)


def test_the_broadcast_reaches_every_member_once_from_the_first():
    for p in range(1, 40):
        reached = [0]
        for steps in binomial_broadcast(p):
            assert all(s.src in reached and not s.reduce and s.fraction == 1.0 for s in steps)
            reached += [s.dst for s in steps]
        assert sorted(reached) == list(range(p))
        assert len(binomial_broadcast(p)) == (p - 1).bit_length()


def test_the_broadcast_by_hand():
    # p = 8: member 7 is three hops away; member 4's message leaves the root after two others
    a, b, n = NET["latency_s"], 1 / NET["bandwidth_bps"], 96e6
    expected_s = 3 * a + 3 * n * b + NET["sync_s"]
    assert broadcast_time_s(8, n, NetworkConfig(**NET)) == pytest.approx(expected_s, rel=1e-12)


@pytest.mark.parametrize(
    "network, kind, timing",
    [
        ({"sharing": "fcfs"}, algorithms.BookedRing, None),
        ({"sharing": "fair"}, algorithms.RingAsFlows, None),
        ({"allreduce": "nccl"}, algorithms.Nccl, None),
        ({"allreduce": "halving_doubling", "sharing": "fcfs"}, algorithms.Scheduled, algorithms.Booked),
        ({"allreduce": "binary_tree", "sharing": "fair"}, algorithms.Scheduled, algorithms.AsFlows),
    ],
)
def test_the_all_reduce_is_chosen_once_from_the_network_section(network, kind, timing):
    sim = bare_sim(4, **dict(NET, **network))
    assert type(sim.allreduce_timing) is kind
    if timing is not None:
        assert type(sim.allreduce_timing.timing) is timing
    assert type(sim.allgather_timing) is algorithms.RingAllGather


def test_a_ring_on_lossy_fair_links_runs_as_phases_and_counts_a_rings_bytes():
    import numpy as np
    import simpy

    from fred.simulation.engine import Simulation, Worker
    from fred.simulation.network import Network

    crew = [Worker(i, lambda: np.arange(1)) for i in range(4)]
    lossy = FaultsConfig(message_loss={"probability": 0.1, "retransmit_timeout_s": 0.01})
    network = Network(NetworkConfig(sharing="fair", **NET))
    sim = Simulation(
        simpy.Environment(),
        crew,
        network,
        None,
        None,
        {},
        0,
        0,  # type: ignore[arg-type]
        faults=lossy,
    )
    assert type(sim.allreduce_timing) is algorithms.ScheduledRing
    assert not sim.allreduce_timing.timing.one_piece
    sent = sim.allreduce_timing.sent_by([0, 1, 2, 3], [w.name for w in sim.workers], 8e6)
    assert sent(2, 8e6) == 2 * 3 * 8e6 / 4
