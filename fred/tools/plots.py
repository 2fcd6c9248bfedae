"""Figures people would rather look at than read: loss curves, staleness histograms, timelines.

Figures are made as :class:`matplotlib.figure.Figure` objects, not through pyplot: they need
no display and no backend, and importing this module leaves the caller's backend alone (a
notebook's inline figures go on working). Every figure is written as PNG, and as SVG too
unless ``svg=False``: ``fred plot`` writes SVG files only with ``--svg``, since a long run's
timeline is an SVG of many megabytes.
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path
from typing import Sequence

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, MaxNLocator, NullFormatter

from fred.tools.figure_common import _label, _saved
from fred.tools.seeds import band
from fred.tools.timeline_plot import (  # noqa: F401 - drawn there, named here with the other figures
    COLOURS,
    timeline,
    timeline_entities,
    timeline_window,
)


def _runs(item) -> list:
    """The runs of a comparison's line: a run, or the runs of a group that differ only by seed."""
    return list(getattr(item, "runs", [item]))


def loss_curves(
    results: Sequence,
    out: Path,
    target_loss: float | None = None,
    svg: bool = True,
) -> list[Path]:
    """Eval loss against simulated time and against updates, one line per run that has losses
    (a timing-only run has none), and the target loss as a horizontal line; no figure when no
    run has losses. Both x axes are linear: a log axis drops update 0 and squeezes the late
    updates into what looks like a plateau.

    A group of runs that differ only by seed (:class:`fred.tools.seeds.SeedGroup`) is one line,
    the mean of its runs' curves, in a band from the least to the greatest of them."""
    with_losses = [r for r in results if any(run.metrics["eval_loss"].notna().any() for run in _runs(r))]
    if not with_losses:
        return []
    written = []
    for x, stem, xlabel in [
        ("sim_time_s", "loss_vs_time", "simulated time (s)"),
        ("updates", "loss_vs_updates", "updates"),
    ]:
        fig = Figure(figsize=(7, 4.5))
        ax = fig.subplots()
        for i, r in enumerate(with_losses):
            if len(_runs(r)) > 1:
                _band(ax, r, x, _line_style(i))
            else:
                run = _runs(r)[0]
                ax.plot(
                    run.metrics[x], run.metrics["eval_loss"], marker=".", label=_label(r), **_line_style(i)
                )
        finish_loss_axes(ax, with_losses, target_loss, xlabel, f"{LOSS_LOG} vs {xlabel}")
        written += _saved(fig, out, stem, svg)
    return written


def finish_loss_axes(ax, with_losses: Sequence, target_loss: float | None, xlabel: str, title: str) -> None:
    """What every loss figure draws besides its lines: the seeds' band in the legend (said once,
    beside the lines), the target loss, the data's loss floor, a log y axis with plain labels,
    and the legend beside the axes, never over a curve."""
    if any(len(_runs(r)) > 1 for r in with_losses):
        ax.fill_between(
            [],
            [],
            [],
            color="0.5",
            alpha=BAND_ALPHA,
            linewidth=0,
            label="band: least to greatest of the seeds",
        )
    if target_loss is not None:
        ax.axhline(
            target_loss,
            color="0.25",
            linestyle=(0, (5, 3)),
            linewidth=1,
            label=f"target loss {target_loss:g}",
        )
    _loss_floor(ax, with_losses)
    ax.set(xlabel=xlabel, ylabel="eval loss", yscale="log", title=title)
    ax.set_xlim(left=0)
    _plain_log_labels(ax.yaxis)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))


BAND_ALPHA = 0.2
LOSS_LOG = "eval loss (log scale)"  # the title says the y axis is logarithmic, above the labels that show it


def _loss_floor(ax, results: Sequence) -> None:
    """The runs' data's loss floor (summary ``data_loss_floor``: the least expected loss of any
    model, synthetic tokens'), dotted: a line where the runs share one, else a band from the least
    to the greatest (each seed draws its own chain). A floor of 0 has no place on the log axis."""
    floors = [run.summary.get("data_loss_floor") for r in results for run in _runs(r)]
    floors = sorted({f for f in floors if isinstance(f, (int, float)) and f > 0})
    if len(floors) == 1:
        ax.axhline(
            floors[0],
            color="0.4",
            linestyle=":",
            linewidth=1.2,
            label=f"loss floor {floors[0]:.4g} (the data's)",
        )
    elif floors:
        ax.axhspan(
            floors[0],
            floors[-1],
            color="0.4",
            alpha=BAND_ALPHA,
            linewidth=0,
            label=f"loss floors {floors[0]:.4g} to {floors[-1]:.4g} (the runs' data)",
        )


def _band(ax, group, x: str, style: dict[str, str]) -> None:
    """A group's mean curve, and its seeds' range as a band of the line's colour."""
    grid, mean, low, high = band(group.runs, x)
    ax.plot(grid, mean, label=f"{_label(group)}: mean of {len(group.runs)} seeds", **style)
    ax.fill_between(grid, low, high, color=style["color"], alpha=BAND_ALPHA, linewidth=0)


MANTISSAS = ((1,), (1, 2, 5), (1, 2, 3, 5), tuple(range(1, 10)))  # labels in a decade, coarsest first
MIN_LOG_LABELS = 3


def _plain_log_labels(axis) -> None:
    """A log axis labelled 0.2, 0.3, 0.5, 1, 2 rather than 2×10⁻¹, with at least :data:`MIN_LOG_LABELS`
    labels in sight, where a loss that moves within a decade (1.5 to 2.3) would get one, or none. Within
    less than a decade's steps the labels are a linear axis's (2.15, 2.2, 2.25, 2.3). Call it once the
    axis's data are drawn: the labels are chosen for its limits."""
    low, high = sorted(axis.get_view_interval())
    if not 0 < low < high:
        return
    decades = range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1)
    for mantissas in MANTISSAS:
        ticks = [t for t in (round(m * 10.0**d, 12) for d in decades for m in mantissas) if low <= t <= high]
        if len(ticks) >= MIN_LOG_LABELS:
            break
    else:
        linear = MaxNLocator(nbins=5, steps=[1, 2, 2.5, 5, 10]).tick_values(low, high)
        ticks = [t for t in linear if low <= t <= high]
    axis.set_major_locator(FixedLocator(ticks))
    axis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}"))
    axis.set_minor_formatter(NullFormatter())


LINE_STYLES = ("-", "--", ":", "-.")


def _line_style(i: int) -> dict[str, str]:
    """The i-th run's colour and dashes: 40 runs told apart (matplotlib's colours repeat after ten,
    and a sweep's comparison easily has more)."""
    return {"color": f"C{i % 10}", "linestyle": LINE_STYLES[(i // 10) % len(LINE_STYLES)]}


HISTOGRAMS_PER_ROW = 3
ONE_HISTOGRAM_IN = (10.0, 4.5)  # one run's: as wide as its timeline (10 in), which it is looked at beside
HISTOGRAM_IN = (5.0, 3.6)  # each of several runs': 3 to a row is a figure 15 in (1,500 px) wide


def staleness_histograms(results: Sequence, out: Path, svg: bool = True) -> list[Path]:
    """One staleness histogram per run, three to a row (one row of 190 runs' would make a PNG
    66,000 px wide), each large enough to read beside the timeline (3.5 x 3.2 in, 340 x 290 px,
    is too small); one run's as wide as its timeline. A group of runs that differ only by seed has one:
    the mean count per seed, and whiskers from the least to the greatest seed's. The mean and
    the max are said in a legend where it covers fewest bars."""
    columns = max(1, min(len(results), HISTOGRAMS_PER_ROW))
    rows = -(-len(results) // columns)
    width_in, height_in = ONE_HISTOGRAM_IN if len(results) == 1 else HISTOGRAM_IN
    fig = Figure(figsize=(width_in * columns, height_in * rows))
    axes = fig.subplots(rows, columns, squeeze=False)
    for ax in axes.flat[len(results) :]:
        ax.set_visible(False)
    for ax, r in zip(axes.flat, results):
        runs = _runs(r)
        if len(runs) > 1:
            _staleness_over_seeds(ax, [run.updates["staleness"].to_numpy(dtype=float) for run in runs])
            title = f"{_label(r)}, {len(runs)} seeds"
        else:
            _staleness_histogram(ax, runs[0].updates["staleness"].to_numpy(dtype=float))
            title = _label(r)
        ax.set_title(
            textwrap.fill(title, 60 if len(results) == 1 else 50), fontsize=11
        )  # side by side: no overlap
        ax.tick_params(labelsize=10)
        ax.xaxis.label.set_size(11)
        ax.yaxis.label.set_size(11)
    fig.tight_layout()
    return _saved(fig, out, "staleness", svg)


def _staleness_histogram(ax, staleness: np.ndarray) -> None:
    """Staleness is a whole number of versions: one bar per value, centred on it (edges at
    k - 0.5), so SSGD's all-zero staleness is one bar at 0, not a bar spanning 0 to 1; the
    mean and the max in the legend."""
    ax.set(xlabel="staleness (model versions behind)", ylabel="gradients applied")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if not len(staleness):
        ax.text(0.5, 0.5, "no gradients applied", transform=ax.transAxes, ha="center", va="center")
        return
    top = int(staleness.max())
    ax.hist(
        staleness,
        bins=np.arange(-0.5, top + 1.5),
        rwidth=0.85,
        color=COLOURS["compute"],
        label=f"mean {staleness.mean():.2f}, max {top}",
    )
    ax.set_xlim(-0.75, max(top, 4) + 0.75)  # a lone bar at 0 stays a bar, not the whole panel
    _said(ax)


def _said(ax) -> None:
    """The legend of a staleness panel, where it covers the fewest bars (text at a fixed corner
    covers the bars that reach that corner)."""
    ax.legend(loc="best", fontsize=9, handlelength=1, framealpha=0.9)


def _staleness_over_seeds(ax, per_seed: list[np.ndarray]) -> None:
    """The seeds' staleness histograms as one: bars of the mean count per seed, whiskers from
    the least seed's count to the greatest's; the legend says the mean and max over all the
    seeds' gradients, and what the whiskers are."""
    ax.set(xlabel="staleness (model versions behind)", ylabel="gradients applied, mean per seed")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    pooled = np.concatenate(per_seed)
    if not len(pooled):
        ax.text(0.5, 0.5, "no gradients applied", transform=ax.transAxes, ha="center", va="center")
        return
    top = int(pooled.max())
    values = np.arange(top + 1)
    counts = np.array([np.bincount(s.astype(int), minlength=top + 1) for s in per_seed])
    mean = counts.mean(axis=0)
    ax.bar(values, mean, width=0.85, color=COLOURS["compute"], label=f"mean {pooled.mean():.2f}, max {top}")
    ax.errorbar(
        values,
        mean,
        yerr=[mean - counts.min(axis=0), counts.max(axis=0) - mean],
        fmt="none",
        ecolor="0.2",
        elinewidth=1,
        capsize=2,
        label="least to greatest seed",
    )
    ax.set_xlim(-0.75, max(top, 4) + 0.75)
    _said(ax)
