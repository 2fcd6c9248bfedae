"""Links, point-to-point transfers and the ring all-reduce schedule.

Every node has one full-duplex link (its NIC) to a switch: an uplink and a downlink.
By default a node holds one worker; with ``cluster.devices_per_node`` or
``workers_per_device`` above 1 the workers of a node share its NIC, and each device has
a link of its own inside the node (``network.intra_node``), which the node's workers use
to talk to each other. A parameter server is a node of its own. A transfer from A to B
occupies A's uplink and B's downlink for ``bytes / bandwidth`` seconds and arrives
``latency_s`` after its last byte left; on idle links that is the classic
``alpha + n*beta``. Transfers
are booked when they are requested, first come first served: each takes the
earliest time both its links are free for its whole duration. A later request
may use an idle gap left before an earlier booking (a transfer waiting for a
busy downlink does not hold the other link idle for everyone else), but it
never delays a transfer booked before it.
"""

from __future__ import annotations

import bisect
import itertools
import math
from dataclasses import dataclass, field
from typing import Callable

from fred.scenario.schema import NetworkConfig
from fred.simulation.flows import Channel


@dataclass
class Link:
    """One direction of a port: its booked busy intervals, and when the last one ends.

    ``busy`` is kept sorted by start, with ``reach[i]`` the latest end among ``busy[:i + 1]``,
    so that a fit is found with a binary search, not a scan of every interval: after a lost
    chunk is resent later, every chunk its link carries next fits before it, and a scan would
    make a lossy ring all-reduce cost O(p^4).

    ``blocks`` is the same time merged: the unions of intervals that overlap or touch, sorted
    and disjoint. A queue of back-to-back transfers (a parameter server's downlink) is one
    block, so a fit walks only the gaps too short for it, not every queued transfer. It is
    rebuilt from ``busy`` when needed after :meth:`share` (``None`` until then).
    """

    busy: list[tuple[float, float]] = field(default_factory=list)
    free_at_s: float = 0.0
    reach: list[float] = field(default_factory=list, compare=False, repr=False)
    # ``busy`` and ``reach`` may be lists shared by a ring's links (2p lists of 2(p-1) intervals
    # would be p^2 references to copy and for the garbage collector to walk): copy before booking.
    shared: bool = field(default=False, compare=False, repr=False)
    blocks: list[tuple[float, float]] | None = field(default_factory=list, compare=False, repr=False)

    def forget_before(self, now_s: float) -> None:
        if self.busy and self.busy[0][1] <= now_s:
            # Every interval ends by free_at_s: an idle link drops all without a scan
            # (a ring leaves 2(p-1) intervals on each of its links).
            if self.free_at_s <= now_s:
                self.busy, self.reach, self.blocks = [], [], []
            else:  # the prefix whose latest end has passed (later ones that ended can never overlap again)
                ended = bisect.bisect_right(self.reach, now_s)
                self.busy, self.reach = self.busy[ended:], self.reach[ended:]
                if self.blocks is not None:  # disjoint and sorted: their ends are sorted too
                    del self.blocks[: bisect.bisect_right(self.blocks, now_s, key=_end)]
            self.shared = False

    def book(self, start_s: float, end_s: float) -> None:
        if end_s > start_s:
            if self.shared:
                self.busy, self.reach, self.shared = self.busy[:], self.reach[:], False
            busy, reach = self.busy, self.reach
            if not busy:
                busy.append((start_s, end_s))
                reach.append(end_s)
            elif busy[-1][0] <= start_s:  # the common case: after everything booked
                busy.append((start_s, end_s))
                reach.append(end_s if end_s > reach[-1] else reach[-1])
            else:  # in a gap before a later booking: keep the order
                self._insert(bisect.bisect_right(busy, start_s, key=_start), start_s, end_s)
            if self.blocks is not None:
                _merge(self.blocks, start_s, end_s)
            if end_s > self.free_at_s:
                self.free_at_s = end_s

    def _insert(self, at: int, start_s: float, end_s: float) -> None:
        reach = self.reach
        self.busy.insert(at, (start_s, end_s))
        reach.insert(at, max(reach[at - 1], end_s) if at else end_s)
        for k in range(at + 1, len(reach)):  # the later prefixes now include end_s
            if reach[k] >= end_s:
                break
            reach[k] = end_s

    def fit_after(self, start_s: float, duration_s: float) -> float:
        """The first time >= ``start_s`` at which this link alone is free for ``duration_s``.

        The intervals starting before ``start_s + duration_s`` are a prefix of ``busy``; the
        latest end among them (``reach``) is a lower bound on any fit. From there, the ones
        after the prefix that the moved window reaches are walked in order (a queue of
        back-to-back transfers is walked once, as the scan did).

        A window long enough to move every time it is added to (``duration_s`` over the
        spacing of floats at the largest time in play) overlaps an interval exactly when it
        overlaps that interval's block, so the blocks give the same least fit, gap by gap.
        Only a window that rounds away (``start_s + duration_s == start_s``) can fit at the
        point where two touching intervals meet, and it walks the intervals.
        """
        if self.busy and duration_s > math.ulp(max(abs(start_s), abs(self.busy[0][0]), abs(self.free_at_s))):
            return self._fit_in_blocks(start_s, duration_s)
        busy = self.busy
        at = bisect.bisect_left(busy, start_s + duration_s, key=_start)
        if at and self.reach[at - 1] > start_s:
            start_s = self.reach[at - 1]
        while at < len(busy) and busy[at][0] < start_s + duration_s:
            if busy[at][1] > start_s:
                start_s = busy[at][1]
            at += 1
        return start_s

    def _fit_in_blocks(self, start_s: float, duration_s: float) -> float:
        if self.blocks is None:
            self.blocks = []
            for start, end in self.busy:
                _merge(self.blocks, start, end)
        blocks = self.blocks
        at = bisect.bisect_left(blocks, start_s + duration_s, key=_start)
        if at and blocks[at - 1][1] > start_s:  # the blocks before it end earlier
            start_s = blocks[at - 1][1]
        while at < len(blocks) and blocks[at][0] < start_s + duration_s:  # a gap too short
            start_s = blocks[at][1]
            at += 1
        return start_s

    def share(self, busy: list[tuple[float, float]], reach: list[float]) -> None:
        """Take ``busy`` (sorted, never changed in place again) and its ``reach`` as this link's."""
        self.busy, self.reach, self.shared, self.blocks = busy, reach, True, None
        if busy:
            self.free_at_s = max(self.free_at_s, reach[-1])


def _merge(blocks: list[tuple[float, float]], start_s: float, end_s: float) -> None:
    """Add ``[start_s, end_s)`` to sorted, disjoint ``blocks``, joining those it overlaps or touches."""
    last = bisect.bisect_right(blocks, end_s, key=_start)  # blocks[:last] start by end_s
    first = last
    while first and blocks[first - 1][1] >= start_s:
        first -= 1
    if first == last:
        blocks.insert(last, (start_s, end_s))
    else:
        blocks[first:last] = [(min(start_s, blocks[first][0]), max(end_s, blocks[last - 1][1]))]


def _start(interval: tuple[float, float]) -> float:
    return interval[0]


def _end(interval: tuple[float, float]) -> float:
    return interval[1]


@dataclass
class Port:
    """One full-duplex link: a node's NIC to the switch, or a device's link inside its node.

    ``up``/``down`` are its directions as first-come-first-served bookings, ``tx``/``rx`` as
    channels of fairly shared flows; a network uses one pair or the other.
    """

    latency_s: float
    bandwidth_bps: float
    up: Link = field(default_factory=Link)
    down: Link = field(default_factory=Link)
    name: str = ""  # what faults key a degradation by: the entity, or "node3" for a shared NIC
    tx: Channel = field(init=False, repr=False, compare=False)
    rx: Channel = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.tx = Channel(self._capacity)
        self.rx = Channel(self._capacity)

    def _capacity(self) -> float:
        return self.bandwidth_bps


@dataclass
class Transfer:
    """A booked transfer: when its first byte leaves and when its last byte arrives."""

    start_s: float
    arrive_s: float


Book = Callable[[str, str, float, float], Transfer]  # (src, dst, nbytes, not_before_s) -> the transfer


def earliest_fit(links: tuple[Link, Link], start_s: float, duration_s: float) -> float:
    """The first time >= ``start_s`` at which every link is free for ``duration_s``.

    An interval ``(s, e)`` with ``s < start + duration`` and ``e > start`` overlaps; no start
    before ``e`` can then fit, so every move (:meth:`Link.fit_after`, one link at a time,
    until neither moves) goes to such an ``e``: the result is the least fitting time,
    whichever overlapping interval is looked at first.
    """
    if all(start_s >= link.free_at_s for link in links):
        return start_s  # the common case: nothing booked after this point
    moved = True
    while moved:
        moved = False
        for link in links:
            fit_s = link.fit_after(start_s, duration_s)
            if fit_s > start_s:
                start_s, moved = fit_s, True
    return start_s


@dataclass
class Network:
    """The scenario's nodes on one switch, and their devices' links inside them, booked in request order.

    ``ports`` maps every entity to its node's NIC; ``fabric`` maps a worker to its device's
    link inside the node. Both are shared by the entities behind them.
    """

    config: NetworkConfig
    workers_per_device: int = 1
    devices_per_node: int = 1
    ports: dict[str, Port] = field(default_factory=dict)
    fabric: dict[str, Port] = field(default_factory=dict)
    node: dict[str, str] = field(default_factory=dict)  # entity -> the name of its node
    site: dict[str, int] = field(
        default_factory=dict
    )  # entity -> its site (network.sites), when there are sites
    wan: list[Port] = field(default_factory=list)  # each site's wide-area link
    _shared_ports: dict[str, Port] = field(
        default_factory=dict, repr=False
    )  # "node3", "device12" -> its port
    _core: Channel | None = field(default=None, repr=False)
    _paths: dict[tuple[str, str], tuple[tuple[Channel, ...], Port, Port, tuple[Port, ...]]] = field(
        default_factory=dict, repr=False
    )

    def add(self, entity: str, server: bool = False, worker: int | None = None) -> None:
        """Connect ``entity``: a server (a node of its own) or the worker of index ``worker``."""
        self._paths.clear()
        sites = self.config.sites
        if sites is not None:
            if not self.wan:
                self.wan = [
                    Port(sites.latency_s, sites.bandwidth_bps, name=f"site{k}")
                    for k in range(len(sites.nodes))
                ]
            if worker is None:
                self.site[entity] = sites.server_site
            else:
                node = worker // (self.workers_per_device * self.devices_per_node)
                self.site[entity] = bisect.bisect_right(list(itertools.accumulate(sites.nodes)), node)
        if worker is None or self.workers_per_device * self.devices_per_node == 1:
            link = self.config.server if (server and self.config.server is not None) else self.config
            self.ports[entity] = Port(
                link.latency_s, link.bandwidth_bps * self.config.efficiency, name=entity
            )
            self.node[entity] = entity
            return
        device, node = (
            worker // self.workers_per_device,
            worker // (self.workers_per_device * self.devices_per_node),
        )
        self.node[entity] = f"node{node}"
        self.ports[entity] = self._shared(
            f"node{node}", self.config.latency_s, self.config.bandwidth_bps * self.config.efficiency
        )
        intra = self.config.intra_node
        self.fabric[entity] = self._shared(f"device{device}", intra.latency_s, intra.rate_bps())

    def _shared(self, name: str, latency_s: float, bandwidth_bps: float) -> Port:
        """The port called ``name``, made by the first worker behind it."""
        if name not in self._shared_ports:
            self._shared_ports[name] = Port(latency_s, bandwidth_bps, name=name)
        return self._shared_ports[name]

    def path(self, src: str, dst: str) -> tuple[tuple[Channel, ...], float]:
        """What a flow from ``src`` to ``dst`` crosses (the sender's uplink, the switch's core when
        it is oversubscribed and the flow leaves its node, the receiver's downlink) and its latency.

        The route is kept per pair (entities' ports never change once added); the latency is read
        each time, as a degradation changes it."""
        kept = self._paths.get((src, dst))
        if kept is None:
            up, down = self.route(src, dst)
            core = (
                (self.core,)
                if self.core is not None
                and up is self.ports.get(src)
                and self.node[src] != self.node.get(dst, dst)
                else ()
            )
            wide = self._wide_area(src, dst)
            across = (
                (wide[0].tx, wide[1].rx) if wide else ()
            )  # the source site's uplink, the other's downlink
            kept = (up.tx, *core, *across, down.rx), up, down, wide
            self._paths[(src, dst)] = kept
        channels, up, down, wide = kept
        latency_s = max(up.latency_s, down.latency_s)
        return channels, latency_s + max(port.latency_s for port in wide) if wide else latency_s

    def _wide_area(self, src: str, dst: str) -> tuple[Port, ...]:
        """The sites' wide-area links a route crosses: the source site's uplink and the destination
        site's downlink, or none inside one site."""
        if not self.site or self.site[src] == self.site[dst]:
            return ()
        return self.wan[self.site[src]], self.wan[self.site[dst]]

    def link_port(self, entity: str) -> Port:
        """The link a fault names: an entity's (its node's NIC when shared) or ``site<k>``'s wide-area
        link."""
        if entity not in self.ports and entity.startswith("site") and entity[4:].isdigit() and self.wan:
            return self.wan[int(entity[4:])]
        return self.ports[entity]

    @property
    def core(self) -> Channel | None:
        """The oversubscribed switch's core, shared by every flow between nodes (None: non-blocking)."""
        if self.config.oversubscription == 1:
            return None
        if self._core is None:
            nics = {id(port): port for port in self.ports.values()}.values()  # shared NICs once
            core_bps = sum(port.bandwidth_bps for port in nics) / self.config.oversubscription  # as built
            self._core = Channel(lambda: core_bps)
        return self._core

    def route(self, src: str, dst: str) -> tuple[Port, Port]:
        """The ports a transfer uses: the devices' links inside one node, the NICs across nodes."""
        if self.fabric and self.node[src] == self.node[dst]:
            return self.fabric[src], self.fabric[dst]
        return self.ports[src], self.ports[dst]

    def reserve(
        self, src: str, dst: str, nbytes: float, now_s: float, not_before_s: float | None = None
    ) -> Transfer:
        """Book ``nbytes`` from ``src`` to ``dst`` at the first time both links are free.

        ``now_s`` is the simulation's clock; ``not_before_s`` a later earliest start
        (a collective booking its future steps).
        """
        up, down = self.route(src, dst)
        duration = nbytes / min(up.bandwidth_bps, down.bandwidth_bps)
        up.up.forget_before(now_s)
        down.down.forget_before(now_s)
        start = earliest_fit((up.up, down.down), max(now_s, not_before_s or now_s), duration)
        up.up.book(start, start + duration)
        down.down.book(start, start + duration)
        return Transfer(start, start + duration + max(up.latency_s, down.latency_s))

    def ring_on_idle_links(
        self, names: list[str], chunk_bytes: float, reduce_s: float, now_s: float
    ) -> float | None:
        """Book a ring all-reduce at once when it cannot meet anything; ``None`` when it might.

        On idle, uniform links no chunk ever waits for a link, so every member sends
        its step-k chunk at the same instant and all members share one timeline. That
        timeline is computed once, with the very float operations :meth:`reserve` and
        :func:`ring_by_chunk` would do, and its intervals are put on every link (one
        list, shared until a link books something else): the same busy lists (and so
        the same answers for later transfers) as booking the 2p(p-1) chunk transfers
        one by one. Intervals are not merged: the latency and reduction between a
        member's chunks leave gaps that other transfers may use.
        Returns when the last member has the result (before the sync cost).
        """
        ports = [self.ports[name] for name in names]
        if self.fabric or not self._ring_is_idle_and_uniform(
            ports, reduce_s, now_s
        ):  # nodes of several: chunk by chunk
            return None
        duration_s = chunk_bytes / ports[0].bandwidth_bps  # reserve's nbytes / min(bandwidths), all equal
        intervals, done_s = _ring_timeline(len(ports), duration_s, ports[0].latency_s, reduce_s, now_s)
        reach = list(itertools.accumulate((e for _, e in intervals), max))
        for port in ports:  # each member's uplink and its successor's downlink: every link once
            port.up.share(intervals, reach)  # what forget_before(now_s) then the bookings would leave
            port.down.share(intervals, reach)
        return done_s

    @staticmethod
    def _ring_is_idle_and_uniform(ports: list[Port], reduce_s: float, now_s: float) -> bool:
        """Whether every member has the same link, nothing is booked on it from ``now_s`` on,
        and time only moves forward (so no chunk can start before its link frees)."""
        if len(ports) < 2 or len({id(port) for port in ports}) < len(ports):
            return False
        first = ports[0]
        if not (first.latency_s >= 0.0 and reduce_s >= 0.0):
            return False
        return all(
            port.latency_s == first.latency_s
            and port.bandwidth_bps == first.bandwidth_bps
            and port.up.free_at_s <= now_s
            and port.down.free_at_s <= now_s
            for port in ports
        )


def _ring_timeline(
    p: int, duration_s: float, latency_s: float, reduce_s: float, now_s: float
) -> tuple[list[tuple[float, float]], float]:
    """One member's chunk intervals on idle links and when its result is complete.

    Mirrors :func:`ring_by_chunk` over :meth:`Network.reserve` operation for
    operation: the start is ``max(now_s, ready or now_s)`` (:func:`earliest_fit`
    returns it at once: the link's last interval ended before ``ready``), the
    interval ``(start, start + duration)`` is kept only when non-empty
    (:meth:`Link.book`), the arrival is ``start + duration + latency`` (the max of two
    equal latencies is that latency) and the next ready time ``arrival + reduce``
    (``+ 0.0`` in the all-gather phase).
    """
    intervals: list[tuple[float, float]] = []
    ready_s = now_s
    for step in range(2 * (p - 1)):
        start_s = max(now_s, ready_s or now_s)
        end_s = start_s + duration_s
        if end_s > start_s:
            intervals.append((start_s, end_s))
        arrive_s = start_s + duration_s + latency_s
        ready_s = arrive_s + (reduce_s if step < p - 1 else 0.0)
    return intervals, ready_s


def ring_by_chunk(book: Book, names: list[str], chunk_bytes: float, reduce_s: float, now_s: float) -> float:
    """Book a ring all-reduce chunk by chunk: the exact path, for any link state or fault.

    Each member sends 2(p-1) chunks to its successor, in step order, once it has
    received (and, in the reduce-scatter phase, folded in) its predecessor's chunk.
    Returns when the last member has the result (before the sync cost).
    """
    p = len(names)
    ready = [now_s] * p  # when each member can send its next chunk
    for step in range(2 * (p - 1)):
        arrived = [0.0] * p
        for i in range(p):
            arrived[(i + 1) % p] = book(names[i], names[(i + 1) % p], chunk_bytes, ready[i]).arrive_s
        step_reduce_s = reduce_s if step < p - 1 else 0.0  # reduce-scatter phase
        ready = [t + step_reduce_s for t in arrived]
    return max(ready)


def ring_allreduce_time_s(p: int, nbytes: float, cfg: NetworkConfig, segments: int = 1) -> float:
    """Closed form of a ring all-reduce of ``nbytes`` over ``p`` members on idle, uniform links.

    ``2(p-1)L alpha + 2((p-1)/p) n beta + ((p-1)/p) n gamma + L S`` with ``L`` segments
    (``L = 1`` is the plain ring).
    """
    beta = 1.0 / (cfg.bandwidth_bps * cfg.efficiency)
    frac = (p - 1) / p
    return (
        2 * (p - 1) * segments * cfg.latency_s
        + 2 * frac * nbytes * beta
        + frac * nbytes * cfg.reduce_s_per_byte
        + segments * cfg.sync_s
    )
