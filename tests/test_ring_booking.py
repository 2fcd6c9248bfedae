"""The ring all-reduce's one-pass booking on idle links against booking chunk by chunk.

``Network.ring_on_idle_links`` must leave exactly what the per-chunk path leaves:
the same completion time, the same busy intervals and ``free_at_s`` on every link,
and so the same answers for every transfer booked afterwards.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from fred.scenario.schema import NetworkConfig
from fred.simulation.engine import Simulation, Worker
from fred.simulation.network import Link, Network, earliest_fit, ring_by_chunk


def reference_ring(net: Network, names: list[str], nbytes: float, now_s: float) -> float:
    """The engine's ring loop before the one-pass booking, verbatim, over ``Network.reserve``."""
    p, cfg = len(names), net.config
    chunk = nbytes / p
    ready = [now_s] * p
    for step in range(2 * (p - 1)):
        arrived = [0.0] * p
        for i in range(p):
            transfer = net.reserve(names[i], names[(i + 1) % p], chunk, now_s, ready[i])
            arrived[(i + 1) % p] = transfer.arrive_s
        reduce_s = chunk * cfg.reduce_s_per_byte if step < p - 1 else 0.0
        ready = [t + reduce_s for t in arrived]
    return max(ready)


def engine_ring(net: Network, names: list[str], nbytes: float, now_s: float) -> tuple[float, bool]:
    """What ``Simulation._ring`` books (without message loss), and whether it took the one pass."""
    chunk = nbytes / len(names)
    reduce_s = chunk * net.config.reduce_s_per_byte
    before = copy.deepcopy(net.ports)
    done_s = net.ring_on_idle_links(names, chunk, reduce_s, now_s)
    if done_s is not None:
        return done_s, True
    assert net.ports == before  # declining leaves every link as it was
    book = lambda src, dst, n, t: net.reserve(src, dst, n, now_s, t)  # noqa: E731
    return ring_by_chunk(book, names, chunk, reduce_s, now_s), False


def link_state(net: Network) -> list[tuple]:
    return [(n, p.up.busy, p.up.free_at_s, p.down.busy, p.down.free_at_s) for n, p in net.ports.items()]


times = st.one_of(st.just(0.0), st.floats(0.0, 10.0), st.floats(1e6, 1e10))
durations = st.one_of(st.just(0.0), st.floats(0.0, 1.0), st.floats(1e-12, 1e-6))
booking = st.tuples(st.integers(0, 12), st.booleans(), st.floats(-5.0, 5.0), durations)


@st.composite
def rings(draw):
    """A network of up to 13 workers, some links maybe changed (a degraded link), some
    intervals booked before the ring (maybe all ended), a ring over some of the workers."""
    latency_s = draw(st.one_of(st.just(0.0), st.floats(0.0, 1e-3), st.floats(0.0, 10.0)))
    cfg = NetworkConfig(
        latency_s=latency_s,
        bandwidth_bps=draw(st.one_of(st.just(1e6), st.floats(1.0, 1e11))),
        reduce_s_per_byte=draw(st.one_of(st.just(0.0), st.floats(0.0, 1e-6))),
    )
    net = Network(cfg)
    n = draw(st.integers(2, 13))
    names = [f"worker{i}" for i in range(n)]
    for name in names:
        net.add(name)
    if draw(st.booleans()):  # a degraded link: another bandwidth or latency
        port = net.ports[draw(st.sampled_from(names))]
        port.bandwidth_bps *= draw(st.sampled_from([1.0, 0.5, 0.1]))
        port.latency_s += draw(st.sampled_from([0.0, 1e-3]))
    now_s = draw(times)
    idle = draw(st.booleans())  # often: everything booked before the ring has ended
    for entity, up, offset_s, duration_s in draw(st.lists(booking, max_size=8)):
        link = net.ports[names[entity % n]].up if up else net.ports[names[entity % n]].down
        start_s = now_s - abs(offset_s) - duration_s if idle else now_s + offset_s
        link.book(start_s, start_s + duration_s)
    members = draw(st.lists(st.sampled_from(names), min_size=1, max_size=n, unique=True))
    nbytes = draw(st.one_of(st.just(0.0), st.integers(1, 1000).map(float), st.floats(1.0, 1e9)))
    return net, members, nbytes, now_s


later = st.tuples(st.integers(0, 12), st.integers(0, 12), st.floats(0.0, 1e7), st.floats(0.0, 20.0))


@settings(max_examples=400, deadline=None)
@given(
    case=rings(),
    transfers=st.lists(later, max_size=6),
    probes=st.lists(st.tuples(st.integers(0, 12), durations), max_size=6),
)
def test_one_pass_booking_leaves_what_chunk_by_chunk_booking_leaves(case, transfers, probes):
    net, members, nbytes, now_s = case
    ref = copy.deepcopy(net)
    done_s, _ = engine_ring(net, members, nbytes, now_s)
    assert done_s == reference_ring(ref, members, nbytes, now_s)
    assert link_state(net) == link_state(ref)
    names = list(net.ports)
    # Later transfers from the ring's start on: the same starts and arrivals, link for link.
    for a, b, nb, after_s in transfers:
        src, dst = names[a % len(names)], names[b % len(names)]
        assert net.reserve(src, dst, nb, now_s, now_s + after_s) == ref.reserve(
            src, dst, nb, now_s, now_s + after_s
        )
    assert link_state(net) == link_state(ref)  # a link sharing the ring's list copied it before booking
    # Fits probed exactly at interval edges, zero durations included: where gaps are.
    for k, duration_s in probes:
        port, ref_port = net.ports[names[k % len(names)]], ref.ports[names[k % len(names)]]
        nxt = net.ports[names[(k + 1) % len(names)]]
        ref_nxt = ref.ports[names[(k + 1) % len(names)]]
        for s, e in port.up.busy[:4] + port.up.busy[-2:]:
            for t in (s, e, max(now_s, s - duration_s)):
                assert earliest_fit((port.up, nxt.down), t, duration_s) == earliest_fit(
                    (ref_port.up, ref_nxt.down), t, duration_s
                )


@pytest.mark.parametrize("p", [2, 3, 16])
def test_idle_uniform_links_take_the_one_pass_and_busy_ones_do_not(p):
    net = Network(NetworkConfig(latency_s=1e-4, bandwidth_bps=1e9, reduce_s_per_byte=1e-10))
    names = [f"worker{i}" for i in range(p)]
    for name in names:
        net.add(name)
    assert engine_ring(net, names, 1e6, 0.0)[1]
    first_done_s = max(link.free_at_s for port in net.ports.values() for link in (port.up, port.down))
    assert not engine_ring(net, names, 1e6, first_done_s / 2)[1]  # the first ring still holds the links
    assert engine_ring(net, names, 1e6, 10.0)[1]  # all over: idle again
    net.ports[names[-1]].bandwidth_bps /= 2  # a degraded link
    assert not engine_ring(net, names, 1e6, 20.0)[1]


def test_gaps_between_a_members_chunks_stay_open_to_other_transfers():
    """Latency between chunks leaves each link idle between them; a small transfer fits there."""
    net = Network(NetworkConfig(latency_s=1.0, bandwidth_bps=1.0))
    for name in ("worker0", "worker1", "server"):
        net.add(name)
    done_s, one_pass = engine_ring(net, ["worker0", "worker1"], 2.0, 0.0)
    assert one_pass and done_s == 4.0  # chunks of 1 B: [0, 1] then [2, 3], each arriving 1 s later
    assert net.ports["worker0"].up.busy == [(0.0, 1.0), (2.0, 3.0)]
    assert net.reserve("worker0", "server", 1.0, 0.0).start_s == 1.0  # into the gap, not after the ring


def test_merging_back_to_back_chunks_would_change_a_fit():
    """Why a ring's intervals are kept apart even without gaps: a 0-byte transfer fits at the
    junction of two intervals, not inside one merged interval."""
    apart, merged = Link(), Link()
    apart.book(0.0, 1.0)
    apart.book(1.0, 2.0)
    merged.book(0.0, 2.0)
    assert earliest_fit((apart, Link()), 1.0, 0.0) == 1.0
    assert earliest_fit((merged, Link()), 1.0, 0.0) == 2.0
    assert earliest_fit((apart, Link()), 0.5, 1.0) == earliest_fit((merged, Link()), 0.5, 1.0) == 2.0


def bare_sim(p: int, lossless_one_pass: bool, **network) -> Simulation:
    crew = [Worker(i, lambda: np.arange(1)) for i in range(p)]
    net = Network(NetworkConfig(**network))
    if not lossless_one_pass:
        net.ring_on_idle_links = lambda *args: None  # type: ignore[method-assign]
    sim = Simulation(simpy.Environment(), crew, net, None, None, {}, 0, 0)  # type: ignore[arg-type]
    sim.network.add("server")
    return sim


def traced_run(
    one_pass: bool, p: int, nbytes: float, sends: list, second_at_s: float | None, net: dict
) -> list:
    """Members all-reduce (twice, overlapping when ``second_at_s`` is early) while point-to-point
    sends compete for their links; every traced event, in order."""
    sim = bare_sim(p, one_pass, **net)
    rows: list = []
    sim.tracers.append(lambda *row: rows.append(row))

    def member(w, at_s):
        yield sim.env.timeout(at_s)
        yield from sim.allreduce(sim.workers, w, nbytes)

    def sender(src, dst, nb, at_s):
        yield sim.env.timeout(at_s)
        yield from sim.send(src, dst, nb)

    for w in sim.workers:
        sim.process(member(w, 0.0))
        if second_at_s is not None:
            sim.process(member(w, second_at_s))
    names = [w.name for w in sim.workers] + ["server"]
    for a, b, nb, at_s in sends:
        sim.process(sender(names[a % len(names)], names[b % len(names)], nb, at_s))
    sim.env.run()
    return rows


@settings(max_examples=60, deadline=None)
@given(
    p=st.integers(2, 8),
    nbytes=st.one_of(st.integers(1, 1000).map(float), st.floats(1.0, 1e7)),
    sends=st.lists(
        st.tuples(st.integers(0, 8), st.integers(0, 8), st.floats(0.0, 1e6), st.floats(0.0, 0.05)), max_size=5
    ),
    second_at_s=st.one_of(st.none(), st.floats(0.0, 0.05)),
    latency_s=st.one_of(st.just(0.0), st.floats(0.0, 1e-3)),
    reduce_s_per_byte=st.one_of(st.just(0.0), st.floats(0.0, 1e-8)),
)
def test_a_run_with_competing_transfers_is_the_same_event_for_event(
    p, nbytes, sends, second_at_s, latency_s, reduce_s_per_byte
):
    net = dict(latency_s=latency_s, bandwidth_bps=1e8, reduce_s_per_byte=reduce_s_per_byte)
    assert traced_run(True, p, nbytes, sends, second_at_s, net) == traced_run(
        False, p, nbytes, sends, second_at_s, net
    )
