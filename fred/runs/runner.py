"""Running a scenario in this process: build it, drive it to its stop, summarise it.

:func:`execute` is the run; :class:`RunResult` what it returns. The parts are modules of
their own: :mod:`fred.runs.build` (data, model and simulated cluster), :mod:`fred.runs.controller`
(stepping, evaluating, checkpoints, fast-forward) and :mod:`fred.runs.summary`. The names
other modules know this one by (``build``, ``numerics_device``, ``WALL_CLOCK_KEYS``) stay here.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jax
import numpy as np
import pandas as pd

from fred.numerics.models import Params
from fred.numerics.tape import Tape, digest, document, resolved
from fred.runs.build import Built, build_run, numerics_device
from fred.runs.controller import Controller, FastForward, Progress
from fred.runs.interrupt import StopRequest, between_steps
from fred.runs.memory import Fit, OutOfMemory, allocation_failed, check_fits, out_of_memory
from fred.runs.records import Recorder
from fred.runs.staleness import staleness
from fred.runs.summary import WALL_CLOCK_KEYS, summarize
from fred.runs.work import check_evaluations
from fred.scenario import registry
from fred.scenario.schema import Scenario

if TYPE_CHECKING:
    from fred.runs.checkpoint import Checkpointer, Saved

__all__ = [
    "Built",
    "Progress",
    "RanOutOfMemory",
    "RunResult",
    "WALL_CLOCK_KEYS",
    "build",
    "execute",
    "numerics_device",
]

build = build_run  # the name the run calls it by: tests and benchmarks put a stand-in here
_Controller = Controller  # the name the benchmarks time the simulation loop by (Controller.drive)


class RanOutOfMemory(OutOfMemory):
    """A checkpointed run ran out of memory: it keeps its checkpoint for ``fred run --resume``
    (where more memory is free) rather than being recorded as failed; the message says where."""


@dataclass
class RunResult:
    """A finished run: its summary, its tables and its final parameters."""

    scenario: Scenario
    summary: dict[str, Any]
    metrics: pd.DataFrame
    updates: pd.DataFrame
    events: pd.DataFrame
    params: Params
    path: Path | None = None
    tape: tuple[dict[str, Any], dict[str, np.ndarray]] | None = None  # what replay needs (tape.npz)
    label: str | None = None  # how comparison tables and plots name it; the scenario's name if None
    tables_read: bool = True  # False: load_run(..., tables=False) left the tables empty, unread

    def __repr__(self) -> str:
        # The dataclass's would print every table and every parameter array: 19 kB for a small MLP.
        s = self.summary
        where = f", path={str(self.path)!r}" if self.path is not None else ""
        return (
            f"RunResult({self.title!r}: {s.get('strategy')}, {s.get('workers')} workers, "
            f"status={s.get('status')}, "
            f"updates={s.get('updates')}, sim_time_s={s.get('sim_time_s')}, "
            f"final_eval_loss={s.get('final_eval_loss')}, "
            f"{self._tables_text()}{where})"
        )

    def _tables_text(self) -> str:
        if not self.tables_read:
            return "tables: not read"
        return (
            f"tables: metrics {len(self.metrics)} rows, updates {len(self.updates)}, events "
            f"{len(self.events)}"
        )

    def _need_tables(self, what: str) -> None:
        # Empty unread tables would answer as a run with no updates: "never reached", no staleness.
        if not self.tables_read:
            raise ValueError(
                f"{what} reads the run's tables, which load_run(..., tables=False) left unread; "
                f"load it with fred.load_run({str(self.path)!r})"
            )

    @property
    def title(self) -> str:
        """The name tables and plots give the run: its ``label``, else its scenario's name."""
        return self.label if self.label is not None else str(self.summary["name"])

    def staleness(self, by: str = "overall", bins: int = 20) -> pd.DataFrame:
        """Staleness distribution ``overall``, per ``worker`` (every worker a row) or over ``time`` (see
        fred.runs.staleness)."""
        self._need_tables("staleness")
        return staleness(self.updates, by, bins, int(self.summary["workers"]))  # type: ignore[arg-type]

    def time_to(self, loss: float) -> tuple[float, int] | None:
        """``(sim_time_s, updates)`` of the first evaluation at or below ``loss``; None if never."""
        self._need_tables("time_to")
        hit = self.metrics[self.metrics["eval_loss"] <= loss]
        if hit.empty:
            return None
        return float(hit["sim_time_s"].iloc[0]), int(hit["updates"].iloc[0])


def execute(
    scenario: Scenario,
    progress: Progress | None = None,
    checkpointer: Checkpointer | None = None,
    resume: Saved | None = None,
) -> RunResult:
    """Run ``scenario`` in this process and return its records (writes nothing).

    With ``checkpointer`` it saves checkpoints as it goes; with ``resume`` (a checkpoint
    of this scenario) it fast-forwards to it first (:mod:`fred.runs.checkpoint`). A run that
    runs out of memory is returned as failed (``stop_reason: out_of_memory``); with a
    ``checkpointer`` it raises :class:`RanOutOfMemory` instead, its checkpoint kept.
    """
    wall_start = time.perf_counter()
    # Ctrl-C is taken at safe points from the start, not only while stepping: one pressed while
    # the data load or the first programs compile would land in a JAX callback, where Python
    # prints and drops it, and the run would go on to its end.
    with jax.default_device(numerics_device()), between_steps() as interrupt:
        return _execute(scenario, progress, checkpointer, resume, wall_start, interrupt)


def _execute(
    scenario: Scenario,
    progress: Progress | None,
    checkpointer: Checkpointer | None,
    resume: Saved | None,
    wall_start: float,
    interrupt: StopRequest,
) -> RunResult:
    fit = check_fits(scenario)  # before loading data or compiling: what does not fit is refused at no cost
    check_evaluations(scenario)  # and evaluations that would cost far more than the training
    try:
        built = build(scenario)
    except Exception as err:  # noqa: BLE001 - numpy's MemoryError, XLA's runtime error: an allocation failed
        if not allocation_failed(err):
            raise
        raise OutOfMemory(out_of_memory(err, fit, "while loading the data and building the model")) from None
    interrupt.check()
    recorder = Recorder()
    built.sim.tracers.append(recorder.on_event)
    forward = FastForward(resume) if resume is not None else None
    with (
        forward.tape() if forward is not None else Tape() as tape
    ):  # every jitted computation, for fred replay
        params_fn = registry.get(scenario.strategy.name).start(built.sim, scenario.strategy)
        built.sim.faults.start()
        controller = Controller(built, params_fn, recorder, progress, tape, checkpointer, forward)
        built.sim.update_hooks.append(controller.on_update)
        built.sim.compute_hooks.append(controller.on_compute)
        try:
            end_s = controller.drive(interrupt)
            controller.evaluate(end_s)
            controller.whole = False  # the final parameters and tape, past the last step: never checkpointed
            final = {} if scenario.workload.timing_only else params_fn()
            recorded = document(tape, tape.codes(final))
            params = jax.tree.map(np.asarray, resolved(final))
        except Exception as err:  # noqa: BLE001 - as above
            if not allocation_failed(err):
                raise
            return _ran_out_of_memory(scenario, built, controller, err, fit, time.perf_counter() - wall_start)
    tables = recorder.tables(end_s)
    wall_s = (
        time.perf_counter() - wall_start + (resume.wall_s if resume is not None else 0.0)
    )  # a resumed run: all of it
    summary = summarize(scenario, built, controller, tables, params, end_s, wall_s)
    summary["tape_sha256"] = digest(*recorded)
    return RunResult(
        scenario, summary, tables["metrics"], tables["updates"], tables["events"], params, tape=recorded
    )


def _ran_out_of_memory(
    scenario: Scenario,
    built: Built,
    controller: Controller,
    err: BaseException,
    fit: Fit | None,
    wall_s: float,
) -> RunResult:
    """The run as far as it went when an allocation failed, recorded as failed (``stop_reason:
    out_of_memory``, the ``failure`` saying what failed, the estimate and the limit), without
    final parameters or tape: making them would allocate again. A checkpointed run is not
    recorded: it keeps a checkpoint (:meth:`Controller.keep_checkpoint`) and raises
    :class:`RanOutOfMemory`, whose message says how to resume it."""
    end_s = built.sim.now
    updates = controller.recorder.update_count
    said = out_of_memory(err, fit, f"at {end_s:.6g} s of simulated time, after {updates:,} updates")
    if controller.keep_checkpoint():
        assert controller.checkpointer is not None
        raise RanOutOfMemory(
            f"{said}; the run is not recorded, its checkpoint is kept: "
            f"fred run --resume {controller.checkpointer.run_dir} finishes it"
        ) from None
    built.sim.failure = None  # this is what ended the run, whatever failed before in the same step
    built.sim.fail(said)
    controller.status, controller.stop_reason = "failed", "out_of_memory"
    tables = controller.recorder.tables(end_s)
    summary = summarize(scenario, built, controller, tables, {}, end_s, wall_s)
    summary["tape_sha256"] = None
    return RunResult(scenario, summary, tables["metrics"], tables["updates"], tables["events"], {})
