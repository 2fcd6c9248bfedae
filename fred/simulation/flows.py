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
"""

from __future__ import annotations

import heapq
import itertools
from typing import Callable

import simpy

_STALL_SHARE = 1e-12  # a share rounded to nothing still moves: a flow at rate 0 would never end


class Channel:
    """One direction of a link: the flows on it, in the order they started."""

    __slots__ = ("capacity", "flows")

    def __init__(self, capacity: Callable[[], float]):
        self.capacity = capacity  # read when rates are computed: a degradation changes it
        self.flows: dict[Flow, None] = {}


class Flow:
    """Bytes in flight on ``channels``: what is left to send at ``since_s`` and at what rate."""

    __slots__ = ("channels", "remaining", "rate_bps", "since_s", "arrive", "latency_s", "timer", "sent", "seq")

    def __init__(self, channels: tuple[Channel, ...], nbytes: float, now_s: float, latency_s: float,
                 arrive: Callable[[], None], sent: Callable[[], None] | None = None, seq: int = 0):
        self.channels, self.remaining, self.rate_bps, self.since_s = channels, nbytes, 0.0, now_s
        self.latency_s, self.arrive, self.timer, self.sent = latency_s, arrive, 0, sent
        self.seq = seq  # its place in the order flows started


class FairShare:
    """The flows of one simulation, their rates and their completions.

    Completions are kept in a calendar of their own (a heap of ``(last byte leaves, the flow's start order,
    rate version, flow)``) with one SimPy event set for its earliest: a server's incast changes
    every flow's rate at every push, and an event per flow per change was most of a run.
    """

    def __init__(self, env: simpy.Environment):
        self.env = env
        self._dirty: dict[Channel, None] = {}  # channels whose flows' rates are due for a recompute
        self._due = False
        self._calendar: list[tuple[float, int, int, Flow]] = []
        self._started = itertools.count()  # flows in the order they start: ties go to the earlier
        self._wake: tuple[float, simpy.Event] | None = None  # the calendar's SimPy event and its time

    def start(self, channels: tuple[Channel, ...], nbytes: float, latency_s: float, arrive: Callable[[], None],
              sent: Callable[[], None] | None = None) -> Flow:
        """Start a flow now; ``sent`` is called when its last byte has left, ``arrive`` when it has arrived."""
        flow = Flow(channels, nbytes, self.env.now, latency_s, arrive, sent, next(self._started))
        for channel in channels:
            channel.flows[flow] = None
        self._touch(channels)
        return flow

    def changed(self, channels: tuple[Channel, ...]) -> None:
        """A channel's capacity changed: its flows get new rates from now on."""
        self._touch(channels)

    def _touch(self, channels: tuple[Channel, ...]) -> None:
        # Every flow that starts or ends at one instant is settled in one recompute, after them all:
        # a ring's p flows start together, and a server's incast of p pushes would cost p^2 otherwise.
        for channel in channels:
            self._dirty[channel] = None
        if not self._due:
            self._due = True
            self.env.timeout(0.0).callbacks.append(self._recompute)

    def _recompute(self, _: simpy.Event) -> None:
        self._due = False
        dirty, self._dirty = self._dirty, {}
        seen: dict[Flow, None] = {}
        for channel in dirty:
            if channel.flows and next(iter(channel.flows)) not in seen:
                self._share(_connected(channel, seen))
        self._set_wake()

    def _share(self, flows: list[Flow]) -> None:
        # In the order they started, whichever link the recompute came from: flows that end at
        # one instant arrive in that order, and rates are filled in it.
        flows.sort(key=_seq)
        now = self.env.now
        for flow, rate in zip(flows, progressive_filling(flows)):
            if rate != flow.rate_bps:  # a flow keeping its rate keeps its calendar entry
                flow.remaining = max(flow.remaining - flow.rate_bps * (now - flow.since_s), 0.0)
                flow.since_s, flow.rate_bps = now, rate
                flow.timer += 1  # its entry at the old rate is stale
                heapq.heappush(self._calendar, (now + flow.remaining / rate, flow.seq, flow.timer, flow))

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

    def _sent(self, flow: Flow) -> None:
        """The flow's last byte has left: free its links, and arrive after its latency."""
        flow.remaining, flow.timer = 0.0, flow.timer + 1
        for channel in flow.channels:
            channel.flows.pop(flow, None)  # a ring's flow may cross a shared NIC twice
        self._touch(flow.channels)
        if flow.sent is not None:
            flow.sent()
        if flow.latency_s > 0.0:
            self.env.timeout(flow.latency_s).callbacks.append(lambda _: flow.arrive())
        else:
            flow.arrive()


def _seq(flow: Flow) -> int:
    return flow.seq


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
    channels: dict[Channel, list[float]] = {}  # channel -> [capacity left, flows not yet fixed]
    for flow in flows:
        for channel in flow.channels:
            if channel not in channels:
                channels[channel] = [channel.capacity(), 0.0]
            channels[channel][1] += 1
    rates: dict[Flow, float] = {}
    while len(rates) < len(flows):
        bottleneck, share = None, 0.0
        for channel, (left, count) in channels.items():  # the least share; the first such on ties
            if count and (bottleneck is None or left / count < share):
                bottleneck, share = channel, left / count
        assert bottleneck is not None
        share = max(share, bottleneck.capacity() * _STALL_SHARE)
        for flow in bottleneck.flows:
            if flow not in rates:
                rates[flow] = share
                for channel in flow.channels:
                    entry = channels[channel]
                    entry[0], entry[1] = max(entry[0] - share, 0.0), entry[1] - 1
    return [rates[flow] for flow in flows]
