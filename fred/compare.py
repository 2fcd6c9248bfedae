"""``fred compare``: run what is not yet run, then one table and side-by-side plots."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pandas as pd

from fred.analysis import summary_row
from fred.api import default_run_dir, finished_run, load_run, run
from fred.loading import load_scenario
from fred.plots import loss_curves, staleness_histograms
from fred.runner import RunResult


def gather(items: list[str], runs_root: Path, progress: Callable | None = None) -> tuple[list[RunResult], int]:
    """Load run directories; run scenario files unless a finished run of the same resolved scenario exists.

    Returns the results in order and how many had to be run.
    """
    results, ran = [], 0
    for item in items:
        path = Path(item)
        if path.is_dir():
            results.append(load_run(path))
            continue
        scenario = load_scenario(path)
        done = finished_run(scenario, runs_root)
        if done is None:
            done = run(scenario, out=default_run_dir(scenario, runs_root), progress=progress)
            ran += 1
        results.append(done)
    return results, ran


def compare(items: list[str], out: Path, runs_root: Path, target_loss: float | None = None) -> tuple[pd.DataFrame, int]:
    """Write ``comparison.csv`` and the plots under ``out``; returns the table and the runs made."""
    results, ran = gather(items, runs_root)
    table = pd.DataFrame([summary_row(r, target_loss) for r in results])
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / "comparison.csv", index=False)
    loss_curves(results, out)
    staleness_histograms(results, out)
    return table, ran
