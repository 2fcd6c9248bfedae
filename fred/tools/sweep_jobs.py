"""One run of a sweep, as every executor (local processes, Ray tasks) runs it."""

from __future__ import annotations

from typing import Any, Callable

from fred.runs.api import run
from fred.scenario.errors import Refusal
from fred.scenario.loading import validate
from fred.tools.refusals import is_refusal

Todo = list[tuple[dict[str, Any], str]]  # (resolved scenario, run directory) for each missing run
Done = Callable[[str], None]  # told each run directory as its run finishes


def run_one(resolved: dict[str, Any], out: str) -> str:
    """Run the resolved scenario into the run directory ``out``; return ``out``.

    A plain ``ValueError`` that is a refusal (:func:`fred.tools.refusals.is_refusal`) is raised
    as a :class:`Refusal` with its message: from a worker process only the exception comes back,
    not where it was raised, and the sweep's command line tells a refusal from a bug by its class.
    """
    try:
        run(validate(resolved), out=out)
    except ValueError as err:
        if type(err) is ValueError and is_refusal(err):
            raise Refusal(str(err)) from None
        raise
    return out
