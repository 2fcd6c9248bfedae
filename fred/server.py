"""A parameter server: the global parameters, their version, and the links to reach them."""

from __future__ import annotations

from typing import Any, Generator

import simpy

from fred.engine import Simulation, Worker
from fred.models import Params


class ParameterServer:
    """Holds the global parameters and their version (the number of updates applied).

    Applying an update costs no simulated time and happens between two events, so
    it is atomic without a lock, as the papers' single-lock server is.
    """

    def __init__(self, sim: Simulation, params: Params, name: str = "server"):
        self.sim, self.name = sim, name
        self.params, self.version = params, 0
        sim.network.add(name, server=True)

    def push(self, worker: Worker, nbytes: float | None = None) -> Generator[simpy.Event, Any, None]:
        """Send a gradient from ``worker`` to the server (``param_bytes`` by default)."""
        yield from self.sim.send(worker.name, self.name, self._bytes(nbytes), kind="push")

    def fetch(self, worker: Worker, nbytes: float | None = None) -> Generator[simpy.Event, Any, tuple[Params, int]]:
        """Send the current parameters to ``worker``; returns them and their version as sent."""
        params, version = self.params, self.version
        yield from self.sim.send(self.name, worker.name, self._bytes(nbytes), kind="fetch")
        return params, version

    def _bytes(self, nbytes: float | None) -> float:
        return self.sim.param_bytes if nbytes is None else nbytes
