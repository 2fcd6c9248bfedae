"""The Python entry points: run a scenario, load a finished run."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import yaml

from fred.numerics.tape import NeedsValue, ResumeMismatch, read_outside_tape
from fred.runs import checkpoint
from fred.runs.checkpoint import Checkpointer, Saved, checkpoint_dir
from fred.runs.memory import check_fits
from fred.runs.paths import check_out
from fred.runs.records import (
    EVENT_DTYPES,
    METRIC_DTYPES,
    UPDATE_DTYPES,
    is_complete,
    missing_files,
    write_run_dir,
)
from fred.runs.runner import Progress, RunResult, execute
from fred.runs.work import check_evaluations
from fred.scenario.loading import ScenarioError, include_profiles, merge, read_yaml, validate
from fred.scenario.schema import Scenario


def resolve(scenario: Scenario | dict[str, Any] | str | Path, **overrides: Any) -> Scenario:
    """A validated scenario from an object, plain data or a YAML path, with deep-merged overrides."""
    if isinstance(scenario, Scenario):
        data, source = scenario.resolved(), scenario.name
    elif isinstance(scenario, dict):
        data, source = scenario, "scenario"
    else:
        data, source = read_yaml(scenario), str(scenario)
    if isinstance(scenario, Scenario) and not overrides:
        return scenario
    base_dir = Path(scenario).parent if isinstance(scenario, (str, Path)) else Path.cwd()
    return validate(include_profiles(merge(data, overrides), base_dir, source), source)


def default_run_dir(scenario: Scenario, root: str | Path = "runs") -> Path:
    """``root/<name>-s<seed>-<first 8 hex of the scenario's SHA-256>``: the seed in sight, so that
    the runs of ``--seeds 3`` tell apart by name (a seed of over 20 digits is cut; the hash differs)."""
    return Path(root) / f"{scenario.name}-s{str(scenario.seed)[:20]}-{scenario.digest()[:8]}"


def earlier_run_dir(scenario: Scenario, root: str | Path = "runs") -> Path:
    """Where a run of this scenario was written before run directories named their seed."""
    return Path(root) / f"{scenario.name}-{scenario.digest()[:8]}"


def finished_run(scenario: Scenario, runs_root: str | Path = "runs") -> RunResult | None:
    """The complete run of exactly this resolved scenario under ``runs_root``, if there is one:
    in its directory, or in the one an earlier fred named without the seed."""
    for out in (default_run_dir(scenario, runs_root), earlier_run_dir(scenario, runs_root)):
        if is_complete(out):
            done = load_run(out)
            if done.summary.get("scenario_sha256") == scenario.digest():
                return done
    return None


def run(
    scenario: Scenario | dict[str, Any] | str | Path,
    out: str | Path | None = None,
    progress: Progress | None = None,
    checkpoint_every_s: float | None = None,
    **overrides: Any,
) -> RunResult:
    """Run a scenario in this process; with ``out``, also write its run directory there.

    With ``checkpoint_every_s`` (wall-clock seconds) a checkpoint is kept next to ``out``
    while the run goes on, so that :func:`resume` can finish it after a kill.
    """
    resolved = resolve(scenario, **overrides)
    if out is not None:  # before the run, not after it: a refused path would lose the run too
        check_out(out)
    check_fits(resolved)  # before a checkpoint folder is made: a refused run writes nothing
    check_evaluations(resolved)
    checkpointer = None
    if checkpoint_every_s is not None:
        if out is None:
            raise ValueError("checkpoint_every_s needs out: checkpoints are kept next to the run directory")
        inputs = (scenario,) if isinstance(scenario, (str, Path)) else ()
        checkpointer = _checkpointer(resolved, Path(out), checkpoint_every_s, inputs)
        (checkpointer.path / "scenario.yaml").write_text(yaml.safe_dump(resolved.resolved(), sort_keys=False))
    result = execute(resolved, progress, checkpointer)
    return _finish(resolved, result, out, checkpointer)


def resume(
    run_dir: str | Path,
    progress: Progress | None = None,
    checkpoint_every_s: float | None = None,
    restarting: Callable[[str], None] | None = None,
) -> tuple[RunResult, str | None]:
    """Finish the interrupted run that was to be written to ``run_dir``, from its last checkpoint.

    Returns the result and ``None`` when it fast-forwarded to the checkpoint, or the reason
    it had to run the scenario from the start instead (the result is the same bits).
    ``restarting`` is told that reason before the run starts again, not after it.
    """
    _not_a_checkpoint_folder(Path(run_dir))
    check_out(run_dir)
    _check_interval(checkpoint_every_s)  # before anything runs (0 was taken as "no checkpoints")
    path = checkpoint_dir(run_dir)
    checkpoint.check_folder(
        path, resuming=True
    )  # a link, or other files: never written through, never deleted
    if not (path / "scenario.yaml").is_file():
        if is_complete(Path(run_dir)):
            raise ScenarioError([f"{run_dir} is a finished run: there is nothing to resume"], str(run_dir))
        raise ScenarioError(
            [f"no checkpoint for {run_dir} (looked in {path}); start runs with --checkpoint-every-s"],
            str(run_dir),
        )
    if is_complete(Path(run_dir)):  # a checkpoint left by an earlier run: resuming it would replace this one
        stale = (
            f"{run_dir} is a finished run, and {path} the checkpoint of an unfinished one that would replace "
            "it: "
            f"delete {path} to keep the finished run, or move {run_dir} away to finish the checkpointed one"
        )
        raise ScenarioError([stale], str(run_dir))
    scenario = validate(read_yaml(path / "scenario.yaml", own=True), str(path / "scenario.yaml"))
    check_fits(scenario)
    check_evaluations(scenario)
    checkpointer = (
        _checkpointer(scenario, Path(run_dir), checkpoint_every_s) if checkpoint_every_s is not None else None
    )
    saved, reason = _load_checkpoint(path, scenario)
    result = None
    if saved is not None:
        if checkpointer is not None:
            checkpointer.wall_before_s = saved.wall_s
        try:
            result = execute(scenario, progress, checkpointer, resume=saved)
        except (
            ResumeMismatch,
            NeedsValue,
            TypeError,
            ValueError,
        ) as err:  # not a failure to write or to compute: those are the run's
            if isinstance(err, (TypeError, ValueError)) and not read_outside_tape(err):
                raise
            reason = f"{type(err).__name__}: {err}"
            if checkpointer is not None:
                checkpointer.wall_before_s = 0.0  # the run is computed again from its start, in this process
    if result is None:
        if restarting is not None and reason is not None:
            restarting(reason)
        result = execute(scenario, progress, checkpointer)
    return _finish(scenario, result, run_dir, checkpointer or Checkpointer(path, float("inf"), "")), reason


def _load_checkpoint(path: Path, scenario: Scenario) -> tuple[Saved | None, str | None]:
    """The checkpoint, or None and why it cannot be used (the run is then computed from its start)."""
    try:
        saved = checkpoint.load(path)
    except Exception as err:  # noqa: BLE001 - json, zip and numpy each raise their own for a damaged file
        return None, f"{type(err).__name__} reading {path}: {err}"
    if saved.scenario_sha256 != scenario.digest():
        return None, f"{path}: the checkpoint is of another scenario than its scenario.yaml"
    return saved, None


def _not_a_checkpoint_folder(run_dir: Path) -> None:
    # `ls` shows run.checkpoint/ beside nothing else: --resume was given it, and check_out's
    # advice was to choose another --out or empty it
    if (
        run_dir.name.endswith(".checkpoint")
        and (run_dir / "scenario.yaml").is_file()
        and not (run_dir / "summary.json").exists()
    ):
        run = run_dir.with_name(run_dir.name.removesuffix(".checkpoint"))
        raise ScenarioError(
            [f"{run_dir} is a checkpoint folder; give the run directory it is for: fred run --resume {run}"],
            str(run_dir),
        )


def _check_interval(every_s: float | None) -> None:
    if (
        every_s is not None and not every_s > 0
    ):  # 0 would save (and collect garbage) after every simulated step
        raise ValueError(
            f"--checkpoint-every-s {every_s}: give a positive number of wall-clock seconds, e.g. 60"
        )


def _checkpointer(
    scenario: Scenario, out: Path, every_s: float, inputs: tuple[str | Path, ...] = ()
) -> Checkpointer:
    _check_interval(every_s)
    path = checkpoint_dir(out)
    checkpoint.check_folder(path, inputs)
    path.mkdir(parents=True, exist_ok=True)
    return Checkpointer(path, every_s, scenario.digest())


def _finish(
    scenario: Scenario, result: RunResult, out: str | Path | None, checkpointer: Checkpointer | None
) -> RunResult:
    """Write the run directory; only then drop the checkpoints it no longer needs."""
    if out is not None:
        result.path = write_run_dir(
            Path(out), scenario.resolved(), result.summary, _tables(result), result.params, result.tape
        )
    if checkpointer is not None:
        checkpoint.remove(checkpointer.path)  # fred's files only, never through a link
    return result


def _tables(result: RunResult) -> dict[str, pd.DataFrame]:
    return {"metrics": result.metrics, "updates": result.updates, "events": result.events}


def load_run(path: str | Path | None, tables: bool = True) -> RunResult:
    """Read a run directory written by ``fred run`` or :func:`run`.

    ``tables=False`` leaves the metrics, updates and events tables unread (empty, with their
    columns and dtypes; ``tables_read`` is False, and what reads them, such as ``time_to``,
    says so): what replay does, which needs only the scenario, summary and parameters.
    """
    if path is None:  # the path of a result run without out=
        raise ValueError(
            "no run directory to load: this result was not written; pass out= to fred.run to write one"
        )
    path = Path(path)
    if not path.is_dir():
        raise ScenarioError(
            [f"{path} is not a directory; give a run directory written by fred run"], str(path)
        )
    missing = missing_files(path)
    if missing:
        raise ScenarioError(
            [f"{path} is not a complete run directory: it has no {', '.join(missing)}"], str(path)
        )
    scenario = validate(read_yaml(path / "scenario.yaml", own=True), str(path / "scenario.yaml"))
    return RunResult(
        scenario=scenario,
        summary=_summary(path / "summary.json"),
        metrics=_table(path / "metrics.parquet", tables, METRIC_DTYPES),
        updates=_table(path / "updates.parquet", tables, UPDATE_DTYPES),
        events=_table(path / "events.parquet", tables, EVENT_DTYPES),
        params=_read(path / "params.npz", _npz),
        path=path,
        tables_read=tables,
    )


def _table(file: Path, read: bool, columns: dict[str, str]) -> pd.DataFrame:
    """The table, or (unread) an empty one with its columns once its file's footer reads: a
    damaged record is named either way."""
    if read:
        return _read(file, pd.read_parquet)
    _read(file, pq.read_metadata)
    return pd.DataFrame({column: pd.Series(dtype=dtype) for column, dtype in columns.items()})


def _npz(file: Path) -> dict[str, np.ndarray]:
    with np.load(file) as npz:
        return {k: npz[k] for k in npz.files}


JSON_KINDS = {
    list: "a JSON array",
    str: "a JSON string",
    int: "a JSON number",
    float: "a JSON number",
    bool: "a JSON boolean",
}


def _summary(file: Path) -> dict[str, Any]:
    """The summary's fields; valid JSON that is not an object (``[]``, ``3``) is a damaged record too,
    not an AttributeError where a reader calls ``summary.get``."""
    summary = _read(file, lambda f: json.loads(f.read_text()))
    if not isinstance(summary, dict):
        text = json.dumps(summary)
        shown = text if len(text) <= 40 else text[:37] + "..."
        raise _damaged(
            file,
            f"holds {shown} ({JSON_KINDS.get(type(summary), 'JSON null')}), "
            "not the JSON object of fields fred run writes",
        )
    return summary


def _read(file: Path, reader: Callable[[Path], Any]) -> Any:
    """``reader(file)``, or an error that names the file: a damaged record is not a traceback."""
    try:
        return reader(file)
    except Exception as err:  # noqa: BLE001 - json, zip, zlib and pyarrow each raise their own
        raise _damaged(file, f"cannot be read ({type(err).__name__}: {err})") from None


DAMAGED = "the run directory is damaged"  # what a sweep finds to give its own fix in place of fred run's


def _damaged(file: Path, problem: str) -> ScenarioError:
    """A damaged record, named, with how to write its run afresh."""
    return ScenarioError([f"{file} {problem}; {DAMAGED}: {rerun_hint(file.parent)}"], str(file))


def rerun_hint(run_dir: Path) -> str:
    """How to write a damaged run directory afresh: its scenario.yaml is the resolved scenario."""
    return f"run its scenario again to replace it, fred run {run_dir / 'scenario.yaml'} --out {run_dir}"
