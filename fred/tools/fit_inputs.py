"""What ``fred fit`` reads: the measurements CSV (``scenario,measured_s``), ``--fit`` (the constants
to fit, as ``--set`` names them, each with the plausible range it is held to) and ``--holdout``
(the rows predicted but not fitted on)."""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from fred.scenario.loading import ScenarioError
from fred.scenario.yaml_reading import read_text, shown

COLUMNS = ("scenario", "measured_s")


class Bound(NamedTuple):
    """The values of a constant a real system has, and what lies outside them."""

    low: float
    high: float
    reading: str


PLAUSIBLE: dict[str, Bound] = {  # a fitted value outside is a warning: the model is missing something
    "latency_s": Bound(
        0.0, 1e-3, "per-message latency: above 1 ms is a wide-area link, not a datacenter one"
    ),
    "bandwidth_bps": Bound(
        1.25e6, 50e9, "bytes per second: 10 Mbit/s to 400 Gbit/s, the slowest and fastest links in use"
    ),
    "efficiency": Bound(0.0, 1.0, "share of the line rate the transport reaches: in (0, 1]"),
    "host_overhead_s": Bound(
        0.0, 1.0, "host time per step (framework, copies, data loading): above 1 s is not overhead"
    ),
}
LINKS = (
    "network.",
    "network.server.",
)  # the links between machines (a node's own links, NVLink say, are faster)


def bound_for(path: str) -> Bound | None:
    """The plausible range of the constant at ``path``, if :data:`PLAUSIBLE` has one."""
    if path == "cluster.compute.host_overhead_s":
        return PLAUSIBLE["host_overhead_s"]
    head, _, name = path.rpartition(".")
    return PLAUSIBLE.get(name) if f"{head}." in LINKS and name != "host_overhead_s" else None


# ----------------------------------------------------------------------------- input
@dataclass(frozen=True)
class Row:
    """One measurement: the CSV's data row ``number`` (1 is the first after the header)."""

    number: int
    label: str  # the scenario as the CSV names it
    path: Path
    measured_s: float
    held_out: bool = False


def read_measurements(csv_path: str | Path) -> list[Row]:
    """The CSV's rows, each checked: a scenario file that exists and a positive, finite time."""
    source = str(csv_path)
    if not str(csv_path).strip():
        raise ScenarioError(
            ["the measurements file is ''; give a CSV with columns scenario,measured_s"], "fred fit"
        )
    try:
        text = read_text(csv_path)
    except ValueError as err:
        raise ScenarioError([f"{err}; give a CSV with columns scenario,measured_s"], source) from None
    reader = csv.DictReader(io.StringIO(text))
    header = [
        name.strip().lstrip("\ufeff") for name in reader.fieldnames or []
    ]  # a spreadsheet's byte-order mark
    missing = [c for c in COLUMNS if c not in header]
    if missing:
        raise ScenarioError(
            [
                f"no {' or '.join(missing)} column (the header is {shown(','.join(header))}); "
                "the first line names the columns: scenario,measured_s"
            ],
            source,
        )
    reader.fieldnames = header
    folder = Path(csv_path).parent
    rows, problems = [], []
    for number, record in enumerate(reader, start=1):
        label, raw = (record.get("scenario") or "").strip(), (record.get("measured_s") or "").strip()
        where = f"row {number} ({label or 'no scenario'})"
        path = folder / label
        if not label:
            problems.append(
                f"{where}: the scenario is empty; give a scenario file, relative to {folder}/ or absolute"
            )
        elif not path.is_file():
            problems.append(
                f"{where}: no such file: {path}; a scenario path is relative to the CSV's folder ({folder}/) "
                "or absolute"
            )
        measured = _seconds(raw)
        if measured is None:
            problems.append(
                f"{where}: measured_s is {shown(raw)}; give the measured seconds per iteration, a positive "
                "number"
            )
        rows.append(Row(number, label, path, measured or math.nan))
    if not rows and not problems:
        problems.append("no rows under the header; give one row per measured scenario: scenario,measured_s")
    if problems:
        raise ScenarioError(problems, source)
    return rows


def _seconds(text: str) -> float | None:
    """``text`` as a positive, finite number of seconds, or None."""
    try:
        value = float(text)
    except ValueError:
        return None
    return value if 0 < value < math.inf else None


def parse_fit(spec: str) -> dict[str, float | None]:
    """``network.bandwidth_bps,cluster.compute.host_overhead_s=1e-3``: each path, and the
    value to start from where one is given (else the scenarios' own)."""
    paths: dict[str, float | None] = {}
    for item in (part.strip() for part in spec.split(",")):
        path, eq, raw = (p.strip() for p in item.partition("="))
        if not path or any(not key for key in path.split(".")):
            raise ScenarioError(
                [
                    f"--fit {shown(spec)}: give comma-separated dotted paths, e.g. "
                    "--fit network.bandwidth_bps,network.latency_s"
                ],
                "--fit",
            )
        if path in paths:
            raise ScenarioError([f"--fit: {path} is named twice; name each constant once"], "--fit")
        start = _seconds(raw) if eq else None
        if eq and start is None:
            raise ScenarioError(
                [
                    f"--fit {item}: the start {shown(raw)} is not a positive number; give one, "
                    f"e.g. {path}=1e-3, or leave =... out to start from the scenarios' value"
                ],
                "--fit",
            )
        paths[path] = start
    return paths


def parse_holdout(spec: str, rows: list[Row]) -> list[Row]:
    """``rows`` with those named in ``spec`` held out: a row's number or a scenario as the CSV names it."""
    held: list[int] = []
    for item in (part.strip() for part in spec.split(",") if part.strip()):
        hits = [r.number for r in rows if (item.isdigit() and int(item) == r.number) or item == r.label]
        if not hits:
            raise ScenarioError(
                [
                    f"--holdout {item}: no such row; give row numbers 1..{len(rows)} (1 is the first "
                    "row under the header) or scenarios as the CSV names them"
                ],
                "--holdout",
            )
        held += hits
    return [Row(r.number, r.label, r.path, r.measured_s, r.number in held) for r in rows]
