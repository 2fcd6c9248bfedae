"""Comparison tables of finished runs: the summary fields they read and one row per run."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fred.runs.runner import RunResult


# What the figures' labels (fred.tools.plots, and the run's title, ``name``) read of a summary.json.
SUMMARY_FIELDS_PLOTTED = ("name", "strategy", "workers")
# What summary_row reads of a summary.json, and the comparison's figures.
SUMMARY_FIELDS_COMPARED = (
    *SUMMARY_FIELDS_PLOTTED, "status", "final_eval_loss", "final_eval_accuracy", "sim_time_s", "updates",
    "bytes_sent",
)  # fmt: skip


def with_summary_fields(result: RunResult, fields: tuple[str, ...], command: str) -> RunResult:
    """The run, if its summary has ``fields``: an older fred's or an edited one may not, and a
    KeyError traceback would not say which run, or what to do. ``command`` is what to do next
    with the new run (``compare``, ``plot``)."""
    missing = [key for key in fields if key not in result.summary]
    if missing:
        where = result.path if result.path is not None else Path("?")
        raise ValueError(
            f"{where / 'summary.json'} has no {', '.join(map(repr, missing))}: it was written by an older "
            "fred or edited; "
            f"run its scenario again with this fred (fred run {where / 'scenario.yaml'}) and {command} the "
            "new run"
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
        "target_loss": math.nan
        if target_loss is None
        else target_loss,  # a CSV read later has no command line beside it
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
