"""The Python entry points: run a scenario, load a finished run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from fred.loading import ScenarioError, include_profiles, merge, read_yaml, validate
from fred.records import is_complete, write_run_dir
from fred.runner import Progress, RunResult, execute
from fred.scenario import Scenario


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
    return Path(root) / f"{scenario.name}-{scenario.digest()[:8]}"


def finished_run(scenario: Scenario, runs_root: str | Path = "runs") -> RunResult | None:
    """The complete run of exactly this resolved scenario under ``runs_root``, if there is one."""
    out = default_run_dir(scenario, runs_root)
    if not is_complete(out):
        return None
    done = load_run(out)
    return done if done.summary.get("scenario_sha256") == scenario.digest() else None


def run(
    scenario: Scenario | dict[str, Any] | str | Path,
    out: str | Path | None = None,
    progress: Progress | None = None,
    **overrides: Any,
) -> RunResult:
    """Run a scenario in this process; with ``out``, also write its run directory there."""
    resolved = resolve(scenario, **overrides)
    result = execute(resolved, progress)
    if out is not None:
        result.path = write_run_dir(
            Path(out), resolved.resolved(), result.summary, _tables(result), result.params, result.tape
        )
    return result


def _tables(result: RunResult) -> dict[str, pd.DataFrame]:
    return {"metrics": result.metrics, "updates": result.updates, "events": result.events}


def load_run(path: str | Path) -> RunResult:
    """Read a run directory written by ``fred run`` or :func:`run`."""
    path = Path(path)
    if not is_complete(path):
        raise ScenarioError([f"{path} is not a complete run directory (no summary.json or a missing table)"], str(path))
    scenario = validate(yaml.safe_load((path / "scenario.yaml").read_text()), str(path / "scenario.yaml"))
    with np.load(path / "params.npz") as npz:
        params = {k: npz[k] for k in npz.files}
    return RunResult(
        scenario=scenario,
        summary=json.loads((path / "summary.json").read_text()),
        metrics=pd.read_parquet(path / "metrics.parquet"),
        updates=pd.read_parquet(path / "updates.parquet"),
        events=pd.read_parquet(path / "events.parquet"),
        params=params,
        path=path,
    )
