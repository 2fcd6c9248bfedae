"""A server's incast on fairly shared links: its flows kept as one star (every flow limited by
the hub alone) move as processor sharing does, and give the very bits progressive filling over
every flow gives (``star_from`` past any count), whatever joins, leaves, degrades or breaks it."""

from __future__ import annotations

from typing import Any

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

import fred
import fred.simulation.flows as flows_module
from fred.simulation.flows import Channel, FairShare, _Star
from tests.conftest import tiny

NEVER = 10**9  # a star_from no component reaches: every recompute is progressive filling
C = 1.25e9  # the hub's capacity, bytes per second
LATENCY_S = 25e-6


def run(
    capacities: list[float],
    flows: list[tuple[float, tuple[int, ...], float]],
    star_from: int,
    changes: tuple[tuple[float, int, float], ...] = (),
) -> list[tuple[str, int, float]]:
    """Flows ``(start_s, channel indices, nbytes)`` on channels of ``capacities``, with capacity
    ``changes`` ``(at_s, channel index, capacity)``: each flow's last byte leaving and arrival, in order."""
    env, caps = simpy.Environment(), list(capacities)
    channels = [Channel(lambda i=i: caps[i]) for i in range(len(caps))]
    share, log = FairShare(env, star_from=star_from), []

    def flow(k: int, start_s: float, path: tuple[int, ...], nbytes: float):
        yield env.timeout(start_s)
        share.start(
            tuple(channels[i] for i in path),
            nbytes,
            LATENCY_S,
            lambda: log.append(("arrive", k, env.now)),
            lambda: log.append(("sent", k, env.now)),
        )

    def change(at_s: float, i: int, capacity: float):
        yield env.timeout(at_s)
        caps[i] = capacity
        share.changed((channels[i],))

    for k, spec in enumerate(flows):
        env.process(flow(k, *spec))
    for spec in changes:
        env.process(change(*spec))
    env.run()
    return log


def incast(
    starts: list[tuple[float, float]], spoke_bps: float = 10 * C
) -> tuple[list[float], list[tuple[int, ...]]]:
    """Flows ``(start_s, nbytes)`` from their own spokes into hub 0: capacities and paths."""
    return [C] + [spoke_bps] * len(starts), [(k + 1, 0) for k in range(len(starts))]


def sent_s(log: list[tuple[str, int, float]], count: int) -> list[float]:
    times = [0.0] * count
    for what, k, at_s in log:
        if what == "sent":
            times[k] = at_s
    return times


def processor_sharing(capacity_bps: float, starts: list[tuple[float, float]]) -> list[float]:
    """The textbook answer: each flow of ``(start_s, nbytes)`` served at capacity over how many are
    in service; when each one's last byte leaves."""
    order = sorted(range(len(starts)), key=lambda k: starts[k][0])
    done, left, now_s, i = [0.0] * len(starts), {}, 0.0, 0
    while i < len(order) or left:
        next_start_s = starts[order[i]][0] if i < len(order) else float("inf")
        if left:
            first = min(left, key=left.__getitem__)
            end_s = now_s + left[first] * len(left) / capacity_bps
        else:
            end_s = float("inf")
        step_s = min(next_start_s, end_s) - now_s
        for k in left:
            left[k] -= step_s * capacity_bps / len(left)
        now_s += step_s
        if end_s <= next_start_s:
            done[first] = now_s
            del left[first]
        else:
            left[order[i]] = starts[order[i]][1]
            i += 1
    return done


@pytest.fixture
def stars(monkeypatch) -> list[int]:
    """How many times a star set its flows' rates: the tests below must exercise it."""
    count = [0]
    rate = _Star.rate

    def counted(self, *args):
        count[0] += 1
        return rate(self, *args)

    monkeypatch.setattr(_Star, "rate", counted)
    return count


@pytest.mark.parametrize(
    "sizes",
    [[1e6] * 40, [1e6 * (1 + k % 7) for k in range(40)], [3e5, 1e6, 1e6, 2e6, 2e6, 2e6, 9e6, 9e6, 9e6]],
)
def test_an_incast_of_flows_that_start_together_is_processor_sharing(sizes, stars):
    starts = [(0.0, n) for n in sizes]
    capacities, paths = incast(starts)
    log = run(capacities, [(s, p, n) for (s, n), p in zip(starts, paths)], star_from=2)
    assert sent_s(log, len(sizes)) == pytest.approx(processor_sharing(C, starts), rel=1e-12)
    assert stars[0] > 0
    # equal flows end at one instant, together, in the order they started
    arrivals = [k for what, k, _ in log if what == "arrive"]
    assert arrivals == sorted(range(len(sizes)), key=lambda k: (sizes[k], k))


def test_late_joiners_take_their_share_from_then_on(stars):
    starts = [(0.0, 4e6), (0.0, 1e6), (1e-3, 2e6), (1e-3, 2e6), (2.5e-3, 5e5)] + [
        (1e-3 * k, 1e6) for k in range(3, 20)
    ]
    capacities, paths = incast(starts)
    flows = [(s, p, n) for (s, n), p in zip(starts, paths)]
    log = run(capacities, flows, star_from=2)
    assert sent_s(log, len(starts)) == pytest.approx(processor_sharing(C, starts), rel=1e-12)
    assert log == run(capacities, flows, star_from=NEVER)
    assert stars[0] > 0


def test_when_a_flows_own_link_becomes_its_bottleneck_the_star_gives_way_to_filling(stars):
    # Four flows share the hub at C/4; two have spokes of 0.3 C. Once the two fast ones have
    # left, C/2 would exceed those spokes: the slow pair runs at 0.3 C each, as filling says.
    starts = [(0.0, 1e6), (0.0, 1e6), (0.0, 4e6), (0.0, 4e6)]
    capacities, paths = incast(starts)
    capacities[3] = capacities[4] = 0.3 * C
    flows = [(s, p, n) for (s, n), p in zip(starts, paths)]
    log = run(capacities, flows, star_from=2)
    assert log == run(capacities, flows, star_from=NEVER)
    fast_s = 4 * 1e6 / C
    assert sent_s(log, 4) == pytest.approx([fast_s, fast_s] + [fast_s + 3e6 / (0.3 * C)] * 2, rel=1e-12)
    assert stars[0] > 0


def test_a_spoke_exactly_at_the_hubs_share_is_filled_first():
    # Filling fixes the first flow at its spoke's C/3, then the other two at (C - C/3)/2, an
    # ulp below C/3: only a spoke above the share leaves the hub to fix them all.
    capacities = [C, C / 3, 10 * C, 10 * C]
    flows = [(0.0, (1, 0), 1e6), (0.0, (2, 0), 1e6), (0.0, (3, 0), 1e6)]
    log = run(capacities, flows, star_from=2)
    assert log == run(capacities, flows, star_from=NEVER)
    assert sent_s(log, 3)[1] != sent_s(run([C, 10 * C, 10 * C, 10 * C], flows, star_from=NEVER), 3)[1]
    # and when a fourth flow leaves a star of four (at C/4) for three
    capacities, flows = capacities + [10 * C], flows + [(0.0, (4, 0), 1e3)]
    assert run(capacities, flows, star_from=2) == run(capacities, flows, star_from=NEVER)


def test_a_second_flow_on_a_spoke_or_across_two_hubs_undoes_the_star():
    capacities = [C, C, 10 * C, 10 * C, 10 * C, 10 * C]  # hubs 0 and 1, spokes 2-5
    flows = [
        (0.0, (2, 0), 3e6),
        (0.0, (3, 0), 2e6),
        (0.0, (4, 0), 1e6),
        (5e-4, (2, 1), 1e6),  # on flow 0's spoke, into another hub
        (1e-3, (5, 0, 1), 1e6),  # across both hubs
        (2e-3, (5, 0), 1e6),
    ]
    assert run(capacities, flows, star_from=2) == run(capacities, flows, star_from=NEVER)


@pytest.mark.parametrize("channel, factor", [(0, 0.25), (0, 4.0), (1, 0.01), (2, 0.5)])
def test_a_degradation_in_flight_during_an_incast_gives_the_filling_bits(channel, factor, stars):
    starts = [(1e-4 * k, 1e6 * (1 + k % 3)) for k in range(12)]
    capacities, paths = incast(starts, spoke_bps=2 * C)
    flows = [(s, p, n) for (s, n), p in zip(starts, paths)]
    changes = ((2e-3, channel, capacities[channel] * factor), (6e-3, channel, capacities[channel]))
    log = run(capacities, flows, star_from=2, changes=changes)
    assert log == run(capacities, flows, star_from=NEVER, changes=changes)
    assert stars[0] > 0


def test_a_degraded_hub_slows_every_flow_in_the_star_alike():
    starts = [(0.0, 1e6)] * 10
    capacities, paths = incast(starts)
    flows = [(s, p, n) for (s, n), p in zip(starts, paths)]
    half_s = 10 * 1e6 / C / 2  # half of every flow sent, then the hub at a quarter
    log = run(capacities, flows, star_from=2, changes=((half_s, 0, C / 4),))
    assert sent_s(log, 10) == pytest.approx([half_s + 10 * 5e5 / (C / 4)] * 10, rel=1e-12)


# Random small networks: two hubs, six other channels, flows across one hub and one or two
# others (sometimes no hub, sometimes a shared channel), sizes and times drawn from short lists
# so that ties happen, capacities that change in flight. Every log must be the filling's, bit for bit.
_capacity = st.sampled_from([0.5 * C, C, 2 * C, 10 * C, C / 3, C / 6])  # C/3: a spoke at the hub's share
_flow = st.tuples(
    st.sampled_from([0.0, 0.0, 1e-4, 3e-4, 1e-3]) | st.floats(0.0, 2e-3),
    st.tuples(
        st.sampled_from([0, 0, 0, 1, None]), st.lists(st.integers(2, 7), min_size=1, max_size=2, unique=True)
    ),
    st.sampled_from([1e5, 1e6, 1e6, 2.5e6]) | st.floats(1e3, 5e6),
)
_change = st.tuples(st.floats(0.0, 3e-3), st.integers(0, 7), _capacity)


@settings(max_examples=300, deadline=None)
@given(
    capacities=st.lists(_capacity, min_size=8, max_size=8),
    specs=st.lists(_flow, min_size=1, max_size=14),
    changes=st.lists(_change, max_size=3),
    star_from=st.integers(2, 4),
)
def test_stars_give_the_bits_of_progressive_filling_on_random_networks(capacities, specs, changes, star_from):
    flows = [
        (start_s, tuple(([] if hub is None else [hub]) + others), nbytes)
        for start_s, (hub, others), nbytes in specs
    ]
    assert run(capacities, flows, star_from, tuple(changes)) == run(capacities, flows, NEVER, tuple(changes))


def _events(scenario: dict[str, Any], star_from: int, monkeypatch) -> Any:
    monkeypatch.setattr(flows_module, "STAR_FROM_FLOWS", star_from)
    return fred.run(fred.validate(scenario)).events


@pytest.mark.parametrize("network", [{}, {"server": {"bandwidth_bps": 1e10}}])
def test_a_parameter_servers_run_is_the_same_bits_with_stars(network, monkeypatch, stars):
    scenario = tiny(
        cluster={
            "workers": 24,
            "compute": {"step_time_s": 0.001},
            "jitter": {"kind": "lognormal", "sigma": 0.1},
        },
        workload={"param_bytes": 10_000_000, "timing_only": True},
        network={"sharing": "fair", **network},
        stop={"max_updates": 120},
    )
    with_stars = _events(scenario, 2, monkeypatch)
    assert stars[0] > 0
    assert with_stars.equals(_events(scenario, NEVER, monkeypatch))
