"""The per-worker timeline of a run: a row a worker (or link), a bar an activity, coloured by
what it does (compute, communication, waiting), with each row's shares of its time.

Like every figure of :mod:`fred.tools.plots`, it is made as a :class:`matplotlib.figure.Figure`,
without pyplot, and written as PNG (and SVG on request).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from matplotlib.transforms import ScaledTranslation, blended_transform_factory

from fred.scenario.errors import Refusal
from fred.tools.figure_common import _label, _saved
from fred.tools.timeline_rows import SLOW, chosen, mean_steps, worker_number

COMMUNICATION = {
    "push",
    "fetch",
    "send",
    "allreduce",
    "allgather",
    "reduce_scatter",
    "lost",
}  # a lost transfer was on the wire too
# Drawing order: "other" first, underneath, as it holds conditions (a degraded link, a worker
# left out) that span activities; drawn last it would hide every compute and push inside them.
DRAWN = ("other", "compute", "communicate", "wide_area", "wait")
COLOURS = {
    "compute": "#4C72B0",
    "communicate": "#DD8452",
    "wide_area": "#8172B3",
    "wait": "#B0B0B0",
    "other": "#55A868",
}
LEGEND = {
    "compute": "compute",
    "communicate": "communication",
    "wide_area": "wide-area transfer (between sites)",
    "wait": "waiting",
    "other": "other",
}
OTHERS_NAMED = 4  # the kinds of event the legend's "other" names


MAX_EVENTS = 20_000  # more in the window, and each row shows shares per pixel column instead of single bars


def timeline(
    result,
    out: Path,
    start_s: float | None = None,
    end_s: float | None = None,
    max_events: int = MAX_EVENTS,
    workers: Sequence[int] | None = None,
    svg: bool = True,
) -> list[Path]:
    """A Gantt chart, one row per entity: compute, communication and waiting over simulated time,
    between ``start_s`` and ``end_s`` (default: the whole run). Of a run of many workers it draws
    a few (:mod:`fred.tools.timeline_rows`), or the ``workers`` given by number.

    Up to ``max_events`` events in the window are drawn one by one, each at least a pixel wide;
    beyond that each row shows, per pixel column, the share of time in each activity. A row whose
    activities overlap in time is split into a thin bar per activity, so that every one shows.
    Each row says its shares of the window and its mean compute step; a worker whose steps are
    much longer is marked.
    """
    start_s, end_s = timeline_window(result.events, start_s, end_s)
    everyone = timeline_entities(result.events)
    steps = mean_steps(_in_window(result.events, everyone, start_s, end_s), everyone)
    entities, picked = chosen(everyone, steps, None if workers is None else list(workers))
    events = result.events if picked is None else result.events[result.events["entity"].isin(entities)]
    shown = _in_window(events, entities, start_s, end_s)
    split = split_rows(shown, end_s - start_s)
    fig = Figure(figsize=(10, 0.35 * len(entities) + 2.0))
    ax = fig.subplots()
    ax.set_xlim(start_s, end_s)
    columns = _pixel_columns(fig, ax)
    aggregated = len(shown) > max_events
    if aggregated:
        _draw_shares(ax, shown, np.linspace(start_s, end_s, columns + 1), split)
    else:
        _draw_bars(ax, shown, (end_s - start_s) / columns, split)
    ax.set(
        yticks=range(len(entities)),
        yticklabels=entities,
        ylim=(-0.6, len(entities) - 0.4),
        xlabel="simulated time (s)",
    )
    if picked is not None:
        _gaps(ax, entities)
    _annotate_rows(ax, shown, end_s - start_s, bool(split), float(steps.median()) if len(steps) else math.nan)
    subtitle = _subtitle(
        result.events, shown, start_s, end_s, aggregated, columns, len(split), picked is not None
    )
    ax.set_title(f"{_label(result)}\n{subtitle}" + (f"\n{picked}" if picked else ""), fontsize=10)
    _legend(fig, ax, shown)
    return _saved(fig, out, "timeline", svg)


def _gaps(ax, entities: list[str]) -> None:
    """A dotted line between two rows of workers whose numbers are not consecutive: workers not drawn."""
    numbers = [worker_number(e) for e in entities]
    for row in range(1, len(numbers)):
        if numbers[row] is not None and numbers[row - 1] is not None and numbers[row] != numbers[row - 1] + 1:
            ax.axhline(row - 0.5, color="0.45", linestyle=":", linewidth=1)


def timeline_window(
    events: pd.DataFrame,
    start_s: float | None,
    end_s: float | None,
    names: tuple[str, str] = ("start_s", "end_s"),
) -> tuple[float, float]:
    """The timeline's window in simulated seconds, checked; ``names`` are what the caller calls
    the two edges (``--from``, ``--to`` on the command line), for the error messages."""
    for name, value in zip(names, (start_s, end_s)):
        if value is not None and not (math.isfinite(value) and value >= 0):
            raise Refusal(
                f"{name} {value:g}: a window edge is a time in simulated seconds, finite and 0 or more; "
                f"give one such as {name} 0.5"
            )
    last = float(events["end_s"].max()) if len(events) else 0.0
    if start_s is not None and start_s >= last:
        raise Refusal(
            f"{names[0]} {start_s:g}: the run's last event ends at {last:.6g} s; give a start before that"
        )
    start = 0.0 if start_s is None else start_s
    end = (
        end_s if end_s is not None else (last if last > start else start + 1.0)
    )  # a run without events: any window
    if start >= end:
        raise Refusal(
            f"{names[0]} {start:g} {names[1]} {end:g}: the window must start before it ends; "
            f"give a {names[0]} smaller than {names[1]}"
        )
    return start, end


def timeline_entities(events: pd.DataFrame) -> list[str]:
    """Workers first, in number order, then servers and the rest: every entity of the run, so a
    window where one is idle still shows its row."""
    return sorted(set(events["entity"]), key=lambda e: (not e.startswith("worker"), len(e), e))


def _group(kinds: np.ndarray) -> np.ndarray:
    """Each event's kind as compute, communicate, wide_area (a transfer between sites), wait or
    other (faults, dropped messages, compression, ...)."""
    grouped = np.full(len(kinds), "other", dtype=object)
    grouped[np.isin(kinds, list(COMMUNICATION))] = "communicate"
    for same in ("compute", "wait", "wide_area"):
        grouped[kinds == same] = same
    grouped[kinds == "host"] = "compute"  # a step's host part, off a shared device
    return grouped


def _in_window(events: pd.DataFrame, entities: list[str], start_s: float, end_s: float) -> pd.DataFrame:
    """The events that touch the window, cut to it: row (the entity's), group, start, end and
    length (the event's whole duration, for the mean step)."""
    start, end = events["start_s"].to_numpy(dtype=float), events["end_s"].to_numpy(dtype=float)
    inside = (end >= start_s) & (start <= end_s)
    rows = pd.Categorical(events["entity"].astype(str).to_numpy()[inside], categories=entities).codes
    return pd.DataFrame(
        {
            "row": rows,
            "kind": events["kind"].astype(str).to_numpy()[inside],
            "group": _group(events["kind"].astype(str).to_numpy()[inside]),
            "start": np.maximum(start[inside], start_s),
            "end": np.minimum(end[inside], end_s),
            "length": end[inside] - start[inside],
            "step": events["kind"].astype(str).to_numpy()[inside]
            == "compute",  # a host part is not a step of its own
        }
    )


def _pixel_columns(fig, ax) -> int:
    """How many pixel columns the axes span in the PNG (the SVG is drawn the same)."""
    return max(1, int(ax.get_position().width * fig.get_figwidth() * fig.dpi))


def _merged(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of the spans ``[starts, ends)`` as disjoint spans in time order (spans without
    duration dropped): the time in which at least one of them is going on."""
    keep = ends > starts
    order = np.argsort(starts[keep], kind="stable")
    starts, ends = starts[keep][order], ends[keep][order]
    if not len(starts):
        return starts, ends
    reach = np.maximum.accumulate(ends)
    first = np.flatnonzero(np.concatenate([[True], starts[1:] > reach[:-1]]))
    return starts[first], np.maximum.reduceat(ends, first)


def _busy_s(spans: pd.DataFrame) -> float:
    """Seconds in which at least one of ``spans`` is going on (two concurrent pushes count once)."""
    starts, ends = _merged(spans["start"].to_numpy(dtype=float), spans["end"].to_numpy(dtype=float))
    return float((ends - starts).sum())


def split_rows(shown: pd.DataFrame, window_s: float) -> dict[int, list[str]]:
    """The rows in which activities of different kinds overlap in time (Pipe-SGD computes while
    its all-reduce runs and waits for it; HPSGD trains while it synchronises), each with the
    kinds it has: such a row is drawn as a thin bar per kind, one above the other, since one bar
    would show only the kind drawn last."""
    split = {}
    for row, mine in shown.groupby("row"):
        apart = sum(_busy_s(spans) for _, spans in mine.groupby("group"))
        if apart - _busy_s(mine) > 1e-9 * window_s:
            split[int(row)] = [g for g in COLOURS if (mine["group"] == g).any()]
    return split


def _lane(row: int, group: str, split: dict[int, list[str]]) -> tuple[float, float]:
    """Bottom and height of ``group``'s bar in ``row``: the whole row, or in a split row its
    kind's lane (compute on top), a little apart from the next."""
    if row not in split:
        return row - 0.4, 0.8
    kinds = split[row]
    height = 0.8 / len(kinds)
    return row + 0.4 - (kinds.index(group) + 1) * height + 0.05 * height, 0.9 * height


def _draw_bars(ax, shown: pd.DataFrame, pixel_s: float, split: dict[int, list[str]]) -> None:
    """Each event its own bar, at least a pixel wide: a 60 µs push in a 2 s run is otherwise
    narrower than a pixel, and is not drawn at all."""
    for row, mine in shown.groupby("row"):
        for group in DRAWN:
            picked = mine[mine["group"] == group]
            start, width = picked["start"].to_numpy(), (picked["end"] - picked["start"]).to_numpy()
            spans = np.column_stack([start[width > 0], np.maximum(width[width > 0], pixel_s)])
            bottom, height = _lane(row, group, split) if len(picked) else (0.0, 0.0)
            if len(spans):
                # no edges: each span's 1-px outline painted a long run's many short pushes over its compute
                ax.broken_barh(spans, (bottom, height), color=COLOURS[group], linewidth=0)
            _draw_instants(ax, start[width == 0], bottom + height / 2, group, row in split)


def _draw_instants(ax, times: np.ndarray, y: float, group: str, thin: bool = False) -> None:
    """Events without duration (a crash; every event on the logical clock): a tick, not a bar."""
    if len(times):
        ax.plot(
            times,
            np.full(len(times), y),
            linestyle="none",
            marker="|",
            markersize=4 if thin else 9,
            color=COLOURS[group],
        )


def _draw_shares(ax, shown: pd.DataFrame, edges: np.ndarray, split: dict[int, list[str]]) -> None:
    """Each row as shares per pixel column: the part of the column's time spent in each activity
    (two concurrent pushes count once), stacked with compute at the bottom; in a split row each
    kind fills its own lane to its share."""
    seconds = np.diff(edges)
    for row, mine in shown.groupby("row"):
        spans = {g: mine[mine["group"] == g] for g in COLOURS}
        shares = {
            g: _covered(
                *_merged(spans[g]["start"].to_numpy(dtype=float), spans[g]["end"].to_numpy(dtype=float)),
                edges,
            )
            / seconds
            for g in COLOURS
        }
        scale = np.maximum(1.0, sum(shares.values()))  # only rounding takes an unsplit row's sum past 1
        bottom = np.zeros(len(seconds))
        for group, share in shares.items():
            if row in split:
                if share.any():
                    low, height = _lane(row, group, split)
                    ax.fill_between(
                        edges,
                        low,
                        _stepped(low + height * share),
                        step="post",
                        color=COLOURS[group],
                        linewidth=0,
                    )
                continue
            top = bottom + share / scale
            if share.any():
                ax.fill_between(
                    edges,
                    _stepped(row - 0.4 + 0.8 * bottom),
                    _stepped(row - 0.4 + 0.8 * top),
                    step="post",
                    color=COLOURS[group],
                    linewidth=0,
                )
            bottom = top
        for group, picked in spans.items():  # one tick per column that has any, not one per event
            instants = picked.loc[picked["start"] == picked["end"], "start"].to_numpy()
            at = np.unique(np.searchsorted(edges, instants, side="right").clip(1, len(seconds)))
            if len(at):
                low, height = _lane(row, group, split)
                _draw_instants(ax, (edges[at - 1] + edges[at]) / 2, low + height / 2, group, row in split)


def _stepped(values: np.ndarray) -> np.ndarray:
    """Per-column values for fill_between(step="post"), which needs one more, at the last edge."""
    return np.append(values, values[-1])


def _covered(starts: np.ndarray, ends: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Seconds of the spans ``[starts, ends)`` inside each column between ``edges``, without a loop
    over spans: covered(t) = sum over spans begun before t of (t - start) less the same over spans
    ended before t, differenced at the edges."""
    if not len(starts):
        return np.zeros(len(edges) - 1)
    before = np.zeros(len(edges))
    for times, sign in ((np.sort(starts), 1.0), (np.sort(ends), -1.0)):
        count = np.searchsorted(times, edges, side="right")
        summed = np.concatenate([[0.0], np.cumsum(times)])[count]
        before += sign * (count * edges - summed)
    return np.diff(before)


SHARES = (
    ("compute", "compute"),
    ("communicate", "comm"),
    ("wait", "wait"),
)  # said beside each row, as named there


def _annotate_rows(ax, shown: pd.DataFrame, window_s: float, overlapping: bool, median: float) -> None:
    """Beside each row, its share of the window in each activity and its mean compute step;
    a row whose steps are much longer than ``median`` (every worker's, drawn or not) is marked,
    label and all. A share is the
    part of the window in which the row does that at all (two concurrent pushes count once);
    where activities overlap, each counts, and the shares may add up to more than 100 %, which
    a heading over them says."""
    durations = {key: _busy_s(spans) for key, spans in shown.groupby(["row", "group"])}
    computes = shown[shown["step"] & (shown["length"] > 0)].groupby("row")["length"]
    steps, counts = computes.mean(), computes.size()
    at = blended_transform_factory(ax.transAxes, ax.transData)
    events = shown["row"].value_counts()
    for row, label in enumerate(ax.get_yticklabels()):
        shares = {name: durations.get((row, group), 0.0) / window_s for group, name in SHARES}
        parts = [f"{share:.0%} {name}" for name, share in shares.items() if share >= 0.005]
        text = " · ".join(parts) or (
            _events_without_duration(events.get(row, 0)) if row in events.index else "idle"
        )
        if row in steps.index:
            text += f" | {counts[row]:,} step{'s' if counts[row] != 1 else ''} of {_duration(steps[row])}"
            if steps[row] > SLOW * median:
                text += f", {steps[row] / median:.1f}× the median"
                label.set(fontweight="bold", color="#B22222")
        ax.text(1.01, row, text, transform=at, va="center", fontsize=7)
    heading = "share of the window spent in each activity"
    if overlapping:
        heading += ",\neach counted where they overlap (sums may pass 100%)"
    ax.text(1.01, 1.01, heading, transform=ax.transAxes, va="bottom", fontsize=7, style="italic")


def _events_without_duration(count: int) -> str:
    return f"{count:,} event{'s' if count != 1 else ''} without duration"


def _duration(seconds: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def _subtitle(
    events: pd.DataFrame,
    shown: pd.DataFrame,
    start_s: float,
    end_s: float,
    aggregated: bool,
    columns: int,
    split: int,
    subset: bool = False,
) -> str:
    """What the chart shows of the run: the window, how the events in it are drawn (of the rows
    drawn, with ``subset``), and how many rows are split because their activities overlap."""
    counted = f"{len(shown):,} events" + (" in the rows drawn" if subset else "")
    last = float(events["end_s"].max()) if len(events) else 0.0
    window = (
        f"{start_s:.4g} to {end_s:.4g} s of {last:.4g} s"
        if (start_s, end_s) != (0.0, last)
        else f"the whole run, {last:.4g} s"
    )
    if aggregated:
        text = (
            f"{window}: {counted}, too many to draw one by one, aggregated:\n"
            f"each row shows, per {_duration((end_s - start_s) / columns)} column, the share of it spent in "
            "each activity"
        )
    else:
        text = (
            f"{window}: {counted}; a bar narrower than a pixel is drawn one pixel wide\n"
            "(the shares beside the rows are exact)"
        )
    if split:
        rows = "1 row whose activities overlap" if split == 1 else f"{split} rows whose activities overlap"
        text += f"\n{rows} in time: a thin bar per activity, one above the other"
    return text


def _legend(fig, ax, shown: pd.DataFrame) -> None:
    """The colours, in a row under the axis label (beside the axes stand the rows' shares);
    wide-area transfers and "other" only where the run has such events, "other" with the kinds
    of event it holds."""
    groups = [g for g in COLOURS if g in ("compute", "communicate", "wait") or (shown["group"] == g).any()]
    handles = [Rectangle((0, 0), 1, 1, color=COLOURS[g]) for g in groups]
    labels = [_other_label(shown) if g == "other" else LEGEND[g] for g in groups]
    below = ax.transAxes + ScaledTranslation(0, -0.45, fig.dpi_scale_trans)
    ax.legend(
        handles,
        labels,
        loc="upper center",
        bbox_to_anchor=(0.5, 0.0),
        bbox_transform=below,
        ncol=len(groups),
        fontsize=8,
        frameon=False,
    )


def _other_label(shown: pd.DataFrame) -> str:
    """``other`` in the legend, with the kinds of event it holds: ``other (crash, lost)``."""
    kinds = shown.loc[shown["group"] == "other", "kind"].value_counts().index.tolist()
    more = len(kinds) - OTHERS_NAMED
    named = ", ".join(kinds[:OTHERS_NAMED]) + (f" and {more} more" if more > 0 else "")
    return f"{LEGEND['other']} ({named})"
