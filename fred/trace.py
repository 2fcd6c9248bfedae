"""Export a run's event timeline in the Chrome trace-event format (Perfetto, chrome://tracing).

Process 1 holds one track per entity (workers, servers): every row of ``events.parquet``
becomes exactly one event there, a complete event (``"ph": "X"``) with microsecond
timestamps, or an instant (``"ph": "i"``) when it takes no time. Process 2 repeats each
point-to-point transfer on the track of the link it used (``worker3 -> server``), so link
contention can be seen at a glance.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from fred.paths import output_file


def track_ids(entities: list[str]) -> dict[str, int]:
    """Stable thread ids: workers by index, then everything else by name."""
    def key(name: str) -> tuple[int, int | str]:
        suffix = name.removeprefix("worker")
        return (0, int(suffix)) if name.startswith("worker") and suffix.isdigit() else (1, name)

    return {name: i + 1 for i, name in enumerate(sorted(set(entities), key=key))}


def trace_events(events: pd.DataFrame) -> list[dict[str, Any]]:
    """The trace-event list for an events table: one entry per row, plus track names.

    Rows are recorded when activities end; within each track they are ordered here by start.
    """
    tids = track_ids(events["entity"].tolist())
    events = events.assign(_tid=events["entity"].map(tids)).sort_values(["_tid", "start_s"], kind="stable")
    out: list[dict[str, Any]] = [
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": tid, "args": {"name": name}} for name, tid in tids.items()
    ]
    links = sorted({f"{r.entity} -> {r.peer}" for r in events.itertuples(index=False) if r.peer})
    link_tids = {name: i + 1 for i, name in enumerate(links)}
    out += [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "entities"}},
            {"ph": "M", "name": "process_name", "pid": 2, "tid": 0, "args": {"name": "links"}}]
    out += [{"ph": "M", "name": "thread_name", "pid": 2, "tid": tid, "args": {"name": name}} for name, tid in link_tids.items()]
    copies = []
    for row in events.itertuples(index=False):
        base = {
            "name": row.kind,
            "cat": row.kind,
            "pid": 1,
            "tid": tids[row.entity],
            "ts": row.start_s * 1e6,
            "args": {"bytes": row.bytes, "peer": row.peer},
        }
        if row.end_s > row.start_s:
            event = {**base, "ph": "X", "dur": (row.end_s - row.start_s) * 1e6}
        else:
            event = {**base, "ph": "i", "s": "t"}
        out.append(event)
        if row.peer:
            copies.append({**event, "pid": 2, "tid": link_tids[f"{row.entity} -> {row.peer}"]})
    return out + sorted(copies, key=lambda e: (e["tid"], e["ts"]))


def write_trace(events: pd.DataFrame, path: str | Path) -> Path:
    """Write the trace-event JSON to ``path``; to ``path/trace.json`` when ``path`` is a directory."""
    path = output_file(path, "trace.json")
    path.write_text(json.dumps({"traceEvents": trace_events(events), "displayTimeUnit": "ms"}))
    return path
