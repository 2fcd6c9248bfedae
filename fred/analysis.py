"""Questions people ask of finished runs: staleness distributions and comparison tables."""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
import pandas as pd


def staleness(updates: pd.DataFrame, by: Literal["overall", "worker", "time"] = "overall", bins: int = 20) -> pd.DataFrame:
    """Staleness distribution: ``overall`` (count per staleness value), per ``worker``
    (count, mean, p50, p99, max) or over ``time`` (mean and p99 in ``bins`` equal windows)."""
    s = updates["staleness"]
    if by == "overall":
        counts = s.value_counts().sort_index()
        return pd.DataFrame({"staleness": counts.index, "count": counts.to_numpy(), "share": counts.to_numpy() / len(s)})
    if by == "worker":
        g = updates.groupby("worker")["staleness"]
        return pd.DataFrame(
            {"count": g.size(), "mean": g.mean(), "p50": g.quantile(0.5), "p99": g.quantile(0.99), "max": g.max()}
        )
    if by == "time":
        if updates.empty:
            return pd.DataFrame(columns=["start_s", "end_s", "mean", "p99"])
        edges = np.linspace(updates["sim_time_s"].min(), updates["sim_time_s"].max() + 1e-12, bins + 1)
        window = pd.cut(updates["sim_time_s"], edges, right=False, labels=False)
        g = updates.groupby(window)["staleness"]
        return pd.DataFrame(
            {"start_s": edges[:-1][g.mean().index], "end_s": edges[1:][g.mean().index], "mean": g.mean().to_numpy(),
             "p99": g.quantile(0.99).to_numpy()}
        ).reset_index(drop=True)
    raise ValueError(f"by must be 'overall', 'worker' or 'time', got {by!r}")


def summary_row(result, target_loss: float | None = None) -> dict[str, object]:
    """One line of ``fred compare``'s table for a run."""
    s, st = result.summary, result.updates["staleness"]
    hit = result.time_to(target_loss) if target_loss is not None else None
    return {
        "run": result.title,
        "strategy": s["strategy"],
        "workers": s["workers"],
        "final_loss": s["final_eval_loss"],
        "final_accuracy": s["final_eval_accuracy"],
        "sim_time_s": s["sim_time_s"],
        "updates": s["updates"],
        "time_to_target_s": hit[0] if hit else math.nan,
        "updates_to_target": hit[1] if hit else math.nan,
        "bytes_sent": s["bytes_sent"],
        "staleness_mean": float(st.mean()) if len(st) else math.nan,
        "staleness_p50": float(st.quantile(0.5)) if len(st) else math.nan,
        "staleness_p99": float(st.quantile(0.99)) if len(st) else math.nan,
    }
