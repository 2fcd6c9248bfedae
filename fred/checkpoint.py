"""Checkpoints of a running simulation, and resuming from one, bit for bit.

A SimPy run lives in Python generators, which cannot be saved. What can be saved is
everything the run's future depends on that is not cheap to recompute: the numerics
tape so far and the value of every array still alive (the tape knows them: the
replicas, the server's parameters, messages in flight, losses not yet reported),
plus the evaluations made so far. Resuming re-runs the simulation from the start in
*fast-forward*: the engine's events are cheap and happen again exactly as before,
while every recorded computation is checked against the tape and answered with a
:class:`~fred.tape.Placeholder` instead of being computed, and evaluations are read
back. At the checkpoint's step the placeholders still alive are filled with the saved
values, and the run goes on computing. The result is the uninterrupted run's, bit for
bit: same tape, same tables, same parameters.

If the strategy reads a number outside a recorded computation during fast-forward
(B-FASGD's gates read a statistic), the fast-forward cannot answer it; the resume then
says so and runs the scenario from the start, which gives the same bits more slowly.
"""

from __future__ import annotations

import gc
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from fred import tape as tapes


def checkpoint_dir(run_dir: str | Path) -> Path:
    """Where the checkpoints of the run that will be written to ``run_dir`` are kept."""
    run_dir = Path(run_dir)
    return run_dir.parent / f"{run_dir.name}.checkpoint"


@dataclass
class Saved:
    """A checkpoint as read back: the env step it was taken after, and what to restore."""

    steps: int
    recorded: tapes.Recorded
    values: dict[int, np.ndarray]
    metrics: list[list[float]]
    scenario_sha256: str


@dataclass
class Checkpointer:
    """Saves a checkpoint every ``every_s`` seconds of wall time (``clock`` is replaceable for tests)."""

    path: Path
    every_s: float
    scenario_sha256: str
    clock: Callable[[], float] = time.monotonic
    saved: int = 0
    _next_s: float = field(default=0.0, init=False)

    def __post_init__(self) -> None:
        self._next_s = self.clock() + self.every_s

    def due(self) -> bool:
        return self.clock() >= self._next_s

    def save(self, steps: int, tape: tapes.Tape, metrics: list[list[float]]) -> None:
        """Write the checkpoint file atomically (a kill mid-write leaves the previous one)."""
        gc.collect()  # so that the arrays still alive are exactly the ones the run can still read
        doc, blobs = tapes.document(tape, (0, []))
        state = {"steps": steps, "metrics": metrics, "scenario_sha256": self.scenario_sha256}
        values = {f"v{index}": value for index, value in tape.live_values().items()}
        self.path.mkdir(parents=True, exist_ok=True)
        tmp = self.path / f".checkpoint.npz.{os.getpid()}"
        tapes.write(tmp, doc, blobs, state=tapes.json_array(state), **values)
        os.replace(tmp, self.path / "checkpoint.npz")
        self.saved += 1
        self._next_s = self.clock() + self.every_s


def load(path: Path) -> Saved:
    """Read ``path/checkpoint.npz`` written by :meth:`Checkpointer.save`."""
    file = path / "checkpoint.npz"
    if not file.is_file():
        raise ValueError(f"{path} holds no checkpoint (checkpoint.npz); nothing to resume")
    doc, blobs, extra = tapes.read(file)
    state = json.loads(bytes(extra.pop("state")).decode())
    values = {int(name[1:]): value for name, value in extra.items()}
    recorded = tapes.parse(doc, blobs)
    return Saved(state["steps"], recorded, values, state["metrics"], state["scenario_sha256"])
