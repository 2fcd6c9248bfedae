"""One run of a sweep, as every executor (local processes, Ray tasks) runs it."""

from __future__ import annotations

from typing import Any, Callable

from fred.runs.api import run
from fred.scenario.loading import validate

Todo = list[tuple[dict[str, Any], str]]  # (resolved scenario, run directory) for each missing run
Done = Callable[[str], None]  # told each run directory as its run finishes


def run_one(resolved: dict[str, Any], out: str) -> str:
    """Run the resolved scenario into the run directory ``out``; return ``out``."""
    run(validate(resolved), out=out)
    return out
