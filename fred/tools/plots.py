"""Figures people would rather look at than read: loss curves, staleness histograms, timelines.

Matplotlib with the non-interactive Agg backend, so plotting works on machines without a
display. Every figure is written as PNG and SVG.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from fred.runs.paths import output_dir, write_whole  # noqa: E402

COMMUNICATION = {"push", "fetch", "send", "allreduce", "lost"}  # a lost transfer was on the wire too
# Drawing order: "other" first, underneath, as it holds conditions (a degraded link, a worker
# left out) that span activities; drawn last it hid every compute and push inside them.
DRAWN = ("other", "compute", "communicate", "wait")
COLOURS = {"compute": "#4C72B0", "communicate": "#DD8452", "wait": "#B0B0B0", "other": "#55A868"}


def _save(fig, out: Path, stem: str) -> list[Path]:
    """The figure as PNG and SVG, each file whole or not at all; closed whatever happens (a
    refused path or a Ctrl-C must not leave it open in a notebook that goes on)."""
    paths = [out / f"{stem}.png", out / f"{stem}.svg"]
    try:
        output_dir(out)
        for path in paths:
            metadata = {"Date": None} if path.suffix == ".svg" else None
            write_whole(path, lambda partial: fig.savefig(partial, bbox_inches="tight", metadata=metadata))
    finally:
        plt.close(fig)
    return paths


def _label(result) -> str:
    s, title = result.summary, result.title
    said = []  # not twice what a compare label already says
    if f"strategy.name={s['strategy']}" not in title:
        said.append(str(s["strategy"]))
    if "cluster.workers=" not in title:
        said.append(f"{s['workers']} workers")
    return f"{title} ({', '.join(said)})" if said else title


def loss_curves(results: Sequence, out: Path) -> list[Path]:
    """Eval loss against simulated time and against updates, one line per run that has losses
    (a timing-only run has none); no figure when no run has."""
    with_losses = [r for r in results if r.metrics["eval_loss"].notna().any()]
    if not with_losses:
        return []
    written = []
    for x, stem, xlabel in [("sim_time_s", "loss_vs_time", "simulated time (s)"), ("updates", "loss_vs_updates", "updates")]:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for i, r in enumerate(with_losses):
            ax.plot(r.metrics[x], r.metrics["eval_loss"], marker=".", label=_label(r), **_line_style(i))
        ax.set(xlabel=xlabel, ylabel="eval loss", yscale="log", title=f"eval loss vs {xlabel}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the axes: never over a curve
        written += _save(fig, out, stem)
    return written


LINE_STYLES = ("-", "--", ":", "-.")


def _line_style(i: int) -> dict[str, str]:
    """The i-th run's colour and dashes: 40 runs told apart (matplotlib's colours repeat after ten,
    and a sweep's comparison easily has more)."""
    return {"color": f"C{i % 10}", "linestyle": LINE_STYLES[(i // 10) % len(LINE_STYLES)]}


HISTOGRAMS_PER_ROW = 4


def staleness_histograms(results: Sequence, out: Path) -> list[Path]:
    """One staleness histogram per run, four to a row (one row of 190 runs' made a PNG 66,000 px wide)."""
    columns = max(1, min(len(results), HISTOGRAMS_PER_ROW))
    rows = -(-len(results) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(3.5 * columns, 3.2 * rows), squeeze=False)
    for ax in axes.flat[len(results):]:
        ax.set_visible(False)
    for ax, r in zip(axes.flat, results):
        st = r.updates["staleness"]
        ax.hist(st, bins=range(int(st.max()) + 2) if len(st) else 1, color=COLOURS["compute"])
        ax.set(title=textwrap.fill(_label(r), 45), xlabel="staleness (updates)", ylabel="gradients")  # side by side: no overlap
        ax.title.set_fontsize(8)
    fig.tight_layout()
    return _save(fig, out, "staleness")


def _in_group(kinds: pd.Series, group: str) -> pd.Series:
    if group == "compute" or group == "wait":
        return kinds == group
    if group == "communicate":
        return kinds.isin(COMMUNICATION)
    return ~kinds.isin(COMMUNICATION | {"compute", "wait"})


def timeline(result, out: Path, max_events: int = 20000) -> list[Path]:
    """A Gantt chart per entity: compute, communication and waiting over simulated time."""
    events = result.events.head(max_events)
    title = _label(result)
    if len(result.events) > max_events:  # say so: the chart would otherwise pass for the whole run
        title += f" (first {max_events:,} of {len(result.events):,} events)"
    entities = sorted(set(events["entity"]), key=lambda e: (not e.startswith("worker"), len(e), e))
    fig, ax = plt.subplots(figsize=(10, 0.35 * len(entities) + 1.5))
    for row, entity in enumerate(entities):
        mine = events[events["entity"] == entity]
        for group in DRAWN:
            picked = mine[_in_group(mine["kind"], group)]
            start, width = picked["start_s"], picked["end_s"] - picked["start_s"]
            spans = list(zip(start[width > 0], width[width > 0]))
            if spans:
                # no edges: each span's 1-px outline painted a long run's many short pushes over its compute
                ax.broken_barh(spans, (row - 0.4, 0.8), color=COLOURS[group], linewidth=0)
            instants = start[width == 0]  # a crash, or every event on the logical clock: no width to fill
            if len(instants):
                ax.plot(instants, [row] * len(instants), linestyle="none", marker="|", markersize=9, color=COLOURS[group])
    ax.set(yticks=range(len(entities)), yticklabels=entities, xlabel="simulated time (s)", title=title)
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in COLOURS.values()]
    ax.legend(handles, list(COLOURS), loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)  # not over the bars
    return _save(fig, out, "timeline")
