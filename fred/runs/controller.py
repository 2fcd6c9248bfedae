"""The controller: steps a built run's simulation to its stop, evaluating on schedule.

It evaluates every ``eval.every_updates`` updates or ``eval.every_s`` simulated seconds,
keeps the train loss between evaluations, stops on the scenario's conditions (or a
failure, a stall, a signal), and keeps checkpoints. A resumed run goes back to its
checkpoint through a :class:`FastForward`, the one place that knows what is restored.
"""

from __future__ import annotations

import contextlib
import gc
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import jax
import numpy as np

from fred.numerics.gradients import GradSum
from fred.numerics.models import Params, param_count
from fred.numerics.tape import ResumeMismatch, Tape, resolved
from fred.runs.build import Built
from fred.runs.interrupt import StopRequest
from fred.runs.memory import allocation_failed
from fred.runs.records import METRIC_COLUMNS, Recorder
from fred.runs.work import EvaluationBudget
from fred.scenario.schema import MAX_CADENCE_EVENTS
from fred.simulation.engine import Contribution

if TYPE_CHECKING:
    from fred.runs.checkpoint import Checkpointer, Saved

Progress = Callable[[float, int, float], None]  # (simulated seconds, updates, last eval loss)

# Python's cyclic collector runs every 700 net allocations and, every hundred of those, walks
# every tracked object: a large run's event loop allocates millions (SimPy events, records),
# and at 4,096 workers spends 40 % of its time there at Python's thresholds. Collections
# never change a result.
GC_THRESHOLD = (50_000, 20, 100)

FOLD_LOSSES = 512  # train losses held as arrays before the oldest are added up (Controller._fold)


@contextlib.contextmanager
def fewer_collections() -> Iterator[None]:
    """Run the cyclic garbage collector less often while the simulation steps; restore it after."""
    before = gc.get_threshold()
    gc.set_threshold(*(max(a, b) for a, b in zip(before, GC_THRESHOLD)))
    try:
        yield
    finally:
        gc.set_threshold(*before)


def eval_time_s(every_s: float, k: int) -> float:
    """The k-th evaluation time: k times ``every_s`` as written (0.05 -> 0.15 at k = 3, not the
    0.15000000000000002 that adding 0.05 up, or 3 * 0.05, gives), so that times do not drift
    and the last one falls on a stop time that is a multiple of ``every_s``."""
    return float(Decimal(repr(every_s)) * k)


class FastForward:
    """A resume's way back to its checkpoint, and what it restores there.

    The run's steps are taken again up to the checkpoint's, computing nothing (the tape
    answers every recorded call with a placeholder) and reading the evaluations made before
    it back; at the checkpoint's step the placeholders get their saved values, and the train
    losses added up and the evaluation time spent come back, so the run goes on computing
    where the checkpointed one was.
    """

    def __init__(self, saved: Saved) -> None:
        self.saved = saved
        self._rows = list(saved.metrics)  # the checkpointed run's evaluations not yet reached

    def tape(self) -> Tape:
        """A tape that fast-forwards through the checkpoint's calls."""
        return Tape(self.saved.recorded)

    def evaluation(self, at_s: float, count: int) -> tuple[float, float, float]:
        """The eval loss, accuracy and train loss the checkpointed run had at ``at_s``, after
        ``count`` updates."""
        if not self._rows:
            raise ResumeMismatch(f"an evaluation at {at_s} s that the checkpoint does not have")
        row = self._rows.pop(0)
        if (row[0], row[1]) != (at_s, count):
            raise ResumeMismatch(
                f"evaluation at {at_s} s after {count} updates; the checkpoint's was at {row[0]} s, {row[1]}"
            )
        return row[2], row[3], row[4]

    def reached(self, steps: int) -> bool:
        """Whether ``steps`` env steps are the checkpoint's: fast-forward ends after that step."""
        return steps == self.saved.steps

    def restore(self, tape: Tape) -> tuple[float, int]:
        """End the fast-forward: fill ``tape``'s placeholders with the saved values. Returns the
        train losses added up since the last evaluation, and their examples, as saved."""
        if self._rows:
            raise ResumeMismatch(f"{len(self._rows)} evaluations of the checkpoint were not reached")
        tape.fill(self.saved.values)
        return self.saved.train


@dataclass
class _Schedule:
    """The evaluations due every ``every_s`` simulated seconds, and the time limit ``max_s``.
    ``bound_s``, the earlier of the next evaluation and the limit, is the time past which the
    next event needs acting on before it is stepped."""

    every_s: float | None
    max_s: float
    evals: int = 1  # the number of the next evaluation on the schedule (the one at 0 s is the run's first)
    next_s: float = math.inf
    bound_s: float = math.inf

    def __post_init__(self) -> None:
        if self.every_s is not None:
            self.next_s = eval_time_s(self.every_s, self.evals)
        self.bound_s = min(self.next_s, self.max_s)


class Controller:
    """Evaluates on schedule, stops on the scenario's conditions, keeps the train loss and the
    checkpoints; with ``forward``, first goes back to a checkpoint (:class:`FastForward`)."""

    def __init__(
        self,
        built: Built,
        params_fn: Callable[[], Params],
        recorder: Recorder,
        progress: Progress | None,
        tape: Tape,
        checkpointer: Checkpointer | None = None,
        forward: FastForward | None = None,
    ):
        self.built, self.params_fn, self.recorder, self.progress = built, params_fn, recorder, progress
        self.tape, self.checkpointer, self.forward = tape, checkpointer, forward
        self.steps = 0  # env steps taken: where a checkpoint is, and where a fast-forward ends
        self.whole = True  # the run is as its last step left it: a checkpoint of it now is sound
        self._keeping = checkpointer is not None or forward is not None  # a step needs after_step
        self.stop_cfg, self.eval_cfg = built.scenario.stop, built.scenario.eval
        self.timing_only = built.scenario.workload.timing_only
        self.stop_reason: str | None = None
        self.status = "completed"
        self._train: list[
            tuple[Any, int | None, int]
        ] = []  # (loss array, row, examples): not the gradients, to free them
        self._train_sum: float = (
            0  # the oldest train losses since the last evaluation, added up in order (_fold)
        )
        self._train_examples = 0
        self._last_eval: tuple[float, int] | None = None
        self.eval_wall_s = 0.0  # wall seconds the run spent evaluating (reported apart from training)
        self._last_loss = math.nan
        self._progress_every = max(1, (self.stop_cfg.max_updates or 20000) // 200)
        rows = len(built.dataset.y_eval)
        self.budget = None if self.timing_only else EvaluationBudget(rows, param_count(built.sim.init_params))

    def on_compute(self, grad: GradSum) -> None:
        """A gradient computed: its examples count as trained on, its loss is kept for the train loss."""
        if self.budget is not None:
            self.budget.trained_on(grad.count)
        self._train.append((*grad.loss_ref(), grad.count))
        if len(self._train) >= 2 * FOLD_LOSSES:
            self._fold()

    def _fold(self) -> None:
        """Add the oldest train losses to a running sum, in order (the same float as summing
        them all at the evaluation), so that a run evaluated rarely holds at most a few
        thousand loss arrays, and its checkpoints save no more. Fast-forwarding, the values
        are not there: the losses are dropped and the sum comes from the checkpoint."""
        oldest, self._train = self._train[:FOLD_LOSSES], self._train[FOLD_LOSSES:]
        if self.forward is None:
            for loss, row, _ in oldest:
                self._train_sum += _loss_float(loss, row)
        self._train_examples += sum(count for _, _, count in oldest)

    def on_update(self, contributions: list[Contribution], version_applied: int) -> None:
        """An update applied: recorded; an evaluation when one is due, the progress shown, the
        ``max_updates`` stop."""
        now = self.built.sim.now
        self.recorder.on_update(now, contributions, version_applied)
        count = self.recorder.update_count
        every = self.eval_cfg.every_updates
        if every is not None and count % every == 0:
            self.evaluate(now)
        elif self.progress is not None and count % self._progress_every == 0:
            self.progress(now, count, self._last_loss)  # keep the bar moving between evaluations
        if (
            self.stop_reason is None
            and self.stop_cfg.max_updates is not None
            and count >= self.stop_cfg.max_updates
        ):
            self.stop_reason = "max_updates"

    def evaluate(self, at_s: float) -> None:
        """Evaluate at ``at_s`` (once for a time and update count), and stop on a non-finite
        loss or the target loss."""
        count = self.recorder.update_count
        if self._last_eval == (at_s, count):
            return
        self._last_eval = (at_s, count)
        loss, accuracy, train_loss = (
            self._restored(at_s, count) if self.forward is not None else self._measure()
        )
        if (
            self.budget is not None and self.budget.evaluated_once()
        ):  # evaluating far more than training: ends here
            self.built.sim.fail(self.budget.failure(self.built.scenario))
        self._train.clear()
        self._train_sum, self._train_examples = 0, 0
        self.recorder.on_metric(at_s, loss, accuracy, train_loss)
        self._last_loss = loss
        if self.progress is not None:
            self.progress(at_s, count, loss)
        if not math.isfinite(loss) and not self.timing_only:
            self.status, self.stop_reason = "diverged", self.stop_reason or "non_finite_loss"
        elif self.stop_cfg.target_eval_loss is not None and loss <= self.stop_cfg.target_eval_loss:
            self.stop_reason = self.stop_reason or "target_eval_loss"

    def _measure(self) -> tuple[float, float, float]:
        if self.timing_only:  # no parameters: the row keeps the schedule, with NaN for the numbers
            loss, accuracy = math.nan, math.nan
        else:
            ds = self.built.dataset
            params = jax.block_until_ready(
                resolved(self.params_fn())
            )  # training still computing is not evaluation's
            started = time.perf_counter()
            loss, accuracy = self.built.numerics.evaluate(params, ds.x_eval, ds.y_eval)
            self.eval_wall_s += time.perf_counter() - started
        examples = self._train_examples + sum(count for _, _, count in self._train)
        total = self._train_sum
        for train, row, _ in self._train:
            total += _loss_float(train, row)
        train_loss = float(total / examples) if examples else math.nan
        return loss, accuracy, train_loss

    def _restored(self, at_s: float, count: int) -> tuple[float, float, float]:
        """Fast-forward: the evaluation the checkpointed run made here, read back."""
        assert self.forward is not None
        numbers = self.forward.evaluation(at_s, count)
        if not self.timing_only:
            self.params_fn()  # a gossip average is recorded computation: make the same calls, fast-forwarded
        return numbers

    def after_step(self, stopping: bool = False) -> None:
        """Count the step; leave fast-forward at the checkpoint's step; save a checkpoint when
        one is due, or when the run is ``stopping`` (asked to by a signal), so that its resume
        loses nothing."""
        self.steps += 1
        if self.forward is not None and self.forward.reached(self.steps):
            self._train_sum, self._train_examples = self.forward.restore(self.tape)
            self.eval_wall_s += self.forward.saved.eval_wall_s  # its evaluations were read back, not made
            self.forward = None
            self._keeping = self.checkpointer is not None
        if self.checkpointer is not None and self.forward is None and (stopping or self.checkpointer.due()):
            self._save()

    def _save(self) -> None:
        assert self.checkpointer is not None
        rows = [list(map(float, row)) for row in zip(*(self.recorder.metrics[c] for c in METRIC_COLUMNS))]
        self.checkpointer.eval_wall_s = self.eval_wall_s
        self.checkpointer.save(self.steps, self.tape, rows, (self._train_sum, self._train_examples))

    def keep_checkpoint(self) -> bool:
        """After an allocation failed: save a checkpoint of the last step where the run is
        ``whole`` (the failure came between two steps), and say whether a checkpoint is there to
        resume from. A run cut inside a step (where a computation allocates) keeps the last
        checkpoint it saved, and one fast-forwarding keeps the checkpoint it resumes from; a
        save that fails to allocate too leaves the last one whole."""
        if self.checkpointer is None:
            return False
        if self.whole and self.forward is None and self.steps > 0:
            try:
                self._save()
            except Exception as err:  # noqa: BLE001 - numpy's MemoryError, XLA's runtime error
                if not allocation_failed(err):
                    raise
        return (self.checkpointer.path / "checkpoint.npz").is_file()

    def drive(self, interrupt: StopRequest) -> float:
        """Step the simulation until a stop condition holds; returns the end time. A Ctrl-C
        (``interrupt``, the run's :func:`between_steps` request) is taken between steps."""
        max_s = self.stop_cfg.max_sim_time_s if self.stop_cfg.max_sim_time_s is not None else math.inf
        due = _Schedule(self.eval_cfg.every_s, max_s)
        self.evaluate(0.0)
        interrupt.check()  # pressed while the first evaluation compiled
        with fewer_collections():
            return self._steps(due, interrupt)

    def _steps(self, due: _Schedule, interrupt: StopRequest) -> float:
        env, sim = self.built.sim.env, self.built.sim
        step, peek = env.step, env.peek
        bound_s = due.bound_s
        while self.stop_reason is None:
            upcoming = peek()
            # Most steps have nothing to act on before them: no signal, no failure, no evaluation or
            # time limit before the next event. Every check of _before would pass, and is skipped
            # (the attribute reads of this line are the loop's whole cost per step then).
            if not (
                upcoming <= bound_s
                and upcoming != math.inf
                and sim.failure is None
                and interrupt.signum is None
                and not interrupt.forced
            ):
                end_s = self._before(upcoming, due, interrupt)
                bound_s = due.bound_s
                if end_s is not None:
                    return end_s
                if sim.failure is not None:
                    continue
            try:
                step()
            except BaseException:
                self.whole = False  # the step was cut: the run as it is now is no checkpoint
                raise
            if not self._keeping and interrupt.signum is None and not interrupt.forced:
                self.steps += 1  # all that after_step would do
                continue
            # A first Ctrl-C or SIGTERM only asks, so the step is whole: it is counted and kept in a
            # last checkpoint before the run stops, and a resume loses nothing. A second one
            # interrupts at once and may have cut the step (SimPy holds the error in the process
            # it hit): no checkpoint of that one.
            if interrupt.forced:
                interrupt.check()
            self.after_step(stopping=interrupt.requested)
            interrupt.check()
        if (
            sim.failure is not None
        ):  # the step that reached the stop also failed: a failed run, as its events say
            self.status, self.stop_reason = "failed", "failed"
        return env.now

    def _before(self, upcoming: float, due: _Schedule, interrupt: StopRequest) -> float | None:
        """Act on what comes before the next event, at ``upcoming``: a stop asked for, a
        failure, nothing left to happen, the evaluations due, the time limit. Returns the end
        time where the run ends here; None where it steps on (or, failed by an evaluation,
        ends at the loop's next look)."""
        env, sim = self.built.sim.env, self.built.sim
        interrupt.check()
        if sim.failure is not None:  # an evaluation's failure comes at its time, ahead of the clock
            self.status, self.stop_reason = "failed", "failed"
            return max(env.now, self._last_eval[0]) if self._last_eval is not None else env.now
        if (
            upcoming == math.inf
        ):  # nothing will happen again: the stop can never be reached, not even max_sim_time_s
            self.status, self.stop_reason = "stalled", "no_events"
            return env.now
        self._evaluate_before(upcoming, due, interrupt)
        if sim.failure is not None:
            return None
        if self.stop_reason is not None:  # that evaluation stopped the run: it ends there, not before
            return max(env.now, self._last_eval[0])  # type: ignore[index]
        if upcoming > due.max_s:
            self.stop_reason = "max_sim_time_s"
            return due.max_s
        return None

    def _evaluate_before(self, upcoming: float, due: _Schedule, interrupt: StopRequest) -> None:
        """Make the scheduled evaluations that come before ``upcoming``. An evaluation at t sees
        every update applied at t, as the end's evaluation does: it waits until the events at t
        are done."""
        sim = self.built.sim
        while (
            due.next_s < upcoming
            and due.next_s <= due.max_s
            and self.stop_reason is None
            and sim.failure is None
        ):
            interrupt.check()  # up to 100,000 evaluations between two steps: a stop is not kept waiting
            if (
                due.evals > MAX_CADENCE_EVENTS
            ):  # a long wait the scenario did not show (validation bounds the rest)
                sim.fail(
                    f"eval.every_s is {due.every_s} s: {due.evals - 1:,} evaluations by {due.next_s:.6g} s, "
                    "the most "
                    "a run makes; give a larger eval.every_s, or eval.every_updates"
                )
                break
            self.evaluate(due.next_s)
            due.evals += 1
            due.next_s = eval_time_s(due.every_s, due.evals)  # type: ignore[arg-type]
        due.bound_s = min(due.next_s, due.max_s)


def _loss_float(loss: Any, row: int | None) -> float:
    # np.asarray first: float() of a jax scalar takes ~6 us, of its numpy view <1 us (the same value).
    return float(np.asarray(loss)) if row is None else float(np.asarray(loss)[row])
