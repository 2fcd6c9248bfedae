"""``fred fit``: calibrate a scenario's named constants to measured seconds per iteration.

The measurements are a CSV with the columns ``scenario,measured_s``: a scenario file (relative
to the CSV's folder, or absolute) and the seconds one iteration took on the real cluster it
describes. The constants named by ``--fit`` (dotted scenario paths, as ``--set`` writes them)
get one value for all rows, chosen by least squares on log time: the sum over the fitted rows
of ``(log predicted - log measured)^2``, so every row counts by its relative error whatever its
size. Held-out rows are predicted, not fitted: their error says how far to trust the fit.

A prediction is two short runs of the scenario: timing-only when its strategy has that mode
(the same schedule without gradients), a real run otherwise. An iteration is one gradient
step of one worker: computing a gradient and what the strategy does with it before the
worker's next one (a synchronous round of SSGD or AR-SGD; a push and a fetch of ASGD; a
gossip step of SGP or D-PSGD; a local step of Local SGD, whose averaging every
``sync_every`` steps is shared among them). The runs stop after ``warmup`` and after
``warmup + iterations`` iterations of each worker, at the update that ends them (a round of a
synchronous strategy, one worker's gradient of an asynchronous one, an averaging round of
Local SGD), and the time per iteration is
``(sim_time_s - sim_time_s_warm) * workers / (steps - steps_warm)``: ``sim_time_s`` and
``workers`` from the summaries, ``steps`` the gradient steps of all workers, counted as the
events table's ``compute`` events (the summary's ``gradients`` counts contributions to updates,
one per averaging round in Local SGD). That is the simulated seconds each worker's steps took
after the warm-up, on average. The warm-up leaves out the start (every worker's first fetch at
once, a pipeline filling), as a measured steady-state time leaves it out.

The fit is Levenberg-Marquardt on the logarithms of the constants (they stay positive, and
a bandwidth and a latency are fitted on the same footing), with forward differences for the
Jacobian: the model is a simulation, not a formula. It stops when the error no longer falls,
or after ``max_evals`` evaluations (one evaluation runs every fitted row once).
"""

from __future__ import annotations

import copy
import difflib
import math
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import yaml

from fred.runs.api import run
from fred.runs.paths import output_file, write_whole
from fred.scenario import registry
from fred.scenario.errors import Refusal
from fred.scenario.loading import ScenarioError, get_path, include_profiles, read_yaml, set_path, validate
from fred.scenario.schema import Scenario
from fred.scenario.yaml_reading import shown
from fred.tools.fit_inputs import Row, bound_for, parse_fit, parse_holdout, read_measurements
from fred.tools.formats import count
from fred.tools.least_squares import least_squares


# ----------------------------------------------------------------------------- the model
class Predictor:
    """Seconds per iteration of each row's scenario, with the fitted constants set."""

    def __init__(self, rows: list[Row], paths: list[str], iterations: int, warmup: int = 0):
        self.rows, self.paths, self.iterations, self.warmup = rows, paths, iterations, warmup
        self.base = {r.number: read_yaml(r.path) for r in rows}
        self.updates_per_step: dict[
            int, float
        ] = {}  # updates per gradient step of each worker: 1, workers, 1/sync_every
        self.cache: dict[tuple[int, tuple[float, ...]], float] = {}

    def scenario(self, row: Row, values: tuple[float, ...], stop_updates: int) -> Scenario:
        """The row's scenario with ``values`` at the fitted paths, run for ``stop_updates`` updates."""
        where = f"{row.label} (row {row.number})"
        # Included files first: a stop an included file gives must not outlive the fit's own.
        data = include_profiles(copy.deepcopy(self.base[row.number]), row.path.parent, where)
        for path, value in zip(self.paths, values):
            set_path(data, path, value)
        strategy = data.get("strategy", {}).get("name") if isinstance(data.get("strategy"), dict) else None
        timing_only = (
            isinstance(strategy, str) and strategy in registry.names() and registry.get(strategy).timing_only
        )
        workload = data.get("workload") if isinstance(data.get("workload"), dict) else {}
        data["workload"] = {**workload, "timing_only": timing_only}
        data["stop"] = {
            "max_updates": stop_updates
        }  # the scenario's own stop trains; the fit times iterations
        data["eval"] = {"every_updates": stop_updates}  # evaluation takes no simulated time: once is enough
        return validate(data, where)

    def seconds(self, row: Row, values: tuple[float, ...]) -> float:
        """Simulated seconds per iteration of ``row`` with ``values`` (see the module's docstring)."""
        key = (row.number, values)
        if key not in self.cache:
            if (
                row.number not in self.updates_per_step
            ):  # once per row: it is the strategy's, not the constants'
                self.updates_per_step[row.number] = self._updates_per_step(row, values)
            per_step = self.updates_per_step[row.number]
            warm_updates = math.ceil(self.warmup * per_step) if self.warmup else 0
            end_updates = max(math.ceil((self.warmup + self.iterations) * per_step), warm_updates + 1)
            warm = self._timed(row, values, warm_updates) if warm_updates else None
            self.cache[key] = per_iteration_s(self._timed(row, values, end_updates), warm)
        return self.cache[key]

    def _updates_per_step(self, row: Row, values: tuple[float, ...]) -> float:
        """Updates per gradient step of each worker: 1 for a synchronous strategy (an update is a
        round), ``workers`` for one that updates per gradient, 1/``sync_every`` for Local SGD.

        From the contributions per update (the summary's ``gradients`` over ``updates``: exact
        in any run) and the steps per contribution, whole, counted where steps still in
        progress (every worker's first, computed at once) are few beside those done."""
        probe = self._timed(row, values, self.iterations)
        contributions = probe.gradients / probe.updates
        if contributions < probe.workers:  # an update per gradient: a run of several steps per worker
            probe = self._timed(row, values, max(self.iterations, 4 * probe.workers))
        steps_per_contribution = max(round(probe.steps / probe.gradients), 1)
        return probe.workers / (contributions * steps_per_contribution)

    def _timed(self, row: Row, values: tuple[float, ...], stop_updates: int) -> Timed:
        result = run(self.scenario(row, values, stop_updates))
        summary, counted = result.summary, timed(result)
        if summary["status"] != "completed" or not counted.steps or not counted.gradients:
            raise Refusal(
                f"{row.label} (row {row.number}) did not run to its end ({summary['status']}: "
                f"{summary.get('failure') or summary.get('stop_reason')}) with {self.describe(values)}"
            )
        return counted

    def describe(self, values: tuple[float, ...]) -> str:
        return ", ".join(f"{p}={v:.4g}" for p, v in zip(self.paths, values))


class Timed(NamedTuple):
    """What a prediction reads from one run."""

    sim_time_s: float  # the summary's: when the last update was made
    steps: int  # gradient steps of all workers: the events table's compute events
    workers: int
    updates: int
    gradients: int  # the summary's: contributions to updates


def per_iteration_s(end: Timed, warm: Timed | None = None) -> float:
    """Simulated seconds per iteration of one worker: the run's time over each worker's gradient
    steps, counted after the shorter run ``warm`` of the same scenario when one is given."""
    before_s, before = (warm.sim_time_s, warm.steps) if warm is not None else (0.0, 0)
    return (end.sim_time_s - before_s) * end.workers / (end.steps - before)


def timed(result: Any) -> Timed:
    """A :class:`~fred.runs.runner.RunResult`'s :class:`Timed`, as a prediction reads it."""
    summary = result.summary
    steps = int((result.events["kind"] == "compute").sum())
    return Timed(
        float(summary["sim_time_s"]), steps, summary["workers"], summary["updates"], summary["gradients"]
    )


def starting_values(
    rows: list[Row], paths: dict[str, float | None], predictor: Predictor
) -> tuple[tuple[float, ...], list[str]]:
    """Where the fit starts, and notes; every path checked in every row's resolved scenario
    (the same problem in each row is said once)."""
    problems: dict[str, str] = {}
    notes: list[str] = []
    seen: dict[str, dict[float, str]] = {p: {} for p in paths}
    for row in rows:
        resolved = predictor.scenario(row, (), 1).resolved()
        for path, start in paths.items():
            value = get_path(resolved, path, _MISSING)
            problem = _not_fittable(path, value, row, resolved, start)
            if problem:
                problems.setdefault(path, problem)
            elif isinstance(value, float):
                seen[path].setdefault(value, row.label)
    if problems:
        raise ScenarioError(list(problems.values()), "--fit")
    values = []
    for path, start in paths.items():
        found = list(seen[path].items())
        values.append(start if start is not None else found[0][0])
        if start is None and len(found) > 1:
            shown_values = ", ".join(f"{v:g} in {label}" for v, label in found[:4])
            notes.append(
                f"{path} differs among the rows ({shown_values}); the fit gives every row one value, "
                f"starting from {found[0][0]:g}"
            )
    return tuple(values), notes


_MISSING = object()


def _not_fittable(
    path: str, value: Any, row: Row, resolved: dict[str, Any], start: float | None
) -> str | None:
    """Why ``path`` cannot be fitted in ``row``'s scenario, or None."""
    where = f"--fit {path}: in {row.label} (row {row.number})"
    if value is _MISSING:
        head, _, key = path.rpartition(".")
        parent = get_path(resolved, head) if head else resolved
        if isinstance(parent, dict):
            close = difflib.get_close_matches(key, [str(k) for k in parent], n=1)
            hint = (
                f"did you mean {head + '.' if head else ''}{close[0]}?"
                if close
                else f"{head or 'the top level'} has {', '.join(map(str, parent))}"
            )
            return f"{where} there is no such field; {hint}"
        return (
            f"{where} there is no such field ({head} is {shown(parent)}); give a dotted path as --set takes, "
            "e.g. network.bandwidth_bps"
        )
    if any(
        isinstance(get_path(resolved, ".".join(path.split(".")[:i])), list)
        for i in range(1, path.count(".") + 1)
    ):
        return (
            f"{where} the path goes through a list; fit a field of a section (a profile cannot hold a list's "
            "item)"
        )
    if not isinstance(value, float):
        kind = (
            "an integer (a count, not a constant to fit)"
            if isinstance(value, int) and not isinstance(value, bool)
            else shown(value)
        )
        return (
            f"{where} the value is {kind}, not a number to fit; fit a constant such as network.bandwidth_bps "
            "or network.latency_s"
        )
    if value <= 0 and start is None:
        return (
            f"{where} the value is {value:g}, and a fit on log values needs a positive start: give one, e.g. "
            f"--fit {path}=1e-3"
        )
    return None


# ----------------------------------------------------------------------------- the fit
@dataclass
class FitResult:
    """A finished fit: the constants before and after, and each row's prediction."""

    csv_path: Path
    start: dict[str, float]
    values: dict[str, float]
    rows: list[Row]
    predicted_s: list[float]
    evaluations: int
    converged: bool
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def error_pct(self, row: Row, predicted_s: float) -> float:
        return 100.0 * (predicted_s - row.measured_s) / row.measured_s

    def mean_abs_error_pct(self, held_out: bool) -> float | None:
        errors = [
            abs(self.error_pct(r, p)) for r, p in zip(self.rows, self.predicted_s) if r.held_out == held_out
        ]
        return sum(errors) / len(errors) if errors else None


@dataclass
class Plan:
    """A fit, checked and ready to run: its rows, the constants and where they start."""

    csv_path: Path
    rows: list[Row]
    predictor: Predictor
    start: tuple[float, ...]
    notes: list[str]
    max_evals: int = 200


def plan(
    csv_path: str | Path,
    fit_spec: str,
    holdout: str = "",
    iterations: int = 20,
    warmup: int = 5,
    max_evals: int = 200,
) -> Plan:
    """Read and check everything a fit needs, each row run once at the start: every refusal
    comes before the fit's work and before anything is written."""
    paths = parse_fit(fit_spec)
    rows = parse_holdout(holdout, read_measurements(csv_path))
    fitted = [r for r in rows if not r.held_out]
    if not fitted:
        raise ScenarioError(
            ["--holdout holds out every row: none is left to fit; hold out fewer"], "--holdout"
        )
    if len(fitted) < len(paths):
        raise ScenarioError(
            [
                f"{count(len(fitted), 'row')} to fit {count(len(paths), 'constant')}: a least-squares fit "
                "needs at least as "
                "many rows as constants; give more measurements, hold out fewer or fit fewer constants"
            ],
            "--fit",
        )
    if iterations < 1 or warmup < 0:
        raise Refusal(
            f"--iterations {iterations} --warmup {warmup}: give at least 1 iteration of each worker to time "
            "(20 is the default) after 0 or more left out (5 is the default)"
        )
    if max_evals < len(paths) + 2:
        raise Refusal(
            f"--max-evals {max_evals}: give at least {len(paths) + 2} (a Jacobian and a step; 200 is the "
            "default)"
        )
    predictor = Predictor(rows, list(paths), iterations, warmup)
    start, notes = starting_values(rows, paths, predictor)
    try:
        for (
            row
        ) in rows:  # the start must run: a scenario that cannot is the user's to fix, not a step to reject
            predictor.seconds(row, start)
    except ValueError as err:
        raise ScenarioError(
            [f"{err}; fix the scenario, or start --fit elsewhere (path=value)"], "fred fit"
        ) from None
    return Plan(Path(csv_path), rows, predictor, start, notes, max_evals)


def fit(
    csv_path: str | Path,
    fit_spec: str,
    holdout: str = "",
    iterations: int = 20,
    warmup: int = 5,
    max_evals: int = 200,
    tell: Callable[[str], None] = lambda line: None,
) -> FitResult:
    """Fit the constants ``fit_spec`` names to the measurements in ``csv_path`` (see the module's
    docstring)."""
    return solve(plan(csv_path, fit_spec, holdout, iterations, warmup, max_evals), tell)


def solve(plan: Plan, tell: Callable[[str], None] = lambda line: None) -> FitResult:
    """Run a checked fit: least squares from its start, then every row predicted with the fitted values."""
    predictor, rows, paths = plan.predictor, plan.rows, plan.predictor.paths
    fitted = [r for r in rows if not r.held_out]
    measured = np.log([r.measured_s for r in fitted])

    def residuals(x: np.ndarray) -> np.ndarray | None:
        values = tuple(float(v) for v in np.exp(x))
        try:
            return np.log([predictor.seconds(r, values) for r in fitted]) - measured
        except (ScenarioError, ValueError):  # a value the scenario refuses (efficiency above 1), a failed run
            return None

    tell(f"fitting {', '.join(paths)} on {count(len(fitted), 'row')}, {len(rows) - len(fitted):,} held out")
    solution = least_squares(residuals, np.log(plan.start), plan.max_evals, tell)
    values = tuple(float(v) for v in np.exp(solution.x))
    result = FitResult(
        plan.csv_path,
        dict(zip(paths, plan.start)),
        dict(zip(paths, values)),
        rows,
        [predictor.seconds(r, values) for r in rows],
        solution.evaluations,
        solution.converged,
        list(plan.notes),
    )
    result.warnings = implausible(result.values) + undetermined(paths, solution.jacobian)
    if not solution.converged:
        result.warnings.append(
            f"the fit stopped at {solution.evaluations} evaluations before it converged; "
            "give more with --max-evals, or a start nearer the answer (--fit path=value)"
        )
    return result


def implausible(values: dict[str, float]) -> list[str]:
    """A warning for each fitted value outside what real systems have (:data:`PLAUSIBLE`)."""
    warnings = []
    for path, value in values.items():
        bound = bound_for(path)
        if bound is not None and not bound.low < value <= bound.high:
            warnings.append(
                f"{path} = {value:.4g} is outside {bound.low:g}..{bound.high:g} ({bound.reading}): "
                "the fit is making up for something the scenario does not model"
            )
    return warnings


def undetermined(paths: list[str], jacobian: np.ndarray) -> list[str]:
    """A warning for a constant the fitted rows barely depend on, or constants only a combination of which
    they determine."""
    warnings = []
    sizes = np.linalg.norm(jacobian, axis=0)
    for path, size in zip(paths, sizes):
        if size < 1e-3:
            warnings.append(
                f"{path}: the fitted rows' times barely depend on it (d log time / d log value is "
                f"{size:.2g}); its value is not determined: add rows where it matters, or do not fit it"
            )
    kept = sizes >= 1e-3
    if kept.sum() > 1:
        singular = np.linalg.svd(jacobian[:, kept] / sizes[kept], compute_uv=False)
        if singular[-1] < 1e-4 * singular[0]:
            named = ", ".join(p for p, k in zip(paths, kept) if k)
            warnings.append(
                f"{named}: the rows determine only a combination of these (such as a bandwidth times an "
                "efficiency), not each; fit fewer, or add rows that tell them apart"
            )
    return warnings


# ----------------------------------------------------------------------------- output
def report(result: FitResult) -> str:
    """The fitted values, each row's prediction against its measurement, and the errors."""
    width = max(len(p) for p in result.values)
    lines = [f"{'constant':<{width}}  {'start':>11}  {'fitted':>11}"]
    lines += [f"{p:<{width}}  {result.start[p]:>11.5g}  {v:>11.5g}" for p, v in result.values.items()]
    label_width = min(40, max(len("scenario"), *(len(r.label) for r in result.rows)))
    lines += [
        "",
        f"{'row':>3}  "
        f"{'scenario':<{label_width}}  {'measured_s':>11}  {'predicted_s':>11}  {'error':>8}  set",
    ]
    for row, predicted in zip(result.rows, result.predicted_s):
        label = row.label if len(row.label) <= label_width else "…" + row.label[-label_width + 1 :]
        lines.append(
            f"{row.number:>3}  {label:<{label_width}}  {row.measured_s:>11.5g}  {predicted:>11.5g}  "
            f"{result.error_pct(row, predicted):>+7.2f}%  {'held out' if row.held_out else 'fit'}"
        )
    fitted, held = result.mean_abs_error_pct(False), result.mean_abs_error_pct(True)
    lines.append("")
    lines.append(f"fitted rows: mean absolute error {fitted:.3g} %")
    lines.append(
        f"held-out rows: mean absolute error {held:.3g} %"
        if held is not None
        else "held-out rows: none (give --holdout to see how the fit predicts rows it was not fitted on)"
    )
    return "\n".join(lines)


def profile(result: FitResult) -> str:
    """The fit as YAML: the fitted sections of a scenario, under a comment naming the rows."""
    body: dict[str, Any] = {}
    for path, value in result.values.items():
        set_path(body, path, value)
    sets = " ".join(f"--set {p}={v!r}" for p, v in result.values.items())
    rows = [
        f"#   row {r.number}: {_one_line(r.label)}, measured {r.measured_s:g} s, predicted {p:.6g} s "
        f"({result.error_pct(r, p):+.2f} %)"
        for r, p in zip(result.rows, result.predicted_s)
    ]
    held = result.mean_abs_error_pct(True)
    header = [
        "# fred fit: constants fitted by least squares on log seconds per iteration",
        f"# to the measurements in {_one_line(str(result.csv_path))}; fitted on",
        *[line for line, r in zip(rows, result.rows) if not r.held_out],
        *(
            ["# held out (predicted, not fitted on):"]
            + [line for line, r in zip(rows, result.rows) if r.held_out]
            if held is not None
            else ["# no rows held out"]
        ),
        *([f"# held-out mean absolute error {held:.3g} %"] if held is not None else []),
        *[f"# warning: {_one_line(w)}" for w in result.warnings],
        "# It is a part of a scenario: include it (include: [<this file>] in the scenario), or give its "
        "values to a run with",
        f"#   fred run S.yaml {sets}",
        '# or from Python, fred.run("S.yaml", **yaml.safe_load(open(<this file>)))',
    ]
    return "\n".join(header) + "\n" + yaml.safe_dump(body, sort_keys=False)


def _one_line(text: str) -> str:
    """``text`` safe in a YAML comment: no line breaks or other control characters."""
    return re.sub(r"[\x00-\x1f\x7f]", "?", text)


def write_profile(result: FitResult, path: Path) -> Path:
    return write_whole(path, lambda partial: partial.write_text(profile(result)))


def command(args: Any) -> int:
    """``fred fit``, from the command line's arguments."""
    tell = lambda line: print(f"fit: {line}", file=sys.stderr, flush=True)  # noqa: E731 - a line per iteration
    checked = plan(
        args.measurements, args.paths, args.holdout, args.iterations, args.warmup, args.max_evals
    )  # refusals before any folder is made
    output = output_file(args.output, "fit.yaml", (args.measurements, *(r.path for r in checked.rows)))
    args.writing = f"{output} is written whole or not at all"  # for the message after a Ctrl-C
    result = solve(checked, tell)
    for note in result.notes:
        print(f"note: {note}", file=sys.stderr)
    for warning in result.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    print(report(result))
    write_profile(result, output)
    print(f"\nwrote {output}")
    return 0
