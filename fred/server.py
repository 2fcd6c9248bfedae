"""A parameter server: the global parameters, their version, and the links to reach them."""

from __future__ import annotations

from typing import Any, Generator

import simpy

from fred.engine import Simulation, Worker
from fred.models import Params


class ParameterServer:
    """Holds the global parameters and their version (the number of updates applied).

    Applying an update costs no simulated time and happens between two events, so
    it is atomic without a lock, as the papers' single-lock server is. With
    ``instant`` (the logical clock) transfers are recorded with their bytes but
    take no time.
    """

    def __init__(self, sim: Simulation, params: Params, name: str = "server", instant: bool = False):
        self.sim, self.name, self.instant = sim, name, instant
        self.params, self.version = params, 0
        sim.network.add(name, server=True)

    def push(self, worker: Worker, nbytes: float | None = None) -> Generator[simpy.Event, Any, None]:
        """Send a gradient from ``worker`` to the server (``param_bytes`` by default)."""
        yield from self._transfer(worker.name, self.name, self._bytes(nbytes), "push")

    def fetch(self, worker: Worker, nbytes: float | None = None) -> Generator[simpy.Event, Any, tuple[Params, int]]:
        """Send the current parameters to ``worker``; returns them and their version as sent."""
        params, version = self.params, self.version
        yield from self._transfer(self.name, worker.name, self._bytes(nbytes), "fetch")
        return params, version

    def dropped(self, worker: Worker, kind: str) -> None:
        """Record a push or fetch the worker chose not to make (``push_dropped``, ``fetch_dropped``)."""
        self.sim.trace(f"{kind}_dropped", worker.name, self.sim.now, self.sim.now, 0.0, self.name)

    def _transfer(self, src: str, dst: str, nbytes: float, kind: str) -> Generator[simpy.Event, Any, None]:
        if self.instant:  # logical clock: the bytes count, the time does not
            self.sim.trace(kind, src, self.sim.now, self.sim.now, nbytes, dst)
            return
        yield from self.sim.send(src, dst, nbytes, kind=kind)

    def _bytes(self, nbytes: float | None) -> float:
        return self.sim.param_bytes if nbytes is None else nbytes
