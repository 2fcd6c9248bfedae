"""Links and collectives: the simulated schedule against the papers' closed forms."""

from __future__ import annotations

import numpy as np
import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from fred.scenario.schema import NetworkConfig
from fred.simulation.engine import Simulation, Worker
from fred.simulation.network import Network, ring_allreduce_time_s


def bare_sim(workers: int, **network) -> Simulation:
    """A simulation with links only: enough for transfers and collectives."""
    cfg = NetworkConfig(**network)
    crew = [Worker(i, lambda: np.arange(1)) for i in range(workers)]
    return Simulation(simpy.Environment(), crew, Network(cfg), None, None, {}, 0, 0)  # type: ignore[arg-type]


def run_allreduce(sim: Simulation, nbytes: float, group=None) -> list[float]:
    group = group or sim.workers
    finished: list[float] = []

    def member(w):
        yield from sim.allreduce(group, w, nbytes)
        finished.append(sim.now)

    for w in group:
        sim.process(member(w))
    sim.env.run()
    return finished


@settings(max_examples=60, deadline=None)
@given(
    p=st.integers(2, 64),
    nbytes=st.one_of(st.integers(1, 1000), st.floats(1.0, 1e9)),
    latency_s=st.floats(0, 1e-3),
    bandwidth_bps=st.floats(1e6, 1e11),
    reduce_s_per_byte=st.floats(0, 1e-9),
    sync_s=st.floats(0, 1e-3),
)
def test_ring_allreduce_on_idle_links_takes_the_closed_form_time(
    p, nbytes, latency_s, bandwidth_bps, reduce_s_per_byte, sync_s
):
    net = dict(
        latency_s=latency_s, bandwidth_bps=bandwidth_bps, reduce_s_per_byte=reduce_s_per_byte, sync_s=sync_s
    )
    sim = bare_sim(p, **net)
    finished = run_allreduce(sim, nbytes)
    expected = ring_allreduce_time_s(p, nbytes, NetworkConfig(**net))
    assert len(finished) == p
    assert finished == [finished[0]] * p  # everyone leaves the collective together
    assert finished[0] == pytest.approx(expected, rel=1e-12, abs=0)


@pytest.mark.parametrize("p", [2, 8, 64])
@pytest.mark.parametrize("nbytes", [1, 10**3, 10**6, 10**9])
def test_allreduce_extremes_match_the_closed_form(p, nbytes):
    net = dict(latency_s=25e-6, bandwidth_bps=1.25e9, reduce_s_per_byte=1e-10, sync_s=1e-4)
    finished = run_allreduce(bare_sim(p, **net), nbytes)
    assert finished[0] == pytest.approx(ring_allreduce_time_s(p, nbytes, NetworkConfig(**net)), rel=1e-12)


def test_allreduce_waits_for_the_last_member_and_records_the_wait():
    sim = bare_sim(3, latency_s=0.0, bandwidth_bps=1e6)
    waits = []
    sim.tracers.append(
        lambda kind, entity, s, e, b, peer: waits.append((entity, s, e)) if kind == "wait" else None
    )
    finished = []

    def member(w, delay):
        yield sim.env.timeout(delay)
        yield from sim.allreduce(sim.workers, w, 3e6)
        finished.append(sim.now)

    for w, delay in zip(sim.workers, [0.0, 1.0, 2.0]):
        sim.process(member(w, delay))
    sim.env.run()
    assert finished == pytest.approx([2.0 + 4.0] * 3)  # 2(p-1) chunks of 1 MB at 1 MB/s
    assert sorted(waits) == [("worker0", 0.0, 2.0), ("worker1", 1.0, 2.0)]


def test_a_transfer_costs_latency_plus_bytes_over_bandwidth():
    sim = bare_sim(2, latency_s=0.5, bandwidth_bps=100.0)
    done = []

    def sender():
        yield from sim.send("worker0", "worker1", 200)
        done.append(sim.now)

    sim.process(sender())
    sim.env.run()
    assert done == [pytest.approx(2.5)]


def test_a_payload_of_none_is_delivered_and_a_send_without_one_delivers_nothing():
    # A timing-only run's parameters are None: sending them was silently not delivered,
    # and a receiver waiting for them waited for ever.
    sim = bare_sim(2)

    def sender():
        yield from sim.send("worker0", "worker1", 8, payload=None)
        yield from sim.send("worker0", "worker1", 8)

    sim.process(sender())
    sim.env.run()
    assert sim.mailbox("worker1").items == [("worker0", None)]


def test_transfers_into_one_busy_downlink_are_served_first_come_first_served():
    sim = bare_sim(3, latency_s=0.0, bandwidth_bps=100.0, sharing="fcfs")
    arrivals = {}

    def sender(src, start):
        yield sim.env.timeout(start)
        yield from sim.send(src, "worker2", 100, payload=src)
        arrivals[src] = sim.now

    sim.process(sender("worker1", 0.1))
    sim.process(sender("worker0", 0.0))
    sim.env.run()
    assert arrivals == {"worker0": pytest.approx(1.0), "worker1": pytest.approx(2.0)}
    assert [m[0] for m in sim.mailbox("worker2").items] == ["worker0", "worker1"]


def test_the_closed_form_with_segments_is_the_level_two_pipeline_formula():
    cfg = NetworkConfig(latency_s=1e-3, bandwidth_bps=1e9, reduce_s_per_byte=1e-10, sync_s=1e-4)
    p, n, L = 8, 1e8, 4
    expected = 2 * (p - 1) * L * 1e-3 + 2 * (p - 1) / p * n / 1e9 + (p - 1) / p * n * 1e-10 + L * 1e-4
    assert ring_allreduce_time_s(p, n, cfg, segments=L) == pytest.approx(expected, rel=1e-15)


def test_work_keeps_an_entity_busy_and_records_it():
    sim = bare_sim(1)
    seen = []
    sim.tracers.append(lambda *row: seen.append(row))

    def compress():
        yield from sim.work("worker0", 0.25, kind="compress")

    sim.process(compress())
    sim.env.run()
    assert seen == [("compress", "worker0", 0.0, 0.25, 0.0, "")]


def test_a_transfer_waiting_for_its_uplink_does_not_block_an_idle_downlink():
    sim = bare_sim(4, latency_s=0.0, bandwidth_bps=100.0, sharing="fcfs")
    arrivals = {}

    def send(src, dst, nbytes, at):
        yield sim.env.timeout(at)
        yield from sim.send(src, dst, nbytes)
        arrivals[(src, dst)] = sim.now

    sim.process(send("worker0", "worker3", 100, 0.0))  # worker0's uplink busy until 1.0
    sim.process(send("worker0", "worker1", 100, 0.0))  # queued behind it: worker1's downlink booked 1.0-2.0
    sim.process(send("worker2", "worker1", 50, 0.1))  # fits the idle gap 0.1-0.6 on worker1's downlink
    sim.env.run()
    assert arrivals[("worker2", "worker1")] == pytest.approx(0.6)
    assert arrivals[("worker0", "worker1")] == pytest.approx(2.0)  # the earlier booking is not delayed
