"""Checkpoints of a running simulation, and resuming from one, bit for bit.

A SimPy run lives in Python generators, which cannot be saved. What can be saved is
everything the run's future depends on that is not cheap to recompute: the numerics
tape so far and the value of every array still alive (the tape knows them: the
replicas, the server's parameters, messages in flight, losses not yet reported),
plus the evaluations made so far. Resuming re-runs the simulation from the start in
*fast-forward*: the engine's events are cheap and happen again exactly as before,
while every recorded computation is checked against the tape and answered with a
:class:`~fred.numerics.tape.Placeholder` instead of being computed, and evaluations are read
back. At the checkpoint's step the placeholders still alive are filled with the saved
values, and the run goes on computing. The result is the uninterrupted run's, bit for
bit: same tape, same tables, same parameters.

If the strategy reads a number outside a recorded computation during fast-forward
(B-FASGD's gates read a statistic), the fast-forward cannot answer it; the resume then
says so and runs the scenario from the start, which gives the same bits more slowly.

The tape is kept in segments: each checkpoint writes only the calls made since the one
before (``tape-<first call>-<end>.npz``), then ``checkpoint.npz``, which names the
segments it needs, so that a checkpoint costs the same late in a long run as early.

A checkpoint also carries the wall seconds the run has taken and spent evaluating, earlier
processes included, so that a resumed run reports the whole run's.
"""

from __future__ import annotations

import gc
import json
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from fred.numerics import tape as tapes
from fred.runs.interrupt import between_steps


def checkpoint_dir(run_dir: str | Path) -> Path:
    """Where the checkpoints of the run that will be written to ``run_dir`` are kept."""
    run_dir = Path(run_dir)
    return run_dir.parent / f"{run_dir.name}.checkpoint"


def is_checkpoint_file(name: str) -> bool:
    """Whether ``name`` is one fred writes in a checkpoint folder: the resolved scenario, the
    checkpoint, the tape's segments, or one of these being written (``.<name>.<pid>``)."""
    if name.startswith("."):
        name = name[1:].rsplit(".", 1)[0]
    return name in ("scenario.yaml", "checkpoint.npz") or re.fullmatch(r"tape-\d+-\d+\.npz", name) is not None


def check_folder(path: Path, inputs: tuple[str | Path, ...] = (), resuming: bool = False) -> None:
    """Refuse a checkpoint folder where keeping checkpoints would write through a link or
    delete what fred did not write (the folder is deleted when its run is written).

    The folder may be missing, or hold what fred writes there (an earlier checkpoint of the
    same run directory, which a new run replaces); a link, a file, or a directory with other
    files is refused, as is a folder holding ``inputs`` (the scenario file the run reads).
    """
    other = "" if resuming else ", or choose another --out"
    if path.is_symlink():
        raise ValueError(
            f"{path} is a link (to {os.readlink(path)}); checkpoints are kept in a directory of fred's own "
            "there and fred never writes or deletes through a link: remove the link{other}"
        )
    if not path.exists():
        return
    if not path.is_dir():
        raise ValueError(f"{path} is a file; checkpoints go in a directory of that name: move it{other}")
    for given in map(Path, inputs):
        if path.resolve() in given.resolve().parents:
            raise ValueError(
                f"{given} is in {path}, the checkpoint folder this run writes and deletes when it ends: "
                "copy the scenario elsewhere and run that, or choose another --out"
            )
    others = sorted(
        p.name for p in path.iterdir() if not is_checkpoint_file(p.name) or p.is_symlink() or not p.is_file()
    )
    if others:
        shown = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
        raise ValueError(
            f"{path} holds files fred did not write ({shown}); it is the checkpoint folder of the run "
            "directory beside it, which fred deletes when the run is written: move them out{other}"
        )


def remove(path: Path) -> None:
    """Delete a checkpoint folder that :func:`check_folder` accepted: the files fred wrote in
    it, then the folder if nothing else is there (never through a link, never other files)."""
    if path.is_symlink() or not path.is_dir():
        return
    for file in path.iterdir():
        if is_checkpoint_file(file.name) and file.is_file() and not file.is_symlink():
            file.unlink(missing_ok=True)
    try:
        path.rmdir()
    except OSError:  # something else was put there meanwhile: it stays, and so does the folder
        pass


@dataclass
class Saved:
    """A checkpoint as read back: the env step it was taken after, and what to restore."""

    steps: int
    recorded: tapes.Recorded
    values: dict[int, np.ndarray]
    metrics: list[list[float]]
    scenario_sha256: str
    train: tuple[float, int] = (
        0,
        0,
    )  # the train losses added up since the last evaluation, and their examples
    wall_s: float = 0.0  # wall-clock seconds the run had taken when it was saved (earlier processes included)
    eval_wall_s: float = 0.0  # of those, the seconds spent evaluating


def collect() -> None:
    """``gc.collect()``, with a Ctrl-C that comes during it acted on after it.

    Raised where it lands, inside JAX's collection callback, Python reports it ("Exception
    ignored in ...") and drops it: the run went on to its end.
    """
    with between_steps():
        gc.collect()


@dataclass
class Checkpointer:
    """Saves a checkpoint every ``every_s`` seconds of wall time (``clock`` is replaceable for tests)."""

    path: Path
    every_s: float
    scenario_sha256: str
    clock: Callable[[], float] = time.monotonic
    saved: int = 0
    wall_before_s: float = 0.0  # wall seconds the run took in earlier processes (a resumed run's checkpoint)
    eval_wall_s: float = 0.0  # wall seconds the run has spent evaluating, earlier processes included
    _next_s: float = field(default=0.0, init=False)
    _born_s: float = field(default=0.0, init=False)
    # The segments this checkpointer wrote, and how much of the tape they hold. A resumed
    # run's checkpointer starts afresh: its first segment holds everything up to then.
    _segments: list[str] = field(default_factory=list, init=False)
    _mark: tapes.Mark = field(default=tapes.Mark(), init=False)

    def __post_init__(self) -> None:
        self._next_s = self.clock() + self.every_s
        self._born_s = time.perf_counter()

    @property
    def run_dir(self) -> Path:
        """The run directory these checkpoints are for (:func:`checkpoint_dir`'s argument)."""
        return self.path.with_name(self.path.name.removesuffix(".checkpoint"))

    def due(self) -> bool:
        """Whether ``every_s`` has passed since the last checkpoint (or the start)."""
        return self.clock() >= self._next_s

    def save(
        self, steps: int, tape: tapes.Tape, metrics: list[list[float]], train: tuple[float, int] = (0, 0)
    ) -> None:
        """Write the tape's new segment, then the checkpoint file naming every segment, each
        atomically: a kill at any point leaves the previous checkpoint whole."""
        collect()  # so that the arrays still alive are exactly the ones the run can still read
        self.path.mkdir(parents=True, exist_ok=True)
        now = tapes.mark(tape)
        segments = self._segments
        if now.calls > self._mark.calls or not segments:
            name = f"tape-{self._mark.calls}-{now.calls}.npz"
            self._replace(name, lambda f: tapes.write(f, *tapes.document(tape, (0, []), self._mark)))
            segments = [*segments, name]
        table, values = tapes.pack(tape.live_values(), "values")  # thousands of scalars: a few entries
        state = {
            "steps": steps,
            "metrics": metrics,
            "scenario_sha256": self.scenario_sha256,
            "segments": segments,
            "values": table,
            "train": list(train),
            "wall_s": self.wall_before_s + time.perf_counter() - self._born_s,
            "eval_wall_s": self.eval_wall_s,
        }
        self._replace("checkpoint.npz", lambda f: _write_state(f, state, values))
        self._segments, self._mark = segments, now
        self._forget_others(segments)
        self.saved += 1
        self._next_s = self.clock() + self.every_s

    def _replace(self, name: str, write: Callable[[Path], None]) -> None:
        tmp = self.path / f".{name}.{os.getpid()}"
        write(tmp)
        os.replace(tmp, self.path / name)

    def _forget_others(self, segments: list[str]) -> None:
        """Segments no checkpoint names any more: an interrupted save's, or an earlier run's."""
        keep = set(segments)
        for file in self.path.glob("tape-*.npz"):
            if file.name not in keep:
                file.unlink(missing_ok=True)


def _write_state(path: Path, state: dict, values: dict[str, np.ndarray]) -> None:
    with open(path, "wb") as f:
        np.savez_compressed(f, state=tapes.json_array(state), **values)


def load(path: Path) -> Saved:
    """Read ``path/checkpoint.npz`` written by :meth:`Checkpointer.save`, and its tape's segments."""
    file = path / "checkpoint.npz"
    if not file.is_file():
        raise ValueError(f"{path} holds no checkpoint yet (the run stopped before its first checkpoint.npz)")
    with np.load(file, allow_pickle=False) as data:
        extra = {name: data[name] for name in data.files}
    state = json.loads(bytes(extra.pop("state")).decode())
    if "tape" in extra:  # the single-file layout: the whole tape is here, not in segments
        doc = json.loads(bytes(extra.pop("tape")).decode())
        recorded = tapes.parse(doc, {n: extra.pop(n) for n in [n for n in extra if n.startswith("blob")]})
    else:
        missing = [name for name in state["segments"] if not (path / name).is_file()]
        if missing:
            raise ValueError(f"{path}: the checkpoint's tape segment {missing[0]} is missing")
        recorded = tapes.joined(
            [tapes.parse(*tapes.read(path / name)[:2]) for name in state["segments"]], (0, ())
        )
    if "values" in state:
        values = tapes.unpack(state["values"], extra, "values")
    else:  # the single-file layout: one entry per value
        values = {int(name[1:]): value for name, value in extra.items()}
    train = tuple(state.get("train", (0, 0)))  # zero where the file holds none (nor the wall times)
    wall_s, eval_wall_s = float(state.get("wall_s", 0.0)), float(state.get("eval_wall_s", 0.0))
    return Saved(
        state["steps"],
        recorded,
        values,
        state["metrics"],
        state["scenario_sha256"],
        train,
        wall_s,
        eval_wall_s,
    )  # type: ignore[arg-type]
