"""A parameter server: the global parameters, their version, and the links to reach them."""

from __future__ import annotations

from typing import Any, Callable, Generator

import simpy

from fred.numerics.models import Params
from fred.simulation.engine import Simulation, Worker


class ParameterServer:
    """Holds the global parameters and their version (the number of updates applied).

    Applying an update costs no simulated time and happens between two events, so
    it is atomic without a lock, as the papers' single-lock server is. With
    ``instant`` (the logical clock) transfers are recorded with their bytes but
    take no time.

    A crash (``faults.server_crash``) takes it down until its restart; pushes and
    fetches wait for it, and one in flight when it went down is lost and resent. The
    strategy owning it decides what a checkpoint holds (``on_checkpoint``) and what a
    crash loses (``on_crash``, returning the number of updates lost). By default a
    checkpoint keeps the parameters and a crash rolls back to them (the version counts on); a
    strategy with more server state (optimizer moments, a rule's statistics) replaces both.
    """

    def __init__(self, sim: Simulation, params: Params, name: str = "server", instant: bool = False):
        self.sim, self.name, self.instant = sim, name, instant
        self.params, self.version = params, 0
        self.down = False
        self.crashes = 0
        self._up: simpy.Event | None = None
        self._saved = (params, 0)
        self.on_checkpoint: Callable[[], None] = self._keep
        self.on_crash: Callable[[], int] = self._roll_back
        sim.network.add(name, server=True)
        sim.faults.server = self

    def push(self, worker: Worker, nbytes: float | None = None) -> Generator[simpy.Event, Any, None]:
        """Send a gradient from ``worker`` to the server (``param_bytes`` by default)."""
        yield from self._transfer(worker.name, self.name, self._bytes(nbytes), "push")

    def fetch(
        self, worker: Worker, nbytes: float | None = None, reply: Callable[[], None] | None = None
    ) -> Generator[simpy.Event, Any, tuple[Params, int]]:
        """Send the current parameters to ``worker``; returns them and their version as sent.

        ``reply``, if given, is called as each attempt is sent, with the parameters: it takes
        what else the reply carries (B-FASGD's statistic) as of that moment, not its arrival.
        """
        sent: list[tuple[Params, int]] = []  # what the last (successful) attempt carried

        def capture() -> None:
            sent.append((self.params, self.version))
            if reply is not None:
                reply()

        yield from self._transfer(self.name, worker.name, self._bytes(nbytes), "fetch", capture)
        return sent[-1]

    def until_up(self, entity: str) -> Generator[simpy.Event, Any, None]:
        """Wait while the server is down (a crash), recorded as ``entity``'s ``wait``."""
        while self.down:
            yield from self.sim.wait_for(entity, self._up)  # type: ignore[arg-type]

    def dropped(self, worker: Worker, kind: str) -> None:
        """Record a push or fetch the worker chose not to make (``push_dropped``, ``fetch_dropped``)."""
        self.sim.trace(f"{kind}_dropped", worker.name, self.sim.now, self.sim.now, 0.0, self.name)

    def checkpoint(self) -> None:
        self.on_checkpoint()

    def _keep(self) -> None:
        self._saved = (self.params, self.version)

    def _roll_back(self) -> int:
        # The version is not rolled back: it counts updates applied, lost ones included,
        # so that staleness stays a count of updates (docs/failures.md).
        self.params = self._saved[0]
        return self.version - self._saved[1]

    def crash(self) -> int:
        """Go down; the strategy rolls back to its checkpoint. Returns the updates lost."""
        self.down, self.crashes, self._up = True, self.crashes + 1, self.sim.env.event()
        return self.on_crash()

    def restart(self) -> None:
        self.down = False
        self._up.succeed()  # type: ignore[union-attr]

    def _transfer(
        self, src: str, dst: str, nbytes: float, kind: str, attempt: Callable[[], None] = lambda: None
    ) -> Generator[simpy.Event, Any, None]:
        if self.instant:  # logical clock: the bytes count, the time does not
            self.sim.trace(kind, src, self.sim.now, self.sim.now, nbytes, dst)
            attempt()
            return
        while True:
            if self.down:
                yield from self.until_up(src if src != self.name else dst)
            crashes = self.crashes
            attempt()
            # A transfer the server went down during (or before it began) is gone: recorded
            # once, as lost, and sent again once the server is back.
            yield from self.sim.send(
                src, dst, nbytes, kind=kind, delivered=lambda crashes=crashes: self.crashes == crashes
            )
            if self.crashes == crashes:
                return

    def _bytes(self, nbytes: float | None) -> float:
        return self.sim.param_bytes if nbytes is None else nbytes
