"""Runs that differ only by their seed, taken as one: grouped, summarised as mean ± sd over the
seeds, and their loss curves as a mean line in a min-max band.

Two runs are of one group when their resolved scenarios are equal but for ``seed`` (and a name
that differs only by the seed's number in it: ``lr3-s0`` and ``lr3-s1``). A table row of a group
is the mean over its seeds of each number, its sample standard deviation (ddof 1) and how many
seeds had the number (a diverged seed has no final loss, a seed that never reached the target
loss no time to it).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from fred.runs.analysis import summary_row
from fred.scenario.errors import Refusal

if TYPE_CHECKING:
    from fred.runs.runner import RunResult

# The numbers of a comparison row that a group averages; the others say what the runs are.
AVERAGED = (
    "final_loss", "final_accuracy", "sim_time_s", "updates", "time_to_target_s", "updates_to_target",
    "bytes_sent",
    "staleness_mean", "staleness_p50", "staleness_p99",
)  # fmt: skip


def parse_seeds(text: str, flag: str = "--seeds") -> list[int]:
    """``"3"`` -> ``[0, 1, 2]`` (a count), ``"0,4,7"`` -> ``[0, 4, 7]`` (the seeds themselves)."""
    parts = [part.strip() for part in str(text).split(",")]
    fix = f"give how many seeds ({flag} 3 runs seeds 0, 1, 2) or the seeds themselves ({flag} 0,4,7)"
    if not all(re.fullmatch(r"\d+", part) for part in parts):
        raise Refusal(f"{flag} {text}: seeds are whole numbers, 0 or more; {fix}")
    numbers = [int(part) for part in parts]
    if len(numbers) == 1:
        if numbers[0] < 1:
            raise Refusal(f"{flag} {text}: that is no seeds at all; {fix}")
        return list(range(numbers[0]))
    repeated = sorted({n for n in numbers if numbers.count(n) > 1})
    if repeated:
        raise Refusal(f"{flag} {text}: seed {repeated[0]} is given twice; give each seed once")
    return numbers


@dataclass
class SeedGroup:
    """Runs of one scenario that differ only by their seed, in the order they were given."""

    runs: list[RunResult]
    name: str  # the scenario's name, or the names' pattern (``lr3-s*``) if they hold their seeds
    label: str | None = None  # how tables and plots name the group; ``name`` if None
    flat: dict[str, Any] = field(default_factory=dict)  # the scenario the runs share, as ``{"a.b": value}``

    @property
    def title(self) -> str:
        return self.label if self.label is not None else self.name

    @property
    def summary(self) -> dict[str, Any]:
        """The first run's summary: what the group's runs share (strategy, workers) is read from it."""
        return self.runs[0].summary

    @property
    def path(self) -> Path | None:
        """The first run's directory: what tells apart groups that nothing else does."""
        return self.runs[0].path

    @property
    def seeds(self) -> list[int]:
        return [run.scenario.seed for run in self.runs]


def flat(tree: object, prefix: str = "") -> dict[str, object]:
    """A nested scenario as ``{"cluster.workers": 8, ...}``."""
    if not isinstance(tree, dict):
        return {prefix: tree}
    out: dict[str, object] = {}
    for key, value in tree.items():
        out |= flat(value, f"{prefix}.{key}" if prefix else str(key))
    return out


def _name_patterns(name: str, seed: int) -> set[str]:
    """The name with one of its seed's numbers, standing alone, as ``*``: ``lr1-s1`` of seed 1
    is ``lr*-s1`` or ``lr1-s*``."""
    return {name[: m.start()] + "*" + name[m.end() :] for m in re.finditer(rf"(?<!\d){seed}(?!\d)", name)}


def by_seed(results: Sequence[RunResult]) -> list[SeedGroup]:
    """The runs grouped by everything in their resolved scenarios but the seed, in the order
    of each group's first run. Two runs of one scenario and one seed (copies of a run
    directory) in a group with other seeds are refused: they are one sample, not two."""
    buckets: dict[
        str, dict[str, list[RunResult]]
    ] = {}  # the scenario but seed and name -> name's tag -> runs
    for result in results:
        mine = flat(result.scenario.resolved())
        del mine["seed"], mine["name"]
        named = buckets.setdefault(json.dumps(mine, sort_keys=True, default=str), {})
        named.setdefault(result.scenario.name, []).append(result)
    out = []
    for named in buckets.values():
        for name, runs in _by_name_pattern(named).items():
            if len({run.scenario.seed for run in runs}) == 1:
                # one seed: nothing to average (and copies of one run stay apart, named by their folders)
                out += [
                    SeedGroup([run], run.scenario.name, flat=flat(run.scenario.resolved())) for run in runs
                ]
                continue
            _refuse_repeated_seeds(runs)
            shared = flat(runs[0].scenario.resolved())
            del shared["seed"]
            shared["name"] = name
            out.append(SeedGroup(runs, name, flat=shared))
    position = {id(result): i for i, result in enumerate(results)}
    for group in out:
        group.runs.sort(key=lambda run: position[id(run)])
    return sorted(out, key=lambda group: position[id(group.runs[0])])


def _by_name_pattern(named: dict[str, list[RunResult]]) -> dict[str, list[RunResult]]:
    """Runs of one scenario but seed, by name; names that differ only by their runs' seeds
    (``lr1-s0`` of seed 0, ``lr1-s1`` of seed 1) as one, under their pattern (``lr1-s*``)."""
    merged: list[tuple[set[str], list[tuple[str, RunResult]]]] = []  # patterns all its names share, its runs
    for name, runs in named.items():
        seeds = {run.scenario.seed for run in runs}
        patterns = _name_patterns(name, seeds.pop()) if len(seeds) == 1 else set()
        joined = next((entry for entry in merged if entry[0] & patterns), None)
        if joined is None:
            merged.append((patterns, [(name, run) for run in runs]))
        else:
            joined[0].intersection_update(patterns)
            joined[1].extend((name, run) for run in runs)
    out: dict[str, list[RunResult]] = {}
    for patterns, members in merged:
        names = list(dict.fromkeys(name for name, _ in members))
        out[names[0] if len(names) == 1 else min(patterns)] = [run for _, run in members]
    return out


def _refuse_repeated_seeds(runs: list[RunResult]) -> None:
    first: dict[int, RunResult] = {}
    for run in runs:
        seed = run.scenario.seed
        if seed in first:
            raise Refusal(
                f"{first[seed].path} and {run.path} are runs of one scenario with one seed ({seed}): "
                "averaged over "
                "seeds they would count as two; give one of them, or compare with --per-seed to show every "
                "run"
            )
        first[seed] = run


def aggregated(groups: Sequence[SeedGroup]) -> bool:
    """Whether any group has more than one seed: else the comparison is one row per run, as ever."""
    return any(len(group.runs) > 1 for group in groups)


def seed_table(groups: Sequence[SeedGroup], target_loss: float | None = None) -> pd.DataFrame:
    """One row per group: what its runs are, how many seeds, and for each number of a
    comparison row its mean over the seeds that have it, ``<number>_sd`` (sample standard
    deviation, NaN for fewer than two) and ``<number>_n`` (how many seeds have it)."""
    return pd.DataFrame([_group_row(group, target_loss) for group in groups])


def _group_row(group: SeedGroup, target_loss: float | None) -> dict[str, object]:
    rows = pd.DataFrame([summary_row(run, target_loss) for run in group.runs])
    statuses = rows["status"].astype(str).tolist()
    counted = {status: statuses.count(status) for status in dict.fromkeys(statuses)}
    row: dict[str, object] = {
        "run": group.title,
        "strategy": group.summary["strategy"],
        "workers": group.summary["workers"],
        "n_seeds": len(group.runs),
        "seeds": " ".join(str(seed) for seed in group.seeds),
        "status": statuses[0]
        if len(counted) == 1
        else ", ".join(f"{n} {status}" for status, n in counted.items()),
        "target_loss": rows["target_loss"].iloc[0],
    }
    for column in AVERAGED:
        mean, sd, n = mean_sd(rows[column].to_numpy(dtype=float))
        row |= {column: mean, f"{column}_sd": sd, f"{column}_n": n}
    return row


def mean_sd(values: np.ndarray) -> tuple[float, float, int]:
    """Mean, sample standard deviation (ddof 1; NaN for fewer than two) and count of the
    finite values (a missing number is NaN: it is left out, and the count says so)."""
    have = values[np.isfinite(values)]
    if not len(have):
        return math.nan, math.nan, 0
    return float(have.mean()), float(have.std(ddof=1)) if len(have) > 1 else math.nan, len(have)


def band(runs: Sequence[RunResult], x: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The runs' eval loss against ``x`` (``sim_time_s`` or ``updates``) on the union of their
    evaluation points, each run's curve linearly interpolated between its own: the points,
    the mean over the runs, and the least and the greatest of them. Only where every run has
    a curve (from the latest first evaluation to the earliest last one): beyond, a mean of
    fewer runs would jump where one ends."""
    curves = []
    for run in runs:
        points = run.metrics[[x, "eval_loss"]].dropna()
        points = points[np.isfinite(points["eval_loss"])]
        curves.append((points[x].to_numpy(dtype=float), points["eval_loss"].to_numpy(dtype=float)))
    if any(not len(xs) for xs, _ in curves):
        empty = np.array([])
        return empty, empty, empty, empty
    start, end = max(xs[0] for xs, _ in curves), min(xs[-1] for xs, _ in curves)
    grid = np.unique(np.concatenate([xs[(xs >= start) & (xs <= end)] for xs, _ in curves]))
    losses = np.array([np.interp(grid, xs, ys) for xs, ys in curves])
    return grid, losses.mean(axis=0), losses.min(axis=0), losses.max(axis=0)
