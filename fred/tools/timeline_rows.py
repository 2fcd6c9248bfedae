"""Which workers a timeline draws: all of up to :data:`MAX_WORKER_ROWS`; of more, a readable few.

A timeline of 512 workers is a figure 14,000 px tall whose rows no one reads. Above
:data:`MAX_WORKER_ROWS` workers it draws the first :data:`FIRST` and the last :data:`LAST` and the
slowest workers (those whose mean compute step is :data:`SLOW` times the median or more, up to
:data:`SLOWEST`); ``fred plot RUN --workers 0-7,100`` picks the workers instead. Servers and sites
are always drawn.
"""

from __future__ import annotations

import re

import pandas as pd

from fred.scenario.errors import Refusal

MAX_WORKER_ROWS = 32
FIRST, LAST, SLOWEST = 8, 4, 8
SLOW = 1.5  # a mean compute step this many times the workers' median marks a straggler
WORKER = re.compile(r"worker(\d+)")


def parse_workers(text: str, flag: str = "--workers") -> list[int]:
    """``0-7,100`` as ``[0, 1, ..., 7, 100]``: worker numbers and inclusive ranges, comma-separated."""
    picked: list[int] = []
    for part in text.split(","):
        found = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", part)
        if found is None:
            raise Refusal(
                f"{flag} {text}: {part.strip() or 'an empty item'} is not a worker number or a range; "
                f"give numbers and ranges, e.g. {flag} 0-7,100"
            )
        low, high = int(found[1]), int(found[2] if found[2] is not None else found[1])
        if high < low:
            raise Refusal(f"{flag} {text}: the range {low}-{high} runs backwards; write it {high}-{low}")
        picked.extend(range(low, high + 1))
    return sorted(set(picked))


def worker_number(entity: str) -> int | None:
    found = WORKER.fullmatch(entity)
    return int(found[1]) if found else None


def mean_steps(shown: pd.DataFrame, entities: list[str]) -> pd.Series:
    """Each worker's mean compute step in the window, by entity name (workers that computed)."""
    computes = shown[shown["step"] & (shown["length"] > 0)]
    means = computes.groupby("row")["length"].mean()
    return pd.Series(means.to_numpy(), index=[entities[int(row)] for row in means.index], dtype=float)


def chosen(entities: list[str], steps: pd.Series, workers: list[int] | None) -> tuple[list[str], str | None]:
    """The rows to draw, in ``entities``' order, and a line that says which workers they are (None: all)."""
    numbers = {e: worker_number(e) for e in entities}
    every = sorted(n for n in numbers.values() if n is not None)
    if workers is not None:
        check_workers(entities, workers)
        kept, how = set(workers), "picked with --workers"
    elif len(every) <= MAX_WORKER_ROWS:
        return entities, None
    else:
        median = float(steps.median()) if len(steps) else float("nan")
        slow = steps[steps > SLOW * median].sort_values(ascending=False).index[:SLOWEST]
        slowest = {numbers[e] for e in slow}
        kept = set(every[:FIRST]) | set(every[-LAST:]) | slowest
        how = f"the first {FIRST}, the last {LAST}" + (f" and the {len(slowest)} slowest" if slowest else "")
        how += "; --workers picks others"
    rows = [e for e in entities if numbers[e] is None or numbers[e] in kept]
    if len(kept) == len(every):
        return rows, None
    return rows, f"{len(kept)} of {len(every)} workers ({how}): {_ranges(sorted(kept))}"


def check_workers(entities: list[str], workers: list[int]) -> None:
    """Refuse worker numbers the run has not got, naming them and the ones it has."""
    every = sorted(n for n in map(worker_number, entities) if n is not None)
    missing = sorted(set(workers) - set(every))
    if missing:
        have = f"workers {every[0]} to {every[-1]}" if every else "no workers"
        raise Refusal(f"--workers: the run has no worker {_ranges(missing)}; it has {have}")


def _ranges(numbers: list[int]) -> str:
    """``[0, 1, 2, 3, 7]`` as ``0-3, 7``."""
    spans: list[list[int]] = []
    for n in numbers:
        if spans and n == spans[-1][1] + 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in spans)
