"""A link's earliest fit by binary search against the scan it replaced.

``Link`` keeps its busy intervals sorted by start with the running latest end (``reach``),
and ``earliest_fit`` jumps to the latest end among the intervals that start too early.
The scan below is the earlier code, verbatim: it moves past overlapping intervals one by
one until none overlaps. Both must give the same float for every link state, the
overlapping intervals that only hand-made bookings can leave included.
"""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from fred.simulation.network import Link, earliest_fit


def scanned_fit(links: tuple[Link, Link], start_s: float, duration_s: float) -> float:
    if all(start_s >= link.free_at_s for link in links):
        return start_s
    moved = True
    while moved:
        moved = False
        for link in links:
            for s, e in link.busy:
                if s < start_s + duration_s and e > start_s:
                    start_s, moved = e, True
    return start_s


# small integers make bookings that touch end to start, joined in one block
times = st.one_of(st.integers(0, 4).map(float), st.floats(0.0, 10.0), st.floats(1e9, 1e10))
durations = st.one_of(st.just(0.0), st.just(1.0), st.floats(0.0, 3.0), st.floats(1e-12, 1e-6))
actions = st.lists(
    st.tuples(st.sampled_from(["book", "book", "book", "forget"]), st.booleans(), times, durations),
    max_size=30,
)


def check_invariants(link: Link, forgot_s: float) -> None:
    assert [s for s, _ in link.busy] == sorted(s for s, _ in link.busy)
    assert link.reach == list(itertools.accumulate((e for _, e in link.busy), max))
    if link.blocks is not None:  # disjoint, sorted, not touching, and covering what is kept
        assert all(s < e for s, e in link.blocks)
        assert all(e < s for (_, e), (s, _) in zip(link.blocks, link.blocks[1:]))
        for s, e in link.busy:
            assert e <= forgot_s or any(bs <= s and e <= be for bs, be in link.blocks)
        for bs, be in link.blocks:  # nothing forgotten is kept
            assert any(bs <= s and e <= be for s, e in link.busy)


@settings(max_examples=500, deadline=None)
@given(actions=actions, probes=st.lists(st.tuples(times, durations), max_size=8))
def test_the_binary_search_fits_where_the_scan_fits(actions, probes):
    """Fits from the latest forgetting time on are the scan's, over what is kept and over
    everything ever booked (what was forgotten had ended and cannot be in the way)."""
    links, everything, forgot_s = (Link(), Link()), (Link(), Link()), 0.0
    for kind, second, time_s, duration_s in actions:
        link = links[second]
        if kind == "book":
            link.book(time_s, time_s + duration_s)
            everything[second].book(time_s, time_s + duration_s)
        else:
            link.forget_before(time_s)
            forgot_s = max(forgot_s, time_s)
        check_invariants(link, forgot_s)
    edges = [t for link in links for interval in link.busy for t in interval]
    for start_s, duration_s in probes + [(t, d) for t in edges[:12] for d in (0.0, 0.5, 1.0)]:
        start_s = max(start_s, forgot_s)
        fit_s = earliest_fit(links, start_s, duration_s)
        assert (
            fit_s == scanned_fit(links, start_s, duration_s) == scanned_fit(everything, start_s, duration_s)
        )
        for link in links:  # one link alone, in one call: the least fit, not just a step towards it
            assert link.fit_after(start_s, duration_s) == scanned_fit((link, Link()), start_s, duration_s)


def test_a_resent_chunk_booked_ahead_leaves_room_before_it():
    """What a lost ring chunk does: its resend is booked later, and the link's next chunks
    fit in the gap before it, found without scanning the link's whole list."""
    link = Link()
    for k in range(4):
        link.book(float(k), k + 0.5)
    link.book(10.0, 10.5)  # the resend
    assert earliest_fit((link, Link()), 4.0, 0.5) == 4.0
    link.book(4.0, 4.5)
    assert link.busy[-2:] == [(4.0, 4.5), (10.0, 10.5)] and link.reach[-2:] == [4.5, 10.5]
    assert earliest_fit((link, Link()), 9.8, 0.5) == 10.5


def test_a_transfer_waits_for_the_whole_queue_on_a_server_downlink():
    """A parameter server's downlink holds back-to-back pushes; a new one fits only after
    the last of them, and a gap wide enough in the queue is taken instead."""
    link = Link()
    for k in range(100):
        link.book(k * 1.0, k * 1.0 + 1.0)
    assert earliest_fit((link, Link()), 0.0, 0.5) == 100.0
    link.forget_before(50.25)
    assert link.busy[0] == (50.0, 51.0) and len(link.busy) == 50
    link.book(101.0, 102.0)
    assert earliest_fit((Link(), link), 60.0, 1.0) == 100.0
    assert earliest_fit((Link(), link), 60.0, 1.5) == 102.0
