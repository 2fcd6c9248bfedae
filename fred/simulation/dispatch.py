"""The logical clock: the original FRED library's dispatcher.

There is no compute or transfer time. At each step one worker that is ready
(not blocked waiting for the server) is chosen uniformly at random and reports;
steps are one time unit apart, the first at 0, so ``sim_time_s`` is the step count less one. This
reproduces the FASGD paper's iteration-based curves inside the same engine.
"""

from __future__ import annotations

from typing import Any, Generator

import simpy

from fred.numerics import rng
from fred.simulation.engine import Process, Simulation, Worker


class LogicalClock:
    """Grants turns to ready workers, one per step, chosen by the ``dispatcher`` stream."""

    def __init__(self, sim: Simulation):
        self.sim = sim
        self.ready: list[tuple[int, simpy.Event]] = []
        self._stream = rng.stream(sim.seed, "dispatcher")
        self._wakeup: simpy.Event | None = None
        sim.process(self._dispatch())

    def turn(self, worker: Worker) -> Generator[simpy.Event, Any, None]:
        """Wait until the dispatcher picks ``worker``."""
        granted = self.sim.env.event()
        self.ready.append((worker.index, granted))
        if self._wakeup is not None and not self._wakeup.triggered:
            self._wakeup.succeed()
        yield granted

    def _dispatch(self) -> Process:
        while True:
            if not self.ready:
                self._wakeup = self.sim.env.event()
                yield self._wakeup
                continue
            self.ready.sort(key=lambda item: item[0])  # the choice must not depend on arrival order
            _, granted = self.ready.pop(int(self._stream.integers(len(self.ready))))
            granted.succeed()
            yield self.sim.env.timeout(1.0)
