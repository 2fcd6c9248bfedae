"""Links, point-to-point transfers and the ring all-reduce schedule.

Every entity (worker or server) has one full-duplex link to a switch: an
uplink and a downlink. A transfer from A to B occupies A's uplink and B's
downlink for ``bytes / bandwidth`` seconds, in FIFO order of request
(reservation: a transfer starts when both are free), and arrives ``latency_s``
after its last byte left. On idle links that is the classic ``alpha + n*beta``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fred.scenario import NetworkConfig


@dataclass
class Port:
    """One entity's connection to the switch."""

    latency_s: float
    bandwidth_bps: float
    up_free_at_s: float = 0.0
    down_free_at_s: float = 0.0


@dataclass
class Transfer:
    """A reserved transfer: when its first byte leaves and when its last byte arrives."""

    start_s: float
    arrive_s: float


@dataclass
class Network:
    """The star topology of a scenario: one port per entity, reserved in request order."""

    config: NetworkConfig
    ports: dict[str, Port] = field(default_factory=dict)

    def add(self, entity: str, server: bool = False) -> None:
        link = self.config.server if (server and self.config.server is not None) else self.config
        self.ports[entity] = Port(link.latency_s, link.bandwidth_bps)

    def reserve(self, src: str, dst: str, nbytes: float, now_s: float) -> Transfer:
        """Book ``nbytes`` from ``src`` to ``dst`` on the first instant both links are free."""
        up, down = self.ports[src], self.ports[dst]
        start = max(now_s, up.up_free_at_s, down.down_free_at_s)
        busy_until = start + nbytes / min(up.bandwidth_bps, down.bandwidth_bps)
        up.up_free_at_s = down.down_free_at_s = busy_until
        return Transfer(start, busy_until + max(up.latency_s, down.latency_s))


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
