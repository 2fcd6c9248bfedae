"""Scenario -> simulation -> records: building a run, driving it, and summarising it."""

from __future__ import annotations

import contextlib
import functools
import gc
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jax
import numpy as np
import pandas as pd
import simpy
from pydantic import TypeAdapter

from fred._version import __version__
from fred.numerics import rng
from fred.numerics.data import BatchStream, Dataset, GlobalBatchStream, data_stream, load_dataset, loss_floor, shard
from fred.numerics.gradients import GradSum, Numerics
from fred.numerics.models import Model, Params, build_model, param_count
from fred.numerics.tape import ResumeMismatch, Tape, digest, document, resolved
from fred.runs.host import cpu_isa
from fred.runs.interrupt import StopRequest, between_steps
from fred.runs.memory import Fit, OutOfMemory, allocation_failed, check_fits, out_of_memory
from fred.runs.work import EvaluationBudget, check_evaluations
from fred.runs.records import METRIC_COLUMNS, Recorder, params_sha256
from fred.runs.staleness import staleness
from fred.scenario import model_workloads, registry, workloads
from fred.scenario.schema import MAX_CADENCE_EVENTS, ModelConfig, Scenario
from fred.simulation import buckets
from fred.simulation.compute import ComputeModel
from fred.simulation.engine import Contribution, GradientService, Simulation, Worker
from fred.simulation.network import Network

if TYPE_CHECKING:
    from fred.runs.checkpoint import Checkpointer, Saved

Progress = Callable[[float, int, float], None]
TRAFFIC_KINDS = ("send", "push", "fetch", "allreduce", "allgather")

# Python's cyclic collector runs every 700 net allocations and, every hundred of those, walks
# every tracked object: a large run's event loop allocates millions (SimPy events, records)
# and spent 40 % of its time there at 4,096 workers. Collections never change a result.
GC_THRESHOLD = (50_000, 20, 100)


@contextlib.contextmanager
def fewer_collections() -> Iterator[None]:
    """Run the cyclic garbage collector less often while the simulation steps; restore it after."""
    before = gc.get_threshold()
    gc.set_threshold(*(max(a, b) for a, b in zip(before, GC_THRESHOLD)))
    try:
        yield
    finally:
        gc.set_threshold(*before)


@dataclass
class Built:
    """Everything a run needs, before any simulated time passes."""

    scenario: Scenario
    sim: Simulation
    dataset: Dataset
    numerics: Numerics


def _buckets(scenario: Scenario, param_bytes: int, feature_shape: tuple[int, ...], outputs: int) -> tuple[buckets.Bucket, ...]:
    """The scenario's gradient buckets, in backward order (none without ``workload.bucket_bytes``),
    cut from the profile's layers, or else from the model's own (for the data's shape)."""
    workload = scenario.workload
    if workload.bucket_bytes is None:
        return ()
    if workload.profile is not None:
        return buckets.plan(workloads.load(workload.profile).layers, workload.bucket_bytes, param_bytes)
    own = model_workloads.model_workload(scenario.model, feature_shape, outputs)
    if own is None:  # pragma: no cover - validation refuses bucket_bytes for a python model without a profile
        raise ValueError("workload.bucket_bytes needs workload.profile: this model's layers are not known")
    return buckets.plan(own.layers, workload.bucket_bytes, param_bytes)


def build(scenario: Scenario) -> Built:
    """Load data, build the model and the simulated cluster of ``scenario``."""
    seed = scenario.seed
    dataset = load_dataset(scenario.data, data_stream(seed))
    outputs = dataset.num_classes if dataset.task == "classification" else 1
    model, numerics = _model_and_numerics(
        scenario.model.model_dump_json(), dataset.feature_shape, outputs, dataset.task, scenario.strategy.reduction,
        scenario.strategy.exact_tile,
    )
    init_params = model.init(rng.jax_key(seed, "model", "init"))
    workers = _workers(scenario, dataset)
    param_bytes = scenario.workload.resolved_param_bytes() or 4 * param_count(init_params)
    sim = Simulation(
        env=simpy.Environment(),
        workers=workers,
        network=Network(scenario.network, scenario.cluster.workers_per_device, scenario.cluster.devices_per_node),
        compute_model=ComputeModel(scenario),
        gradients=None if scenario.workload.timing_only else GradientService(numerics, dataset),
        init_params=init_params,
        param_bytes=param_bytes,
        seed=seed,
        faults=scenario.faults,
        buckets=_buckets(scenario, param_bytes, dataset.feature_shape, outputs),
    )
    return Built(scenario, sim, dataset, numerics)


@functools.lru_cache(maxsize=32)
def _model_and_numerics(
    model_json: str, feature_shape: tuple[int, ...], outputs: int, task: str, reduction: str, tile: int = 1
) -> tuple[Model, Numerics]:
    # Cached so that runs of the same model in one process share compiled functions.
    model = build_model(TypeAdapter(ModelConfig).validate_json(model_json), feature_shape, outputs)
    return model, Numerics(model, task, reduction, tile)  # type: ignore[arg-type]


def _workers(scenario: Scenario, dataset: Dataset) -> list[Worker]:
    n, data = scenario.cluster.workers, scenario.data
    tile = scenario.strategy.exact_tile if scenario.strategy.reduction == "exact" else 1
    if data.sharding == "iid":
        total = len(dataset.y_train)
        _check_fits(data.batch_size, n, total // n, f"{total} training examples "
                    f"(iid sharding cuts every step's {n} batches from all of them, {data.batch_size * n} rows)", total, tile)
        # One global permutation per epoch; worker i takes block i of every global batch,
        # so n workers of batch b see exactly what one worker of batch n*b sees.
        stream = GlobalBatchStream(len(dataset.y_train), n, data.batch_size, rng.stream(scenario.seed, "data", "batches"))
        return [Worker(i, lambda i=i: stream.next_for(i)) for i in range(n)]
    shards = shard(dataset.y_train, n, data, rng.stream(scenario.seed, "data", "shard"))
    smallest = min(range(n), key=lambda i: len(shards[i]))
    _check_fits(data.batch_size, n, len(shards[smallest]), f"worker {smallest}'s {data.sharding} shard of {len(shards[smallest])} examples",
                len(dataset.y_train), tile)
    streams = [BatchStream(s, data.batch_size, rng.stream(scenario.seed, "data", "batches", i)) for i, s in enumerate(shards)]
    return [Worker(i, streams[i].next) for i in range(n)]


def _check_fits(batch_size: int, workers: int, most: int, where: str, total: int, tile: int = 1) -> None:
    """Refuse a batch that ``where`` cannot fill, naming the field and what would fit (``most``
    rows a batch here, in whole tiles of ``tile`` rows; ``total`` training examples, what one
    worker would have)."""
    if batch_size <= most:
        return
    fixes = [_at_most(most, tile)] if most >= 1 else []
    if workers > 1 and batch_size <= total:  # fewer workers helps only if one worker's all would do
        fixes.append(f"use fewer than {workers} workers")
    if not fixes:
        fixes.append(f"{_at_most(total, tile)} and use fewer than {workers} workers" if workers > 1 and total >= 1
                     else "give a data set with more examples")
    raise ValueError(f"data.batch_size: {batch_size} rows a batch do not fit {where}: {', or '.join(fixes)}")


def _at_most(rows: int, tile: int) -> str:
    """The fix of a batch too large: at most ``rows``, in whole tiles of the exact reduction."""
    whole = rows // tile * tile
    if whole == rows:
        return f"set data.batch_size to at most {rows}"
    if whole:
        return f"set data.batch_size to at most {whole} (whole tiles of strategy.exact_tile {tile})"
    return f"set data.batch_size to at most {rows} with strategy.exact_tile: 1"


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
        return (f"RunResult({self.title!r}: {s.get('strategy')}, {s.get('workers')} workers, status={s.get('status')}, "
                f"updates={s.get('updates')}, sim_time_s={s.get('sim_time_s')}, final_eval_loss={s.get('final_eval_loss')}, "
                f"{self._tables_text()}{where})")

    def _tables_text(self) -> str:
        if not self.tables_read:
            return "tables: not read"
        return f"tables: metrics {len(self.metrics)} rows, updates {len(self.updates)}, events {len(self.events)}"

    def _need_tables(self, what: str) -> None:
        # Empty unread tables would answer as a run with no updates: "never reached", no staleness.
        if not self.tables_read:
            raise ValueError(f"{what} reads the run's tables, which load_run(..., tables=False) left unread; "
                             f"load it with fred.load_run({str(self.path)!r})")

    @property
    def title(self) -> str:
        """The name tables and plots give the run: its ``label``, else its scenario's name."""
        return self.label if self.label is not None else str(self.summary["name"])

    def staleness(self, by: str = "overall", bins: int = 20) -> pd.DataFrame:
        """Staleness distribution ``overall``, per ``worker`` (every worker a row) or over ``time`` (see fred.runs.staleness)."""
        self._need_tables("staleness")
        return staleness(self.updates, by, bins, int(self.summary["workers"]))  # type: ignore[arg-type]

    def time_to(self, loss: float) -> tuple[float, int] | None:
        """``(sim_time_s, updates)`` of the first evaluation at or below ``loss``; None if never."""
        self._need_tables("time_to")
        hit = self.metrics[self.metrics["eval_loss"] <= loss]
        if hit.empty:
            return None
        return float(hit["sim_time_s"].iloc[0]), int(hit["updates"].iloc[0])


class _Controller:
    """Evaluates on schedule, stops on the scenario's conditions, keeps the train loss."""

    def __init__(
        self,
        built: Built,
        params_fn: Callable[[], Params],
        recorder: Recorder,
        progress: Progress | None,
        tape: Tape,
        checkpointer: Checkpointer | None = None,
        resume: Saved | None = None,
    ):
        self.built, self.params_fn, self.recorder, self.progress = built, params_fn, recorder, progress
        self.tape, self.checkpointer, self.resume = tape, checkpointer, resume
        self.steps = 0  # env steps taken: where a checkpoint is, and where a resume stops fast-forwarding
        self._restoring = list(resume.metrics) if resume is not None else None  # evaluations to read back
        self.stop_cfg, self.eval_cfg = built.scenario.stop, built.scenario.eval
        self.timing_only = built.scenario.workload.timing_only
        self.stop_reason: str | None = None
        self.status = "completed"
        self._train: list[tuple[Any, int | None, int]] = []  # (loss array, row, examples): not the gradients, to free them
        self._train_sum: float = 0  # the oldest train losses since the last evaluation, added up in order (_fold)
        self._train_examples = 0
        self._last_eval: tuple[float, int] | None = None
        self.eval_wall_s = 0.0  # wall seconds this process spent evaluating (reported apart from training)
        self._last_loss = math.nan
        self._progress_every = max(1, (self.stop_cfg.max_updates or 20000) // 200)
        rows = len(built.dataset.y_eval)
        self.budget = None if self.timing_only else EvaluationBudget(rows, param_count(built.sim.init_params))

    def on_compute(self, grad: GradSum) -> None:
        if self.budget is not None:
            self.budget.trained_on(grad.count)
        self._train.append((*grad.loss_ref(), grad.count))
        if len(self._train) >= 2 * FOLD_LOSSES:
            self._fold()

    def _fold(self) -> None:
        """Add the oldest train losses to a running sum, in order (the same float as summing
        them all at the evaluation). A run evaluated rarely held one array per gradient until
        then (~2.6 KB each), and every checkpoint saved them all. Fast-forwarding, the values
        are not there: the losses are dropped and the sum comes from the checkpoint."""
        oldest, self._train = self._train[:FOLD_LOSSES], self._train[FOLD_LOSSES:]
        if self.resume is None:
            for loss, row, _ in oldest:
                self._train_sum += _loss_float(loss, row)
        self._train_examples += sum(count for _, _, count in oldest)

    def on_update(self, contributions: list[Contribution], version_applied: int) -> None:
        now = self.built.sim.now
        self.recorder.on_update(now, contributions, version_applied)
        count = self.recorder.update_count
        every = self.eval_cfg.every_updates
        if every is not None and count % every == 0:
            self.evaluate(now)
        elif self.progress is not None and count % self._progress_every == 0:
            self.progress(now, count, self._last_loss)  # keep the bar moving between evaluations
        if self.stop_reason is None and self.stop_cfg.max_updates is not None and count >= self.stop_cfg.max_updates:
            self.stop_reason = "max_updates"

    def evaluate(self, at_s: float) -> None:
        count = self.recorder.update_count
        if self._last_eval == (at_s, count):
            return
        self._last_eval = (at_s, count)
        loss, accuracy, train_loss = self._restored(at_s, count) if self._restoring is not None else self._measure()
        if self.budget is not None and self.budget.evaluated_once():  # evaluating far more than training: ends here
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
            params = jax.block_until_ready(resolved(self.params_fn()))  # training still computing is not evaluation's
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
        if not self._restoring:
            raise ResumeMismatch(f"an evaluation at {at_s} s that the checkpoint does not have")
        row = self._restoring.pop(0)
        if (row[0], row[1]) != (at_s, count):
            raise ResumeMismatch(f"evaluation at {at_s} s after {count} updates; the checkpoint's was at {row[0]} s, {row[1]}")
        if not self.timing_only:
            self.params_fn()  # a gossip average is recorded computation: make the same calls, fast-forwarded
        return row[2], row[3], row[4]

    def after_step(self, stopping: bool = False) -> None:
        """Leave fast-forward at the checkpoint's step; save a checkpoint when one is due, or
        when the run is ``stopping`` (asked to by a signal), so that its resume loses nothing."""
        self.steps += 1
        if self.resume is not None and self.steps == self.resume.steps:
            if self._restoring:
                raise ResumeMismatch(f"{len(self._restoring)} evaluations of the checkpoint were not reached")
            self.tape.fill(self.resume.values)
            self._train_sum, self._train_examples = self.resume.train
            self.resume, self._restoring = None, None
        if self.checkpointer is not None and self.resume is None and (stopping or self.checkpointer.due()):
            rows = [list(map(float, row)) for row in zip(*(self.recorder.metrics[c] for c in METRIC_COLUMNS))]
            self.checkpointer.save(self.steps, self.tape, rows, (self._train_sum, self._train_examples))

    def drive(self, interrupt: StopRequest) -> float:
        """Step the simulation until a stop condition holds; returns the end time. A Ctrl-C
        (``interrupt``, the run's :func:`between_steps` request) is taken between steps."""
        max_s = self.stop_cfg.max_sim_time_s if self.stop_cfg.max_sim_time_s is not None else math.inf
        every_s = self.eval_cfg.every_s
        evals = 1
        next_eval_s = eval_time_s(every_s, evals) if every_s is not None else math.inf
        self.evaluate(0.0)
        interrupt.check()  # pressed while the first evaluation compiled
        with fewer_collections():
            return self._steps(max_s, every_s, next_eval_s, evals, interrupt)

    def _steps(self, max_s: float, every_s: float | None, next_eval_s: float, evals: int, interrupt: StopRequest) -> float:
        env, sim = self.built.sim.env, self.built.sim
        step, peek = env.step, env.peek
        plain = self.checkpointer is None  # with no checkpoint to keep (nor a resume), a step is only counted after it
        bound_s = min(next_eval_s, max_s)  # the next evaluation or the time limit: an event past it is acted on
        while self.stop_reason is None:
            upcoming = peek()
            # Most steps have nothing to act on before them: no signal, no failure, no evaluation or
            # time limit before the next event. Every check below would pass, and is skipped (the
            # attribute reads of this line are the loop's whole cost per step then).
            if not (upcoming <= bound_s and upcoming != math.inf and sim.failure is None and interrupt.signum is None
                    and not interrupt.forced):
                interrupt.check()
                if sim.failure is not None:  # an evaluation's failure comes at its time, ahead of the clock
                    self.status, self.stop_reason = "failed", "failed"
                    return max(env.now, self._last_eval[0]) if self._last_eval is not None else env.now
                if upcoming == math.inf:  # nothing will happen again: the stop can never be reached, not even max_sim_time_s
                    self.status, self.stop_reason = "stalled", "no_events"
                    return env.now
                # An evaluation at t sees every update applied at t, as the end's evaluation does:
                # it waits until the events at t are done.
                while next_eval_s < upcoming and next_eval_s <= max_s and self.stop_reason is None and sim.failure is None:
                    interrupt.check()  # up to 100,000 evaluations between two steps: a stop is not kept waiting
                    if evals > MAX_CADENCE_EVENTS:  # a long wait the scenario did not show (validation bounds the rest)
                        sim.fail(f"eval.every_s is {every_s} s: {evals - 1:,} evaluations by {next_eval_s:.6g} s, the most "
                                 "a run makes; give a larger eval.every_s, or eval.every_updates")
                        break
                    self.evaluate(next_eval_s)
                    evals += 1
                    next_eval_s = eval_time_s(every_s, evals)  # type: ignore[arg-type]
                bound_s = min(next_eval_s, max_s)
                if sim.failure is not None:
                    continue
                if self.stop_reason is not None:  # that evaluation stopped the run: it ends there, not before
                    return max(env.now, self._last_eval[0])  # type: ignore[index]
                if upcoming > max_s:
                    self.stop_reason = "max_sim_time_s"
                    return max_s
            step()
            if plain and self.resume is None and interrupt.signum is None and not interrupt.forced:
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
        if sim.failure is not None:  # the step that reached the stop also failed: a failed run, as its events say
            self.status, self.stop_reason = "failed", "failed"
        return env.now


def eval_time_s(every_s: float, k: int) -> float:
    """The k-th evaluation time: k times ``every_s`` as written (0.05 -> 0.15 at k = 3, not the
    0.15000000000000002 that adding 0.05 up, or 3 * 0.05, gives), so that times do not drift
    and the last one falls on a stop time that is a multiple of ``every_s``."""
    return float(Decimal(repr(every_s)) * k)


FOLD_LOSSES = 512  # train losses held as arrays before the oldest are added up (_Controller._fold)


def _loss_float(loss: Any, row: int | None) -> float:
    # np.asarray first: float() of a jax scalar takes ~6 us, of its numpy view <1 us (the same value).
    return float(np.asarray(loss)) if row is None else float(np.asarray(loss)[row])


def execute(
    scenario: Scenario,
    progress: Progress | None = None,
    checkpointer: Checkpointer | None = None,
    resume: Saved | None = None,
) -> RunResult:
    """Run ``scenario`` in this process and return its records (writes nothing).

    With ``checkpointer`` it saves checkpoints as it goes; with ``resume`` (a checkpoint
    of this scenario) it fast-forwards to it first (:mod:`fred.runs.checkpoint`).
    """
    wall_start = time.perf_counter()
    # Ctrl-C is taken at safe points from the start, not only while stepping: one pressed while
    # the data loaded or the first programs compiled landed in a JAX callback, where Python
    # prints and drops it, and the run went on to its end (4 presses in 14, early in a run).
    with jax.default_device(numerics_device()), between_steps() as interrupt:
        return _execute(scenario, progress, checkpointer, resume, wall_start, interrupt)


def numerics_device() -> jax.Device:
    """Where a run's numbers are computed: always JAX's CPU backend.

    A GPU computes the same steps with other roundings (and TF32 matrix products by
    default), so a run's bits would depend on the machine it ran on; on CPU they do not.
    Other backends are for ``fred replay`` and ``fred calibrate``, which say which they use.
    """
    return jax.devices("cpu")[0]


def _execute(
    scenario: Scenario, progress: Progress | None, checkpointer: Checkpointer | None, resume: Saved | None, wall_start: float,
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
    with Tape(resume.recorded if resume is not None else None) as tape:  # every jitted computation, for fred replay
        params_fn = registry.get(scenario.strategy.name).start(built.sim, scenario.strategy)
        built.sim.faults.start()
        controller = _Controller(built, params_fn, recorder, progress, tape, checkpointer, resume)
        built.sim.update_hooks.append(controller.on_update)
        built.sim.compute_hooks.append(controller.on_compute)
        try:
            end_s = controller.drive(interrupt)
            controller.evaluate(end_s)
            final = {} if scenario.workload.timing_only else params_fn()
            recorded = document(tape, tape.codes(final))
            params = jax.tree.map(np.asarray, resolved(final))
        except Exception as err:  # noqa: BLE001 - as above
            if not allocation_failed(err):
                raise
            return _ran_out_of_memory(scenario, built, controller, err, fit, time.perf_counter() - wall_start)
    tables = recorder.tables(end_s)
    wall_s = time.perf_counter() - wall_start + (resume.wall_s if resume is not None else 0.0)  # a resumed run: all of it
    summary = _summary(scenario, built, controller, tables, params, end_s, wall_s)
    summary["tape_sha256"] = digest(*recorded)
    return RunResult(scenario, summary, tables["metrics"], tables["updates"], tables["events"], params, tape=recorded)


def _ran_out_of_memory(
    scenario: Scenario, built: Built, controller: _Controller, err: BaseException, fit: Fit | None, wall_s: float,
) -> RunResult:
    """The run as far as it went when an allocation failed, recorded as failed (``stop_reason:
    out_of_memory``, the ``failure`` saying what failed, the estimate and the limit), without
    final parameters or tape: making them would allocate again."""
    end_s = built.sim.now
    updates = controller.recorder.update_count
    built.sim.failure = None  # this is what ended the run, whatever failed before in the same step
    built.sim.fail(out_of_memory(err, fit, f"at {end_s:.6g} s of simulated time, after {updates:,} updates"))
    controller.status, controller.stop_reason = "failed", "out_of_memory"
    tables = controller.recorder.tables(end_s)
    summary = _summary(scenario, built, controller, tables, {}, end_s, wall_s)
    summary["tape_sha256"] = None
    return RunResult(scenario, summary, tables["metrics"], tables["updates"], tables["events"], {})


def _summary(
    scenario: Scenario,
    built: Built,
    controller: _Controller,
    tables: dict[str, pd.DataFrame],
    params: Params,
    end_s: float,
    wall_s: float,
) -> dict[str, Any]:
    metrics, events, updates = tables["metrics"], tables["events"], tables["updates"]
    kinds = _EventKinds(events)
    last = metrics.iloc[-1] if len(metrics) else {"eval_loss": math.nan, "eval_accuracy": math.nan}  # none: out of memory at the first
    return {
        "name": scenario.name,
        "status": controller.status,
        "stop_reason": controller.stop_reason,
        "failure": built.sim.failure,
        "strategy": scenario.strategy.name,
        **_provider(scenario.strategy.name),
        "workers": scenario.cluster.workers,
        "seed": scenario.seed,
        "sim_time_s": float(end_s),
        "updates": int(controller.recorder.update_count),
        "gradients": len(updates),
        "final_eval_loss": _num(last["eval_loss"]),
        "final_eval_accuracy": _num(last["eval_accuracy"]),
        **_data_loss_floor(scenario),
        "bytes_sent": kinds.bytes_of(*TRAFFIC_KINDS),
        "param_bytes": int(built.sim.param_bytes),
        **_push_fetch_counters(kinds),
        **_fault_counters(kinds, built.sim.report),
        **({"bytes_between_sites": kinds.bytes_of("wide_area")} if scenario.network.sites is not None else {}),
        "mean_staleness": _num(updates["staleness"].mean()) if len(updates) else None,
        "max_staleness": int(updates["staleness"].max()) if len(updates) else None,
        **built.sim.report,
        "params_sha256": None if scenario.workload.timing_only or not params else params_sha256(params),
        "scenario_sha256": scenario.digest(),
        "wall_time_s": round(wall_s, 3),
        "eval_wall_s": round(controller.eval_wall_s, 3),
        "fred_version": __version__,
        "backend": numerics_device().platform,
        "jax_version": jax.__version__,
        "cpu_isa": cpu_isa(),
    }


# The summary's keys measured in real time: the only ones that differ between two runs of one scenario.
WALL_CLOCK_KEYS = ("wall_time_s", "eval_wall_s")


def _data_loss_floor(scenario: Scenario) -> dict[str, float]:
    """``data_loss_floor``, the least expected eval loss any model can reach, where the data tells
    it (``synthetic_tokens``: fred.numerics.data.loss_floor) and the loss is the cross-entropy it
    is the floor of; no key otherwise."""
    if getattr(scenario.model, "loss", None) not in (None, "cross_entropy"):
        return {}
    floor = loss_floor(scenario.data, scenario.seed)
    return {} if floor is None else {"data_loss_floor": floor}


def _provider(name: str) -> dict[str, str | None]:
    """The distribution and version that provided the strategy: a plug-in's, or fred's own."""
    distribution, version = registry.provider(registry.get(name), __version__)
    return {"strategy_distribution": distribution, "strategy_version": version}


def _push_fetch_counters(kinds: _EventKinds) -> dict[str, float | int]:
    """Parameter-server traffic, counted from the event table so the two always agree."""
    counts = kinds.counts
    return {
        "pushes_sent": counts.get("push", 0),
        "pushes_dropped": counts.get("push_dropped", 0),
        "fetches_sent": counts.get("fetch", 0),
        "fetches_dropped": counts.get("fetch_dropped", 0),
        "bytes_pushed": kinds.bytes_of("push"),
        "bytes_fetched": kinds.bytes_of("fetch"),
    }


def _fault_counters(kinds: _EventKinds, report: dict[str, Any]) -> dict[str, float | int]:
    """What the injected faults did, counted from the event table (and the server's lost updates)."""
    counts = kinds.counts
    return {
        "worker_crashes": counts.get("crash", 0),
        "workers_excluded": counts.get("excluded", 0),
        "worker_rejoins": counts.get("rejoin", 0),
        "messages_lost": counts.get("lost", 0),
        "bytes_lost": kinds.bytes_of("lost"),
        "links_degraded": counts.get("link_degraded", 0),
        "server_crashes": counts.get("server_crash", 0),
        "updates_lost": int(report.get("updates_lost", 0)),
    }


class _EventKinds:
    """The event table's kinds, factorized once: counts per kind, and bytes summed over kinds.

    pandas selections (a boolean index, isin, value_counts) cost ~0.3 ms each, most of a short
    run's summary; on the codes these are numpy operations. The bytes are summed by numpy over
    the selected rows in table order, as pandas' ``sum`` did (without bottleneck, whose sum is
    another order): the same float, whatever is installed.
    """

    def __init__(self, events: pd.DataFrame):
        codes, names = pd.factorize(events["kind"])
        self._codes, self._bytes = codes, events["bytes"].to_numpy()
        self._code = {str(name): i for i, name in enumerate(names)}
        self.counts = {name: int(n) for name, n in zip(self._code, np.bincount(codes, minlength=len(names)))}

    def bytes_of(self, *kinds: str) -> float:
        """Bytes of the events of ``kinds`` (the sum of none is 0.0: no selection to make)."""
        codes = [self._code[k] for k in kinds if k in self._code]
        if not codes:
            return 0.0
        return float(np.nansum(self._bytes[np.isin(self._codes, codes)]))  # NaN skipped, as pandas did


def _num(value: Any) -> float | None:
    value = float(value)
    return value if math.isfinite(value) else None
