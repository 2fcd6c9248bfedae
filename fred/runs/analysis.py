"""Questions people ask of finished runs: staleness distributions and comparison tables."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np
import pandas as pd

if TYPE_CHECKING:  # fred.runs.runner reads this module: a run-time import would be circular
    from fred.runs.runner import RunResult


def staleness(updates: pd.DataFrame, by: Literal["overall", "worker", "time"] = "overall", bins: int = 20,
              workers: int | None = None) -> pd.DataFrame:
    """Staleness distribution: ``overall`` (count per staleness value), per ``worker``
    (count, mean, p50, p99, max; with ``workers``, a row for each of them, NaN for one whose
    gradients were never applied) or over ``time`` (count, mean and p99 in ``bins`` equal
    windows of the updates' simulated times; every window is a row, NaN where it has none)."""
    s = updates["staleness"]
    if by == "overall":
        counts = s.value_counts().sort_index()
        return pd.DataFrame({"staleness": counts.index, "count": counts.to_numpy(), "share": counts.to_numpy() / len(s)})
    if by == "worker":
        g = updates.groupby("worker")["staleness"]
        table = pd.DataFrame(
            {"count": g.size(), "mean": g.mean(), "p50": g.quantile(0.5), "p99": g.quantile(0.99), "max": g.max()}
        )
        if workers is None:
            return table
        table = table.reindex(pd.RangeIndex(workers, name="worker"))  # a worker that crashed at once is a row too
        return table.assign(count=table["count"].fillna(0).astype("int64"))
    if by == "time":
        return _over_time(updates, bins)
    raise ValueError(f"by must be 'overall', 'worker' or 'time', got {by!r}")


def _over_time(updates: pd.DataFrame, bins: int) -> pd.DataFrame:
    if bins < 1:
        raise ValueError(f"bins must be at least 1, got {bins}")
    if updates.empty:
        return pd.DataFrame({"start_s": pd.Series(dtype="float64"), "end_s": pd.Series(dtype="float64"),
                             "count": pd.Series(dtype="int64"), "mean": pd.Series(dtype="float64"),
                             "p99": pd.Series(dtype="float64")})
    t = updates["sim_time_s"].to_numpy(float)
    edges = np.linspace(t.min(), t.max(), bins + 1)
    # Windows by the edges reported, the last one closed (linspace ends exactly on the last
    # update). Scaling times to an index instead put an update on an edge, such as 15.0 of
    # 0..22 in 22 windows, in the window before it: int(15 / 22 * 22) is 14.
    window = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, bins - 1)
    g = updates["staleness"].groupby(window)
    rows = pd.RangeIndex(bins)
    return pd.DataFrame(
        {"start_s": edges[:-1], "end_s": edges[1:], "count": g.size().reindex(rows, fill_value=0).to_numpy(),
         "mean": g.mean().reindex(rows).to_numpy(), "p99": g.quantile(0.99).reindex(rows).to_numpy()}
    )


# What the figures' labels (fred.tools.plots, and the run's title, ``name``) read of a summary.json.
SUMMARY_FIELDS_PLOTTED = ("name", "strategy", "workers")
# What summary_row reads of a summary.json, and the comparison's figures.
SUMMARY_FIELDS_COMPARED = (
    *SUMMARY_FIELDS_PLOTTED, "status", "final_eval_loss", "final_eval_accuracy", "sim_time_s", "updates", "bytes_sent",
)  # fmt: skip


def with_summary_fields(result: RunResult, fields: tuple[str, ...], command: str) -> RunResult:
    """The run, if its summary has ``fields``: an older fred's or an edited one may not, and a
    KeyError traceback would not say which run, or what to do. ``command`` is what to do next
    with the new run (``compare``, ``plot``)."""
    missing = [key for key in fields if key not in result.summary]
    if missing:
        where = result.path if result.path is not None else Path("?")
        raise ValueError(
            f"{where / 'summary.json'} has no {', '.join(map(repr, missing))}: it was written by an older fred or edited; "
            f"run its scenario again with this fred (fred run {where / 'scenario.yaml'}) and {command} the new run"
        )
    return result


def summary_row(result: RunResult, target_loss: float | None = None) -> dict[str, object]:
    """One line of ``fred compare``'s table for a run."""
    s, st = result.summary, result.updates["staleness"]
    hit = result.time_to(target_loss) if target_loss is not None else None
    return {
        "run": result.title,
        "strategy": s["strategy"],
        "workers": s["workers"],
        "status": s["status"],  # a failed or diverged run's numbers are not a finished run's
        "final_loss": _nan_if_none(s["final_eval_loss"]),
        "final_accuracy": _nan_if_none(s["final_eval_accuracy"]),
        "sim_time_s": s["sim_time_s"],
        "updates": s["updates"],
        "target_loss": math.nan if target_loss is None else target_loss,  # a CSV read later has no command line beside it
        "time_to_target_s": hit[0] if hit else math.nan,
        "updates_to_target": hit[1] if hit else math.nan,
        "bytes_sent": s["bytes_sent"],
        "staleness_mean": float(st.mean()) if len(st) else math.nan,
        "staleness_p50": float(st.quantile(0.5)) if len(st) else math.nan,
        "staleness_p99": float(st.quantile(0.99)) if len(st) else math.nan,
    }


def _nan_if_none(value: float | None) -> float:
    """A summary's missing number (a timing-only or diverged run) as NaN, as the other columns have it."""
    return math.nan if value is None else value
