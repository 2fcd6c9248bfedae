"""Links, point-to-point transfers and the ring all-reduce schedule.

Every entity (worker or server) has one full-duplex link to a switch: an
uplink and a downlink. A transfer from A to B occupies A's uplink and B's
downlink for ``bytes / bandwidth`` seconds and arrives ``latency_s`` after its
last byte left; on idle links that is the classic ``alpha + n*beta``. Transfers
are booked when they are requested, first come first served: each takes the
earliest time both its links are free for its whole duration. A later request
may use an idle gap left before an earlier booking (a transfer waiting for a
busy downlink does not hold the other link idle for everyone else), but it
never delays a transfer booked before it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fred.scenario import NetworkConfig


@dataclass
class Link:
    """One direction of a port: its booked busy intervals, and when the last one ends."""

    busy: list[tuple[float, float]] = field(default_factory=list)
    free_at_s: float = 0.0

    def forget_before(self, now_s: float) -> None:
        if self.busy and self.busy[0][1] <= now_s:
            self.busy = [(s, e) for s, e in self.busy if e > now_s]

    def book(self, start_s: float, end_s: float) -> None:
        if end_s > start_s:
            self.busy.append((start_s, end_s))
            self.free_at_s = max(self.free_at_s, end_s)


@dataclass
class Port:
    """One entity's connection to the switch."""

    latency_s: float
    bandwidth_bps: float
    up: Link = field(default_factory=Link)
    down: Link = field(default_factory=Link)


@dataclass
class Transfer:
    """A booked transfer: when its first byte leaves and when its last byte arrives."""

    start_s: float
    arrive_s: float


def earliest_fit(links: tuple[Link, Link], start_s: float, duration_s: float) -> float:
    """The first time >= ``start_s`` at which every link is free for ``duration_s``."""
    if all(start_s >= link.free_at_s for link in links):
        return start_s  # the common case: nothing booked after this point
    moved = True
    while moved:
        moved = False
        for link in links:
            for s, e in link.busy:
                if s < start_s + duration_s and e > start_s:
                    start_s, moved = e, True
    return start_s


@dataclass
class Network:
    """The star topology of a scenario: one port per entity, booked in request order."""

    config: NetworkConfig
    ports: dict[str, Port] = field(default_factory=dict)

    def add(self, entity: str, server: bool = False) -> None:
        link = self.config.server if (server and self.config.server is not None) else self.config
        self.ports[entity] = Port(link.latency_s, link.bandwidth_bps)

    def reserve(self, src: str, dst: str, nbytes: float, now_s: float, not_before_s: float | None = None) -> Transfer:
        """Book ``nbytes`` from ``src`` to ``dst`` at the first time both links are free.

        ``now_s`` is the simulation's clock; ``not_before_s`` a later earliest start
        (a collective booking its future steps).
        """
        up, down = self.ports[src], self.ports[dst]
        duration = nbytes / min(up.bandwidth_bps, down.bandwidth_bps)
        up.up.forget_before(now_s)
        down.down.forget_before(now_s)
        start = earliest_fit((up.up, down.down), max(now_s, not_before_s or now_s), duration)
        up.up.book(start, start + duration)
        down.down.book(start, start + duration)
        return Transfer(start, start + duration + max(up.latency_s, down.latency_s))


def ring_allreduce_time_s(p: int, nbytes: float, cfg: NetworkConfig, segments: int = 1) -> float:
    """Closed form of a ring all-reduce of ``nbytes`` over ``p`` members on idle, uniform links.

    ``2(p-1)L alpha + 2((p-1)/p) n beta + ((p-1)/p) n gamma + L S`` with ``L`` segments
    (``L = 1`` is the plain ring).
    """
    beta = 1.0 / cfg.bandwidth_bps
    frac = (p - 1) / p
    return (
        2 * (p - 1) * segments * cfg.latency_s
        + 2 * frac * nbytes * beta
        + frac * nbytes * cfg.reduce_s_per_byte
        + segments * cfg.sync_s
    )
