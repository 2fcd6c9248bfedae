"""Flow-level transfers: concurrent flows share every link they cross max–min fairly.

A flow moves ``nbytes`` from one port's uplink to another's downlink (and through the
switch's core when it is oversubscribed). While flows are in flight each gets a rate by
progressive filling (SimGrid's and SimAI's flow model of TCP and RDMA): the link whose
capacity, split evenly among its unfixed flows, is least fixes those flows at that share;
their rates are taken from every other link they cross; repeat. No link carries more
than its capacity, and no flow can go faster without slowing one that is no faster.

Rates are recomputed only when a flow starts or ends, or a link's capacity changes (a
degradation), and only for the flows connected to it through shared links: the flows of a
ring phase are on disjoint links, so each one is its own small problem. A flow's last
byte leaves when its bytes run out; it arrives ``hops`` link latencies later.

A flow across sites may also be held to its TCP window over its round trip (:class:`TcpWindow`,
``network.sites.tcp_window_bytes``): a channel of its own with that capacity, which the filling
treats like any other link.

A server's incast is one link that every flow into it crosses, each flow's other links its
own and faster than its share: progressive filling gives every flow the same share, capacity
over count, at every push. Such a *star* (:class:`_Star`) keeps its flows' bytes in arrays
and settles a push in a dozen array operations over them, with the float operations the
filling path does flow by flow, so every time is the same bits; only its first flows to
finish are in the calendar. It is undone into flows filled one by one as soon as it stops
being a star (a flow's own link slower than the share, a second flow on one, a degradation of one).
"""

from __future__ import annotations

import heapq
import itertools
import operator
from typing import Callable, Iterable

import numpy as np
import simpy

from fred.simulation.turns import nothing_due_now, reserve, schedule_reserved, succeed_in_turn

_STALL_SHARE = 1e-12  # a share rounded to nothing still moves: a flow at rate 0 would never end
RTT_FLOOR_S = 1e-9  # sharing: rtt weighs a flow by 1 / its latency: a route of no latency counts as this
STAR_FROM_FLOWS = 8  # the fewest flows made a star: below it the filling is about as cheap


class Channel:
    """One direction of a link: the flows on it, in the order they started."""

    __slots__ = ("capacity", "flows", "star")

    def __init__(self, capacity: Callable[[], float]):
        self.capacity = capacity  # read when rates are computed: a degradation changes it
        self.flows: dict[Flow, None] = {}
        self.star: _Star | None = None  # the star this channel is the hub or a spoke of


Arrival = Callable[[], None] | simpy.Event  # what a flow's arrival calls, or triggers


class Flow:
    """Bytes in flight on ``channels``: what is left to send at ``since_s`` and at what rate.

    In a star its bytes, rate and time live in the star's arrays (``slot``), not here.
    """

    __slots__ = (
        "channels",
        "remaining",
        "rate_bps",
        "since_s",
        "arrive",
        "latency_s",
        "timer",
        "sent",
        "seq",
        "star",
        "slot",
        "weight",
    )

    def __init__(
        self,
        channels: tuple[Channel, ...],
        nbytes: float,
        now_s: float,
        latency_s: float,
        arrive: Arrival,
        sent: Callable[[], None] | None = None,
        seq: int = 0,
        weight: float = 1.0,
    ):
        self.channels, self.remaining, self.rate_bps, self.since_s = channels, nbytes, 0.0, now_s
        self.latency_s, self.arrive, self.timer, self.sent = latency_s, arrive, 0, sent
        self.seq = seq  # its place in the order flows started
        self.star: _Star | None = None
        self.slot = -1
        self.weight = weight  # its share of a link against others': 1, or 1 / route latency (sharing: rtt)


class TcpWindow:
    """SimGrid's TCP_gamma bound on the flows that cross a wide-area channel: a flow of one-way
    latency ``latency_s`` goes at most ``window_bytes / (2 latency_s)``, its window over its round
    trip. SimGrid's CM02 network model bounds every flow's rate by ``TCP_gamma / (2 lat)``, ``lat``
    the route's one-way latency (src/kernel/resource/NetworkModel / network_cm02.cpp, option
    ``network/TCP-gamma``, 4 MiB by default). Here only flows that leave their site are bounded
    (inside a datacenter the bound is far above any link), and the bound is fixed when the flow
    starts (a later latency degradation leaves it).

    The bound is a channel of the flow's own of that capacity: progressive filling then gives the
    flow the least of its fair share and its window's rate, as SimGrid's bounded variables do."""

    def __init__(self, window_bytes: float, wide_area: Callable[[], Iterable[Channel]]):
        self.window_bytes = window_bytes
        self.wide_area = wide_area  # the sites' wide-area channels (read at each flow: made lazily)

    def bound(self, channels: tuple[Channel, ...], latency_s: float) -> tuple[Channel, ...]:
        """``channels``, and the window's channel when they cross a wide-area one and the route has
        a latency (a route of none has no round trip to bound it)."""
        if latency_s <= 0 or not set(self.wide_area()).intersection(channels):
            return channels
        rate_bps = self.window_bytes / (2.0 * latency_s)
        return (*channels, Channel(lambda: rate_bps))


class FairShare:
    """The flows of one simulation, their rates and their completions.

    Completions are kept in a calendar of their own (a heap of ``(last byte leaves, the flow's start order,
    rate version, flow)``) with one SimPy event set for its earliest: a server's incast changes
    every flow's rate at every push, and an event per flow per change would be most of a run's events.
    ``star_from`` is the fewest flows a star is made of (default :data:`STAR_FROM_FLOWS`): it changes
    the cost, never a result.

    A flow's last byte leaving schedules a recompute that usually has nothing to do (its links
    are left empty): it keeps its place in SimPy's order but is scheduled only when it may have
    something to do (:mod:`fred.simulation.turns`); and an arrival that is an event is processed
    in the step that ends the latency when nothing else is due at that instant.
    """

    def __init__(self, env: simpy.Environment, star_from: int | None = None, rtt: bool = False):
        self.env = env
        # rtt (network.sharing: rtt): a flow's share of a link is in proportion to 1 / its route's
        # latency, and its bytes start after that latency (SimGrid's CM02). Stars assume equal shares.
        self.rtt = rtt
        self.star_from = (STAR_FROM_FLOWS if star_from is None else star_from) if not rtt else 1 << 62
        self._dirty: dict[Channel, None] = {}  # channels whose flows' rates are due for a recompute
        self._due = False
        self._calendar: list[tuple[float, int, int, Flow]] = []
        self._started = itertools.count()  # flows in the order they start: ties go to the earlier
        self._wake: tuple[float, simpy.Event] | None = None  # the calendar's SimPy event and its time
        self._held: int | None = None  # the place in SimPy's order of a recompute not yet scheduled
        self._starred = False  # whether a star was ever made (until then no channel is in one)
        self.window: TcpWindow | None = None  # network.sites.tcp_window_bytes: wide-area flows' bound

    def start(
        self,
        channels: tuple[Channel, ...],
        nbytes: float,
        latency_s: float,
        arrive: Arrival,
        sent: Callable[[], None] | None = None,
    ) -> Flow:
        """Start a flow now; ``sent`` is called when its last byte has left, ``arrive`` when it has
        arrived (an event is triggered instead). With ``rtt`` its bytes start ``latency_s`` from now
        and arrive as the last one leaves. With a :class:`TcpWindow` a wide-area flow also crosses
        its window's channel."""
        if self.window is not None:
            channels = self.window.bound(channels, latency_s)
        if self.rtt:
            weight = 1.0 / max(latency_s, RTT_FLOOR_S)
            if latency_s > 0:
                flow = Flow(channels, nbytes, self.env.now, 0.0, arrive, sent, next(self._started), weight)
                self.env.timeout(latency_s).callbacks.append(lambda _: self._begin(flow))
                return flow
            return self._begin(
                Flow(channels, nbytes, self.env.now, 0.0, arrive, sent, next(self._started), weight)
            )
        return self._begin(Flow(channels, nbytes, self.env.now, latency_s, arrive, sent, next(self._started)))

    def _begin(self, flow: Flow) -> Flow:
        """Put ``flow`` on its channels from now."""
        flow.since_s = self.env.now
        channels = flow.channels
        for channel in channels:
            channel.flows[flow] = None
        for channel in channels if self._starred else ():  # until a star is made, no channel is in one
            star = channel.star
            if star is not None:
                if channel is star.hub:
                    star.joining.append(flow)
                else:
                    star.broken = True  # a spoke is no longer one flow's own
        self._touch(channels)
        return flow

    def changed(self, channels: tuple[Channel, ...]) -> None:
        """A channel's capacity changed: its flows get new rates from now on."""
        for channel in channels:
            star = channel.star
            if star is not None and channel is not star.hub:
                star.broken = True  # spokes' capacities are read as flows join; the hub's at every settle
        self._touch(channels)

    def _touch(self, channels: tuple[Channel, ...], hold: bool = False) -> None:
        """Mark ``channels`` for the recompute at this instant, scheduling it if it is not yet.
        ``hold`` (from inside the calendar's wake): its place in the order is taken now, and
        :meth:`_release_recompute` schedules it there when the wake is done, if needed."""
        # Every flow that starts or ends at one instant is settled in one recompute, after them all:
        # a ring's p flows start together, and a server's incast of p pushes would cost p^2 otherwise.
        self._dirty.update(dict.fromkeys(channels))
        if not self._due:
            self._due = True
            if hold:
                self._held = reserve(self.env)
            else:
                self.env.timeout(0.0).callbacks.append(self._recompute)

    def _recompute(self, _: simpy.Event) -> None:
        self._due = False
        dirty, self._dirty = self._dirty, {}
        channels: Iterable[Channel] = dirty
        if self._starred:
            stars = {channel.star: None for channel in dirty if channel.star is not None}
            channels = itertools.chain(dirty, [star.hub for star in stars if not self._settle(star)])
        seen: dict[Flow, None] = {}
        lone = self.star_from > 1  # a lone flow is never a star
        for channel in channels:
            flows = channel.flows
            if flows:
                first = next(iter(flows))
                if first.star is None and first not in seen:
                    if (
                        lone and len(flows) == 1 and _alone(first)
                    ):  # what the filling gives one flow, without it
                        seen[first] = None
                        self._set_rate(first, min([c.capacity() for c in first.channels]), self.env.now)
                    else:
                        self._share(_connected(channel, seen))
        self._set_wake()

    def _release_recompute(self) -> None:
        """Schedule the held recompute, unless it would find nothing to do: no flow or star on the
        channels touched, and no other event at this instant before it that could start one."""
        place, self._held = self._held, None
        dirty = self._dirty
        busy = (
            any(channel.flows or channel.star is not None for channel in dirty)
            if self._starred
            else any(map(_flows_of, dirty))
        )
        if busy or not nothing_due_now(self.env):
            schedule_reserved(self.env, place, self._recompute)  # type: ignore[arg-type]
        else:  # it would be the next event, and find every touched channel empty
            self._dirty, self._due = {}, False

    def _share(self, flows: list[Flow]) -> None:
        # In the order they started, whichever link the recompute came from: flows that end at
        # one instant arrive in that order, and rates are filled in it.
        flows.sort(key=_seq)
        hub = _hub(flows) if len(flows) >= self.star_from else None
        if hub is not None:
            star = hub.star = _Star(hub)
            self._starred = True
            star.joining = flows
            if self._settle(star):
                return
        now = self.env.now
        for flow, rate in zip(flows, progressive_filling(flows)):
            self._set_rate(flow, rate, now)

    def _set_rate(self, flow: Flow, rate: float, now: float) -> None:
        if rate != flow.rate_bps:  # a flow keeping its rate keeps its calendar entry
            flow.remaining = max(flow.remaining - flow.rate_bps * (now - flow.since_s), 0.0)
            flow.since_s, flow.rate_bps = now, rate
            flow.timer += 1  # its entry at the old rate is stale
            heapq.heappush(self._calendar, (now + flow.remaining / rate, flow.seq, flow.timer, flow))

    def _settle(self, star: _Star) -> bool:
        """New rates for a star's flows, as progressive filling would give them; False, and the
        star is undone, when it is no longer one (its flows are then filled like any others)."""
        hub, count = star.hub, len(star.hub.flows)
        joining, star.joining = star.joining, []
        if count == 0:
            hub.star = None
            return True
        capacity = hub.capacity()
        share = capacity / count  # the hub's share, as the filling computes it
        spokes = [_spoke_bps(flow, hub) for flow in joining]
        # The hub fixes every flow at its share when every other link would give each more.
        if (
            star.broken
            or not capacity > 0.0
            or None in spokes
            or not star.spokes_exceed(share)
            or not all(spoke_bps > share for spoke_bps in spokes)
        ):  # type: ignore[operator]
            self._undo(star)
            return False
        for flow, spoke_bps in zip(joining, spokes):
            star.add(flow, spoke_bps)  # type: ignore[arg-type]
        for flow in star.first:
            flow.timer += 1  # the entries of the flows that were first are stale
        at_s, star.first = star.rate(max(share, capacity * _STALL_SHARE), self.env.now)
        for flow in star.first:
            heapq.heappush(self._calendar, (at_s, flow.seq, flow.timer, flow))
        return True

    def _undo(self, star: _Star) -> None:
        """Back to flows of their own, each with its calendar entry (as if never in a star)."""
        star.hub.star = None
        for flow in star.flows:
            if flow is not None:
                star.remove(flow)
                flow.timer += 1
                heapq.heappush(
                    self._calendar,
                    (flow.since_s + flow.remaining / flow.rate_bps, flow.seq, flow.timer, flow),
                )

    def _set_wake(self) -> None:
        """Have the calendar's earliest live entry wake it (one SimPy event at a time)."""
        calendar = self._calendar
        while calendar and calendar[0][3].timer != calendar[0][2]:
            heapq.heappop(calendar)
        if calendar and (self._wake is None or calendar[0][0] < self._wake[0]):
            at_s = calendar[0][0]
            event = self.env.timeout(max(at_s - self.env.now, 0.0))
            event.callbacks.append(self._woken)
            self._wake = (at_s, event)

    def _woken(self, event: simpy.Event) -> None:
        if self._wake is None or self._wake[1] is not event:
            return  # an earlier entry took its place
        at_s, self._wake = self._wake[0], None
        calendar = self._calendar
        while calendar and calendar[0][0] <= at_s:
            _, _, timer, flow = heapq.heappop(calendar)
            if flow.timer == timer:
                self._sent(flow)
        self._set_wake()
        if self._held is not None:
            self._release_recompute()

    def _sent(self, flow: Flow) -> None:
        """The flow's last byte has left: free its links, and arrive after its latency."""
        if flow.star is not None:
            flow.star.remove(flow)
        flow.remaining, flow.timer = 0.0, flow.timer + 1
        for channel in flow.channels:
            channel.flows.pop(flow, None)  # a ring's flow may cross a shared NIC twice
        self._touch(flow.channels, hold=True)
        if flow.sent is not None:
            flow.sent()
        arrive = flow.arrive
        if flow.latency_s > 0.0:
            env = self.env
            if isinstance(arrive, simpy.Event):  # the latency's end is its own event's last callback
                env.timeout(flow.latency_s).callbacks.append(lambda _: succeed_in_turn(env, arrive))
            else:
                env.timeout(flow.latency_s).callbacks.append(lambda _: arrive())
        elif isinstance(arrive, simpy.Event):
            arrive.succeed()
        else:
            arrive()


class _Star:
    """A hub channel whose every flow it alone limits: each of its flows crosses it once, and
    crosses nothing else that another flow crosses or that is not faster than the hub's share.

    Progressive filling then fixes every flow at the hub's share (capacity over count) in its
    first step, so the star does what :meth:`FairShare._share` does without the filling: a flow
    whose rate changes has its bytes left taken down at its old rate since its last change, and
    finishes at its time plus its bytes over its rate. Flows are kept in arrays (a slot each), so
    a push costs array operations, not Python ones per flow; elementwise they are the filling
    path's float operations, so the times are the same bits. Only the flows that finish first
    are in the calendar.
    """

    def __init__(self, hub: Channel):
        self.hub = hub
        self.flows: list[Flow | None] = []  # by slot
        self._free: list[int] = []
        self.remaining = np.full(0, np.inf)  # a free slot: infinitely many bytes, never first
        self.since_s = np.zeros(0)
        self.rate_bps = np.ones(0)
        self.spoke_bps = np.full(0, np.inf)  # the least capacity of each flow's other channels
        self._least_spoke_bps = np.inf  # at most the least of spoke_bps
        self.joining: list[Flow] = []  # started on the hub since the last settle
        self.first: list[Flow] = []  # the flows in the calendar: those that finish first
        self.broken = False  # a spoke took a second flow, or its capacity changed

    def add(self, flow: Flow, spoke_bps: float) -> None:
        if not self._free:
            self._grow()
        slot = self._free.pop()
        self.flows[slot], flow.slot, flow.star = flow, slot, self
        self.remaining[slot], self.since_s[slot], self.rate_bps[slot] = (
            flow.remaining,
            flow.since_s,
            flow.rate_bps,
        )
        self.spoke_bps[slot] = spoke_bps
        self._least_spoke_bps = min(self._least_spoke_bps, spoke_bps)
        flow.timer += 1  # a flow out of the calendar unless first
        for channel in flow.channels:
            channel.star = self

    def remove(self, flow: Flow) -> None:
        """Take ``flow`` out, with its bytes, rate and time as of now kept on it."""
        slot = flow.slot
        flow.remaining, flow.since_s, flow.rate_bps = (
            float(self.remaining[slot]),
            float(self.since_s[slot]),
            float(self.rate_bps[slot]),
        )
        self.flows[slot], flow.star = None, None
        self.remaining[slot], self.spoke_bps[slot] = np.inf, np.inf
        self._free.append(slot)
        for channel in flow.channels:
            if channel is not self.hub:
                channel.star = None

    def _grow(self) -> None:
        n = max(len(self.flows), 8)
        self.flows += [None] * n
        self._free += range(len(self.flows) - 1, len(self.flows) - n - 1, -1)
        self.remaining = np.concatenate([self.remaining, np.full(n, np.inf)])
        self.since_s = np.concatenate([self.since_s, np.zeros(n)])
        self.rate_bps = np.concatenate([self.rate_bps, np.ones(n)])
        self.spoke_bps = np.concatenate([self.spoke_bps, np.full(n, np.inf)])

    def spokes_exceed(self, share_bps: float) -> bool:
        """Whether every flow's other channels give it more than ``share_bps``."""
        if not self._least_spoke_bps > share_bps:  # a bound from below: flows that left may have raised it
            self._least_spoke_bps = float(self.spoke_bps.min()) if len(self.spoke_bps) else np.inf
        return self._least_spoke_bps > share_bps

    def rate(self, rate_bps: float, now_s: float) -> tuple[float, list[Flow]]:
        """Every flow at ``rate_bps`` from now: when the first finish, and which (in start order)."""
        changed = self.rate_bps != rate_bps
        count = np.count_nonzero(changed)
        if count == len(changed):  # the usual: a push changes every share
            np.maximum(self.remaining - self.rate_bps * (now_s - self.since_s), 0.0, out=self.remaining)
            self.since_s.fill(now_s)
            self.rate_bps.fill(rate_bps)
            finish_s = self.remaining / rate_bps
            finish_s += now_s
        else:
            if count:
                slots = changed.nonzero()[0]
                left = self.remaining[slots] - self.rate_bps[slots] * (now_s - self.since_s[slots])
                self.remaining[slots] = np.maximum(left, 0.0)
                self.since_s[slots] = now_s
                self.rate_bps[slots] = rate_bps
            finish_s = self.since_s + self.remaining / self.rate_bps
        at_s = finish_s[finish_s.argmin()]
        first = [self.flows[slot] for slot in (finish_s == at_s).nonzero()[0]]
        return float(at_s), sorted(first, key=_seq)  # type: ignore[arg-type]


def _seq(flow: Flow) -> int:
    return flow.seq


def _hub(flows: list[Flow]) -> Channel | None:
    """A channel every one of ``flows`` crosses (they are all of its flows), if there is one."""
    for channel in flows[0].channels:
        if len(channel.flows) == len(flows):
            return channel
    return None


def _spoke_bps(flow: Flow, hub: Channel) -> float | None:
    """The least capacity of the flow's channels other than ``hub``; None unless it crosses the
    hub once and each other channel once, alone."""
    least, crossings = np.inf, 0
    for channel in flow.channels:
        if channel is hub:
            crossings += 1
        elif len(channel.flows) != 1 or channel.star is not None:
            return None
        else:
            least = min(least, channel.capacity())
    if crossings != 1 or len(set(flow.channels)) != len(flow.channels):
        return None
    return least


def _alone(flow: Flow) -> bool:
    """Whether ``flow`` is the only flow on each of its channels, and crosses each once."""
    channels = flow.channels
    if len(channels) == 2:
        return len(channels[0].flows) == 1 and len(channels[1].flows) == 1 and channels[0] is not channels[1]
    return max(map(len, map(_flows_of, channels)), default=1) == 1 and len(set(channels)) == len(channels)


_flows_of = operator.attrgetter("flows")


def _connected(start: Channel, seen: dict[Flow, None]) -> list[Flow]:
    """The flows linked to ``start``'s through shared channels, in the order they are reached."""
    flows: list[Flow] = []
    channels, visited = [start], {start: None}
    while channels:
        for flow in channels.pop().flows:
            if flow not in seen:
                seen[flow] = None
                flows.append(flow)
                for other in flow.channels:
                    if other not in visited:
                        visited[other] = None
                        channels.append(other)
    return flows


def progressive_filling(flows: list[Flow]) -> list[float]:
    """Max–min fair rates of ``flows``, which hold every flow of each channel they cross.

    A flow that crosses a channel twice (a ring through a NIC its node's workers share) takes
    two shares of it at its one rate.
    """
    if len(flows) == 1:  # alone on its links (a ring's phase): the least of their capacities
        crossings: dict[Channel, int] = {}
        for channel in flows[0].channels:
            crossings[channel] = crossings.get(channel, 0) + 1
        return [min(channel.capacity() / times for channel, times in crossings.items())]
    # channel -> [capacity left, weight of the flows not yet fixed, how many they are]
    channels: dict[Channel, list[float]] = {}
    for flow in flows:
        for channel in flow.channels:
            if channel not in channels:
                channels[channel] = [channel.capacity(), 0.0, 0]
            entry = channels[channel]
            entry[1] += flow.weight
            entry[2] += 1
    rates: dict[Flow, float] = {}
    while len(rates) < len(flows):
        bottleneck, share = None, 0.0
        for channel, (
            left,
            weight,
            count,
        ) in channels.items():  # the least share a unit of weight; the first on ties
            if count and (bottleneck is None or left / weight < share):
                bottleneck, share = channel, left / weight
        assert bottleneck is not None
        share = max(share, bottleneck.capacity() * _STALL_SHARE)
        for flow in bottleneck.flows:
            if flow not in rates:
                rate = rates[flow] = share * flow.weight
                for channel in flow.channels:
                    entry = channels[channel]
                    entry[0], entry[1], entry[2] = (
                        max(entry[0] - rate, 0.0),
                        entry[1] - flow.weight,
                        entry[2] - 1,
                    )
    return [rates[flow] for flow in flows]
