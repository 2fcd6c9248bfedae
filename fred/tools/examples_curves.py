"""Eval loss against the examples the workers computed gradients on: one x axis for strategies
whose updates are not alike.

``loss_vs_updates`` counts updates as each strategy makes them: an SSGD round of 8 workers'
gradients is one update, and so is one ASGD gradient, or a Local SGD round of 8 × ``sync_every``
steps. Against the examples computed (each worker's gradient steps done by the evaluation, times
the batch size) the same work is at the same x, whatever an update is.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from fred.tools import plots
from fred.tools.seeds import band

XLABEL = "examples computed (gradient steps of all workers × batch size)"


def with_examples(run) -> pd.DataFrame:
    """The run's metrics with ``examples``: the examples of the gradient steps finished by each
    evaluation (a step finished at an evaluation's time is in it, as its update is)."""
    ends = np.sort(run.events.loc[run.events["kind"] == "compute", "end_s"].to_numpy(dtype=float))
    metrics = run.metrics.copy()
    steps = np.searchsorted(ends, metrics["sim_time_s"].to_numpy(dtype=float), side="right")
    metrics["examples"] = steps * run.scenario.data.batch_size
    return metrics


def loss_vs_examples(
    results: Sequence,
    out: Path,
    target_loss: float | None = None,
    svg: bool = True,
) -> list[Path]:
    """``loss_vs_examples.png`` (and ``.svg`` unless ``svg=False``): a line per run with losses (a group of
    runs that differ only by seed: their mean, in a band from the least to the greatest), the
    target loss and the data's loss floor, as the other loss curves are drawn; no figure when no
    run has losses (timing-only runs)."""
    with_losses = [
        r for r in results if any(run.metrics["eval_loss"].notna().any() for run in plots._runs(r))
    ]
    if not with_losses:
        return []
    fig = Figure(figsize=(7, 4.5))
    ax = fig.subplots()
    for i, r in enumerate(with_losses):
        style = plots._line_style(i)
        runs = [SimpleNamespace(metrics=with_examples(run)) for run in plots._runs(r)]
        if len(runs) > 1:
            grid, mean, low, high = band(runs, "examples")
            ax.plot(grid, mean, label=f"{plots._label(r)}: mean of {len(runs)} seeds", **style)
            ax.fill_between(grid, low, high, color=style["color"], alpha=plots.BAND_ALPHA, linewidth=0)
        else:
            ax.plot(
                runs[0].metrics["examples"],
                runs[0].metrics["eval_loss"],
                marker=".",
                label=plots._label(r),
                **style,
            )
    plots.finish_loss_axes(ax, with_losses, target_loss, XLABEL, f"{plots.LOSS_LOG} vs examples computed")
    return plots._saved(fig, out, "loss_vs_examples", svg)
