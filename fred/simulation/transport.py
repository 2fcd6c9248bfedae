"""Point-to-point transfers of one run: booked first come, first served, or started as flows.

With ``network.sharing: fcfs`` a transfer is booked on its links when it is requested
(:meth:`Transport.book`, :meth:`Network.reserve <fred.simulation.network.Network.reserve>`);
with ``fair`` or ``rtt`` it is a flow that shares its links with the others in flight
(:meth:`Transport.post`, :mod:`fred.simulation.flows`). With message loss each lost attempt
is traced as ``lost`` and sent again a retransmit timeout after it started. Every transfer
that crosses a site's wide-area link is told as a ``wide_area`` event, which the summary's
``bytes_between_sites`` adds up; with ``network.sites.tcp_window_bytes`` such a flow goes at most its
window over its round trip (:class:`~fred.simulation.flows.TcpWindow`).
"""

from __future__ import annotations

from typing import Any, Callable

import simpy

from fred.simulation.faults import Faults
from fred.simulation.flows import Arrival, TcpWindow
from fred.simulation.network import Network, Transfer
from fred.simulation.rounds_as_flows import HeldLinks

Trace = Callable[..., None]  # Simulation.trace: (kind, entity, start_s, end_s, nbytes, peer)


class Transport:
    """The run's transfers on ``network``: as flows on ``flows`` (fairly shared links), or booked
    when ``flows`` is ``None``; ``lossy`` when the scenario's message loss can drop an attempt."""

    def __init__(
        self, env: simpy.Environment, network: Network, flows: HeldLinks | None, faults: Faults, trace: Trace
    ):
        self.env, self.network, self.flows, self.faults, self.trace = env, network, flows, faults, trace
        loss = faults.config.message_loss
        self.lossy = bool(loss and loss.probability > 0)
        sites = network.config.sites
        if flows is not None and sites is not None and sites.tcp_window_bytes is not None:
            flows.window = TcpWindow(  # network.wan is made as entities are added: read at each flow
                sites.tcp_window_bytes, lambda: [c for port in network.wan for c in (port.tx, port.rx)]
            )

    def book(self, src: str, dst: str, nbytes: float, not_before_s: float | None = None) -> Transfer:
        """Book a transfer; each lost attempt is traced and resent after the retransmit timeout."""
        transfer = self.network.reserve(src, dst, nbytes, self.env.now, not_before_s)
        if not self.lossy:
            return transfer
        while self.faults.lost(src, dst):
            self.trace("lost", src, transfer.start_s, transfer.arrive_s, nbytes, dst)
            retry_s = transfer.start_s + self._retransmit_timeout_s()
            transfer = self.network.reserve(src, dst, nbytes, self.env.now, retry_s)
        return transfer

    def post(
        self,
        src: str,
        dst: str,
        nbytes: float,
        hops: int,
        arrive: Arrival,
        sent: Callable[[], None] | None = None,
    ) -> None:
        """Start a flow now; ``sent`` is called when its last byte has left, ``arrive`` when it has
        arrived (an event is triggered). A lost attempt is traced when it would have arrived, and the
        flow is sent again a retransmit timeout after it started."""
        channels, latency_s = self.network.path(src, dst)
        latency_s *= hops
        if self.network.wan:
            self.across_sites(channels, nbytes)
        flows = self.flows
        assert flows is not None, "post needs fairly shared links (network.sharing: fair or rtt)"
        if self.lossy and self.faults.lost(src, dst):
            start_s = self.env.now
            lost = lambda: self.trace("lost", src, start_s, self.env.now, nbytes, dst)  # noqa: E731
            flows.start(channels, nbytes, latency_s, lost)
            again = self.env.timeout(self._retransmit_timeout_s())
            again.callbacks.append(lambda _: self.post(src, dst, nbytes, hops, arrive, sent))
            return
        flows.start(channels, nbytes, latency_s, arrive, sent)

    def _retransmit_timeout_s(self) -> float:
        return self.faults.config.message_loss.retransmit_timeout_s  # type: ignore[union-attr]

    def across_sites(self, channels: tuple[Any, ...], nbytes: float) -> None:
        """A ``wide_area`` event for each site's uplink a flow of ``nbytes`` crosses, as it starts."""
        for port in self.network.wan:
            times = channels.count(port.tx)
            if times:
                self.trace("wide_area", port.name, self.env.now, self.env.now, nbytes * times)
