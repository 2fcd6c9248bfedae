"""Export a run's event timeline in the Chrome trace-event format (Perfetto, chrome://tracing).

Process 1 holds a track per entity (workers, servers), more where its activities overlap,
since Perfetto draws only slices that nest: every row of ``events.parquet`` becomes exactly
one event there, a complete event (``"ph": "X"``) with microsecond
timestamps, or an instant (``"ph": "i"``) when it takes no time. Process 2 repeats each
point-to-point transfer on the track of the link it used (``worker3 -> server``), so link
contention can be seen at a glance.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pandas as pd

from fred.runs.paths import output_file, write_whole


def track_ids(entities: list[str]) -> dict[str, int]:
    """Stable thread ids: workers by index, then everything else by name."""

    def key(name: str) -> tuple[int, int | str]:
        suffix = name.removeprefix("worker")
        return (0, int(suffix)) if name.startswith("worker") and suffix.isdigit() else (1, name)

    return {name: i + 1 for i, name in enumerate(sorted(set(entities), key=key))}


def lanes(starts: list[float], ends: list[float]) -> list[int]:
    """A lane per activity, the first whose last activity has ended by its start (inputs by start).

    Perfetto shows slices on one track only when they nest; an entity's overlapping activities
    (HPSGD's training and synchronisation, a server's concurrent transfers) cross instead.
    """
    last_end: list[float] = []
    out = []
    for start_s, end_s in zip(starts, ends):
        lane = next((i for i, e in enumerate(last_end) if e <= start_s), len(last_end))
        if lane == len(last_end):
            last_end.append(end_s)
        else:
            last_end[lane] = end_s
        out.append(lane)
    return out


def _tracks(names: list[str], lane_of: list[int], order: dict[str, int]) -> dict[tuple[str, int], int]:
    """Thread ids for (name, lane): names in ``order``, each name's lanes after it."""
    keys = sorted(set(zip(names, lane_of)), key=lambda k: (order[k[0]], k[1]))
    return {key: i + 1 for i, key in enumerate(keys)}


def _track_names(tids: dict[tuple[str, int], int], pid: int) -> list[dict[str, Any]]:
    return [
        {
            "ph": "M",
            "name": "thread_name",
            "pid": pid,
            "tid": tid,
            "args": {"name": name if lane == 0 else f"{name} ({lane + 1})"},
        }
        for (name, lane), tid in tids.items()
    ]


def trace_events(events: pd.DataFrame) -> list[dict[str, Any]]:
    """The trace-event list for an events table: one entry per row, plus track names.

    Rows are recorded when activities end; within each track they are ordered here by start.
    An entity whose activities overlap gets more than one track (``worker0``, ``worker0 (2)``).
    """
    order = track_ids(events["entity"].tolist())
    events = events.assign(_order=events["entity"].map(order)).sort_values(
        ["_order", "start_s"], kind="stable"
    )
    entities = events["entity"].tolist()
    entity_lanes = _lanes_by(entities, events["start_s"].tolist(), events["end_s"].tolist())
    tids = _tracks(entities, entity_lanes, order)
    rows = list(events.itertuples(index=False))
    linked = [(r, f"{r.entity} -> {r.peer}") for r in rows if r.peer]
    link_order = {name: i for i, name in enumerate(sorted({name for _, name in linked}))}
    linked.sort(key=lambda item: (link_order[item[1]], item[0].start_s))
    link_names = [name for _, name in linked]
    link_lanes = _lanes_by(link_names, [r.start_s for r, _ in linked], [r.end_s for r, _ in linked])
    link_tids = _tracks(link_names, link_lanes, link_order)
    out = _track_names(tids, 1)
    out += [
        {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "entities"}},
        {"ph": "M", "name": "process_name", "pid": 2, "tid": 0, "args": {"name": "links"}},
    ]
    out += _track_names(link_tids, 2)
    for row, lane in zip(rows, entity_lanes):
        out.append(_event(row, 1, tids[(row.entity, lane)]))
    timed = [_event(row, 2, link_tids[(name, lane)]) for (row, name), lane in zip(linked, link_lanes)]
    return out + sorted(timed, key=lambda e: (e["tid"], e["ts"]))


def _lanes_by(names: list[str], starts: list[float], ends: list[float]) -> list[int]:
    """:func:`lanes` within each name (rows grouped by name, by start within each)."""
    out: list[int] = []
    for _, rows in itertools.groupby(zip(names, starts, ends), key=lambda row: row[0]):
        _, group_starts, group_ends = zip(*rows)
        out += lanes(list(group_starts), list(group_ends))
    return out


def _event(row: Any, pid: int, tid: int) -> dict[str, Any]:
    base = {
        "name": row.kind,
        "cat": row.kind,
        "pid": pid,
        "tid": tid,
        "ts": row.start_s * 1e6,
        "args": {"bytes": row.bytes, "peer": row.peer},
    }
    if row.end_s > row.start_s:
        return {**base, "ph": "X", "dur": (row.end_s - row.start_s) * 1e6}
    return {**base, "ph": "i", "s": "t"}


def write_trace(events: pd.DataFrame, path: str | Path) -> Path:
    """Write the trace-event JSON to ``path``; to ``path/trace.json`` when ``path`` is a directory."""
    path = output_file(path, "trace.json")
    text = json.dumps({"traceEvents": trace_events(events), "displayTimeUnit": "ms"})
    return write_whole(path, lambda partial: partial.write_text(text))
