"""``fred replay``: re-execute a run's numerics from its tape, without the simulator, and check them.

The run directory's ``tape.npz`` (:mod:`fred.numerics.tape`) lists every jitted call of the
run in order, with the batch rows of every gradient. Replay rebuilds the data set and
the model from ``scenario.yaml``, runs the calls that lead to the final parameters on
the chosen JAX backend, and compares the result with ``params.npz``: bit for bit on the
backend that made the run; across backends, every step is compared with the same step on
the run's backend from the same inputs, within a tolerance. It also times every
gradient call, next to the simulated compute time the run assumed for it.
"""

from __future__ import annotations

import time
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import jax
import numpy as np
import pandas as pd

from fred._version import __version__
from fred.numerics import tape
from fred.numerics.models import Params
from fred.numerics.tape import Call, Recorded
from fred.runs.api import load_run, rerun_hint
from fred.runs.build import build_numerics
from fred.runs.host import cpu_isa
from fred.scenario import registry
from fred.scenario.schema import Scenario
from fred.tools.calibrate import device_for


class ReplayError(ValueError):
    """The run directory cannot be replayed as it is (missing or altered files)."""


@dataclass
class ReplayReport:
    """What replay did and found."""

    backend: str
    device: str
    recorded_calls: int
    replayed_calls: int
    wall_s: float
    gradients: pd.DataFrame  # call, shards, rows, real_s, simulated_s, compiled (first of its shape)
    leaves: pd.DataFrame  # leaf, equal, max_abs_diff, max_rel_diff
    check: str
    passed: bool
    steps: pd.DataFrame | None = None  # --check close: per function, each step against the run's backend;
    # worst_call is the tape index of its largest relative difference
    notes: list[str] = field(default_factory=list)


def replay(
    run_dir: str | Path,
    backend: str | None = None,
    check: str = "bitwise",
    rtol: float = 1e-5,
    atol: float = 1e-6,
    matmul_precision: str | None = "highest",
    progress: Callable[[int, int], None] | None = None,
) -> ReplayReport:
    """Replay ``run_dir`` on ``backend`` (default: the one that made the run) and check it.

    ``bitwise``: the final parameters must be the run's bits. ``close``: every step, given
    the same inputs, must agree with the same step on the run's own backend within
    ``atol + rtol * max|reference|`` per array; the final parameters' drift is reported too
    (small per-step differences grow over thousands of steps, so it is not the test).
    ``matmul_precision`` goes to ``jax.default_matmul_precision``: ``highest`` (the default)
    makes a GPU multiply float32 matrices in float32, as the CPU run did; ``default`` lets it
    use TF32, which is faster but moves a step's gradients by ~20 % on digits (docs/howto/replay.md).
    ``progress`` is told ``(calls replayed, calls to replay)`` as the replay goes.
    """
    run_dir = Path(run_dir)
    run = load_run(run_dir, tables=False)  # replay needs none of them: a long run's events are hundreds of MB
    recorded_sha = run.summary.get("scenario_sha256")
    if (
        recorded_sha is not None and run.scenario.digest() != recorded_sha
    ):  # another model would replay "FAILED"
        raise ReplayError(
            f"{run_dir / 'scenario.yaml'} does not match scenario_sha256 in {run_dir / 'summary.json'}: "
            "the run directory was changed after the run"
        )
    if run.scenario.workload.timing_only:
        raise ReplayError(
            f"{run_dir} is a timing-only run (workload.timing_only): it computed no numbers to replay"
        )
    recorded = _read_tape(run_dir, run.summary)
    keep = needed(recorded.calls, recorded.final)
    _check_computed(run_dir, keep, run.summary.get("updates", 0))
    made_on = run.summary.get("backend", "cpu")  # runs before fred recorded it all ran on CPU
    backend = backend or made_on
    device = device_for(backend)
    shadow = device_for(made_on) if check == "close" else None
    context = {"gradients": _gradients(run.scenario)}
    start = time.perf_counter()
    with jax.default_device(device), jax.default_matmul_precision(matmul_precision):
        final, gradients, replayed, steps = _execute(recorded, keep, context, shadow, rtol, atol, progress)
    wall_s = time.perf_counter() - start
    leaves = compare(final, run.params)
    if check == "bitwise":
        passed = bool(leaves["equal"].all())
    else:
        passed = steps is not None and bool((steps["outside_tolerance"] == 0).all())
    report = ReplayReport(
        backend, str(device), len(recorded.calls), replayed, wall_s, gradients, leaves, check, passed, steps
    )
    report.notes = _notes(run.summary, made_on, backend, check)
    return report


def _notes(summary: dict[str, Any], made_on: str, backend: str, check: str) -> list[str]:
    notes = []
    if summary.get("jax_version") not in (None, jax.__version__):
        notes.append(
            f"the run was made with JAX {summary['jax_version']} and this is JAX {jax.__version__}: "
            "XLA may compile some functions differently, so bits are promised only for the same version"
        )
    if summary.get("cpu_isa") not in (None, cpu_isa()) and backend == "cpu":
        notes.append(
            f"the run was made on a {summary['cpu_isa']} CPU and this is {cpu_isa()}: XLA compiles for the "
            "CPU "
            "it runs on, so bits are promised only for the same instruction set (use --check close)"
        )
    recorded = (summary.get("strategy_distribution"), summary.get("strategy_version"))
    installed = _installed_provider(summary.get("strategy"))
    if recorded[0] is not None and installed is not None and installed != recorded:
        notes.append(
            f"the run's strategy came from {' '.join(filter(None, recorded))} and this is "
            f"{' '.join(filter(None, installed))}: its recorded functions may compute differently"
        )
    if check == "bitwise" and backend != made_on:
        notes.append(
            f"the run was computed on {made_on}; a bitwise check on {backend} is not expected to pass (use "
            "--check close)"
        )
    return notes


def _installed_provider(name: Any) -> tuple[str, str | None] | None:
    """Who provides the strategy ``name`` here (None: nobody, or no name)."""
    try:
        return registry.provider(registry.get(name), __version__) if isinstance(name, str) else None
    except ValueError:
        return None


def _read_tape(run_dir: Path, summary: dict[str, Any]) -> Recorded:
    path = run_dir / "tape.npz"
    if not path.is_file():
        raise ReplayError(
            f"{run_dir} has no tape.npz, so it cannot be replayed; run the scenario again with this fred to "
            "record one"
        )
    try:
        doc, large, _ = tape.read(path)
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile, zlib.error) as err:
        raise ReplayError(
            f"{path} cannot be read ({type(err).__name__}: {err}); the run directory is damaged: "
            f"{rerun_hint(run_dir)}"
        ) from None
    if tape.digest(doc, large) != summary.get("tape_sha256"):
        raise ReplayError(
            f"{path} does not match tape_sha256 in {run_dir / 'summary.json'}: the run directory was changed "
            "after the run; "
            f"{rerun_hint(run_dir)}"
        )
    return tape.parse(doc, large)


def _check_computed(run_dir: Path, keep: list[bool], updates: int) -> None:
    # Otherwise the "check" compares params.npz with its own copy on the tape, and passes.
    if updates and not any(keep):
        raise ReplayError(
            f"{run_dir} applied {updates} updates, but no recorded call computes its final parameters: its "
            "strategy "
            "computed them outside fred.numerics.tape.op functions, so there is nothing to replay; declare "
            "the strategy's "
            "jitted functions with fred.numerics.tape.op (docs/howto/new-strategy.md)"
        )


def _gradients(scenario: Scenario) -> Callable[..., Any]:
    """The run's gradient function, rebuilt from its scenario (the same data, model and reduction)."""
    dataset, _, numerics = build_numerics(scenario)
    return lambda params, rows, shards, starts=None: numerics.gradients(params, dataset, rows, shards, starts)


def needed(calls: list[Call], final: tuple[int, Sequence[Any]]) -> list[bool]:
    """Which calls the final parameters depend on (evaluations and dead ends are skipped)."""
    wanted = set(tape.refs(final[1]))
    keep = [False] * len(calls)
    for i in range(len(calls) - 1, -1, -1):
        if any(r in wanted for r in tape.refs(calls[i].out_codes)):
            keep[i] = True
            wanted.update(tape.refs(calls[i].arg_codes))
    return keep


def _execute(
    recorded: Recorded,
    keep: list[bool],
    context: dict[str, Callable[..., Any]],
    shadow: jax.Device | None,
    rtol: float,
    atol: float,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[Params, pd.DataFrame, int, pd.DataFrame | None]:
    calls, treedefs = recorded.calls, recorded.treedefs
    total, done = sum(keep), 0
    every = max(-(-total // 100), 1)  # at most a hundred reports (and the last), whatever the length
    last_use = _last_uses(calls, keep, recorded.final)
    values: dict[int, Any] = {}
    steps = _Steps(shadow, rtol, atol) if shadow is not None else None

    def build(treedef: int, codes: Sequence[Any]) -> Any:
        leaves = [_value(c[0], values, recorded.constants) if tape.is_ref(c) else c for c in codes]
        return jax.tree.unflatten(treedefs[treedef], leaves)

    timings, shapes = [], set()
    for i, call in enumerate(calls):
        if not keep[i]:
            continue
        fn = _function(call, context)
        args = build(call.args, call.arg_codes)
        began = time.perf_counter()
        result = fn(*args)
        if call.name == "gradients":
            jax.block_until_ready(result)
            shape = (len(args[1]), args[2])
            simulated = recorded.compute_s.get(i, [])
            real_s = time.perf_counter() - began
            timings.append(
                (
                    i,
                    args[2],
                    len(args[1]),
                    real_s,
                    float(np.mean(simulated)) if simulated else np.nan,
                    shape not in shapes,
                )
            )
            shapes.add(shape)
        if jax.tree.structure(result) != treedefs[call.out]:
            raise ReplayError(
                f"call {i} ({call.name}) returns {jax.tree.structure(result)}, but the run recorded "
                f"{treedefs[call.out]}: the run was made by a fred whose numerics differ from this one; "
                "run its scenario again with this fred to replay it"
            )
        if steps is not None:
            steps.check(i, call.name, fn, args, result)
        for code, value in zip(call.out_codes, jax.tree.leaves(result)):
            if tape.is_ref(code):
                values[code[0]] = value
        for r in tape.refs(call.arg_codes):
            if last_use.get(r) == i:
                values.pop(r, None)  # free what no later call reads
        done += 1
        if progress is not None and (done % every == 0 or done == total):
            progress(done, total)
    final = build(*recorded.final)
    columns = ["call", "shards", "rows", "real_s", "simulated_s", "compiled"]
    return (
        final,
        pd.DataFrame(timings, columns=columns),
        sum(keep),
        steps.table() if steps is not None else None,
    )


@dataclass
class _StepStats:
    """One function's calls compared so far."""

    calls: int = 0
    max_abs_diff: float = 0.0
    max_rel_diff: float = 0.0
    outside_tolerance: int = 0
    worst_call: int = -1  # the tape index of the largest relative difference


class _Steps:
    """Each replayed call run again on the reference device with the same inputs, compared.

    The inputs are the replay's own, so a difference is that one step's and does not
    carry the differences of the steps before it.
    """

    def __init__(self, device: jax.Device, rtol: float, atol: float):
        self.device, self.rtol, self.atol = device, rtol, atol
        self.by_name: dict[str, _StepStats] = {}

    def check(self, index: int, name: str, fn: Callable[..., Any], args: Any, result: Any) -> None:
        moved = jax.tree.map(
            lambda v: jax.device_put(v, self.device) if isinstance(v, jax.Array) else v, args
        )
        with jax.default_device(self.device), jax.default_matmul_precision(None):
            reference = fn(*moved)
        stats = self.by_name.setdefault(name, _StepStats())
        stats.calls += 1
        outside = False
        for got, want in zip(jax.tree.leaves(result), jax.tree.leaves(reference)):
            got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
            if got.size == 0:
                continue
            finite = np.abs(want[np.isfinite(want)])
            diff, scale = float(np.max(_abs_diff(got, want))), float(finite.max(initial=0.0))
            rel = diff / scale if scale > 0 else (0.0 if diff == 0 else np.inf)
            stats.max_abs_diff = max(stats.max_abs_diff, diff)
            if rel > stats.max_rel_diff or stats.worst_call < 0:
                stats.max_rel_diff, stats.worst_call = rel, index
            outside = outside or not diff <= self.atol + self.rtol * scale
        stats.outside_tolerance += int(outside)

    def table(self) -> pd.DataFrame:
        rows = [{"function": name, **vars(stats)} for name, stats in sorted(self.by_name.items())]
        return pd.DataFrame(rows, columns=["function", *vars(_StepStats())])


def _value(index: int, values: dict[int, Any], constants: dict[int, np.ndarray]) -> Any:
    if index in values:
        return values[index]
    if index in constants:  # numpy, as recorded: jitted calls take it as they took the original
        return constants[index]
    raise ReplayError(f"the tape reads value {index} before any call made it; the tape is damaged")


def _last_uses(calls: list[Call], keep: list[bool], final: tuple[int, Sequence[Any]]) -> dict[int, int]:
    last: dict[int, int] = {}
    for i, call in enumerate(calls):
        if keep[i]:
            for r in tape.refs(call.arg_codes):
                last[r] = i
    for r in tape.refs(final[1]):
        last[r] = len(calls)  # never freed
    return last


def _function(call: Call, context: dict[str, Callable[..., Any]]) -> Callable[..., Any]:
    if call.name in context:
        return context[call.name]
    target = tape.resolve(call.name)
    return target(*call.key) if call.key is not None else target


def _abs_diff(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """|got - want| per element: 0 where they agree, NaN and infinities included (a diverged
    run's steps are the same NaN on both sides: inf - inf is NaN, which read as outside
    any tolerance), inf where only one side is NaN or infinite."""
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    with np.errstate(invalid="ignore"):
        diff = np.abs(got - want)
    return np.where(same, 0.0, np.where(np.isnan(diff), np.inf, diff))


def compare(replayed: Params, recorded: Params) -> pd.DataFrame:
    """Per leaf: bit-equal?, max |difference|, max relative difference."""
    rows = []
    for name in sorted(recorded):
        a, b = np.asarray(replayed[name]), np.asarray(recorded[name])
        wide = b.astype(np.float64)
        diff = _abs_diff(a.astype(np.float64), wide)
        with np.errstate(invalid="ignore"):
            rel = np.where(diff == 0, 0.0, diff / np.maximum(np.abs(wide), np.finfo(np.float32).tiny))
        equal = a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
        rows.append((name, equal, float(diff.max(initial=0.0)), float(rel.max(initial=0.0))))
    return pd.DataFrame(rows, columns=["leaf", "equal", "max_abs_diff", "max_rel_diff"])
