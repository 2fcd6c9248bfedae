"""Staleness distributions of a finished run's updates: overall, per worker, over time."""

from __future__ import annotations

from typing import Literal

import numpy as np
import pandas as pd


def staleness(
    updates: pd.DataFrame,
    by: Literal["overall", "worker", "time"] = "overall",
    bins: int = 20,
    workers: int | None = None,
) -> pd.DataFrame:
    """Staleness distribution: ``overall`` (count per staleness value), per ``worker``
    (count, mean, p50, p99, max; with ``workers``, a row for each of them, NaN for one whose
    gradients were never applied) or over ``time`` (count, mean and p99 in ``bins`` equal
    windows of the updates' simulated times; every window is a row, NaN where it has none)."""
    s = updates["staleness"]
    if by == "overall":
        counts = s.value_counts().sort_index()
        return pd.DataFrame(
            {"staleness": counts.index, "count": counts.to_numpy(), "share": counts.to_numpy() / len(s)}
        )
    if by == "worker":
        g = updates.groupby("worker")["staleness"]
        table = pd.DataFrame(
            {
                "count": g.size(),
                "mean": g.mean(),
                "p50": g.quantile(0.5),
                "p99": g.quantile(0.99),
                "max": g.max(),
            }
        )
        if workers is None:
            return table
        table = table.reindex(
            pd.RangeIndex(workers, name="worker")
        )  # a worker that crashed at once is a row too
        return table.assign(count=table["count"].fillna(0).astype("int64"))
    if by == "time":
        return _over_time(updates, bins)
    raise ValueError(f"by must be 'overall', 'worker' or 'time', got {by!r}")


def _over_time(updates: pd.DataFrame, bins: int) -> pd.DataFrame:
    if bins < 1:
        raise ValueError(f"bins must be at least 1, got {bins}")
    if updates.empty:
        return pd.DataFrame(
            {
                "start_s": pd.Series(dtype="float64"),
                "end_s": pd.Series(dtype="float64"),
                "count": pd.Series(dtype="int64"),
                "mean": pd.Series(dtype="float64"),
                "p99": pd.Series(dtype="float64"),
            }
        )
    t = updates["sim_time_s"].to_numpy(float)
    edges = np.linspace(t.min(), t.max(), bins + 1)
    # Windows by the edges reported, the last one closed (linspace ends exactly on the last
    # update). Scaling times to an index instead put an update on an edge, such as 15.0 of
    # 0..22 in 22 windows, in the window before it: int(15 / 22 * 22) is 14.
    window = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, bins - 1)
    g = updates["staleness"].groupby(window)
    rows = pd.RangeIndex(bins)
    return pd.DataFrame(
        {
            "start_s": edges[:-1],
            "end_s": edges[1:],
            "count": g.size().reindex(rows, fill_value=0).to_numpy(),
            "mean": g.mean().reindex(rows).to_numpy(),
            "p99": g.quantile(0.99).reindex(rows).to_numpy(),
        }
    )
