"""``fred sweep --executor ray``: a sweep's missing runs as Ray tasks, here or on a cluster.

Imported only when chosen, so Ray stays an optional extra (``pip install -e ".[ray]"``).
``ray.init()`` joins the cluster that ``RAY_ADDRESS`` names (Ray's own convention, as for
``ray job submit``) and otherwise starts Ray on this machine for the sweep's duration; a Ray
the caller has already started (a notebook, a test) is used as it is and left running.
Each task makes one run exactly as the local executor does, so the run directories, and
the table gathered from them, are the same, under the same memory limit: the driver's
``FRED_MEMORY_LIMIT_GB`` (``--memory-limit-gb``) goes with each task, as local worker
processes inherit it, since a Ray worker, on this node or another, was started with an
environment of its own.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterator
from typing import Any

from fred.runs.memory import ENV as MEMORY_LIMIT
from fred.scenario.errors import Refusal
from fred.tools.sweep_jobs import Done, Todo, run_one


def _import_ray() -> Any:
    try:
        import ray
    except ModuleNotFoundError as err:
        if err.name != "ray":  # Ray is there but one of its own imports fails: show that error
            raise
        # a ValueError, like calibrate's missing backend: the CLI prints it on one line
        raise Refusal(
            'executor "ray" needs Ray, which is not installed here: pip install -e ".[ray]" in fred\'s '
            'checkout (or pip install "ray>=2.6")'
        ) from None
    return ray


def _run_in(cwd: str, resolved: dict[str, Any], out: str, memory_limit: str | None = None) -> str:
    # a worker on another node starts in a directory of its own; relative paths (runs/, a
    # data file) must mean what they mean to the driver, as they do for local processes
    os.chdir(cwd)
    with _limited(memory_limit):
        return run_one(resolved, out)


@contextlib.contextmanager
def _limited(memory_limit: str | None) -> Iterator[None]:
    """The driver's memory limit, if it set one, for this task only: a Ray worker runs the tasks of
    later sweeps too. Without one the worker's own environment decides (a node's own limit)."""
    if memory_limit is None:
        yield
        return
    before = os.environ.get(MEMORY_LIMIT)
    os.environ[MEMORY_LIMIT] = memory_limit
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(MEMORY_LIMIT, None)
        else:
            os.environ[MEMORY_LIMIT] = before


def run_all(todo: Todo, done: Done = lambda out: None) -> None:
    """Make every run in ``todo`` as a Ray task and wait for all of them, telling ``done`` of each."""
    ray = _import_ray()
    if not todo:  # a finished sweep needs no Ray started or joined
        return
    started_here = not ray.is_initialized()
    if started_here:
        with warnings.catch_warnings():
            # Ray starts its daemons by fork and exec, with no JAX in between: JAX's warning
            # that a fork of its threads may deadlock does not apply
            warnings.filterwarnings("ignore", r"os\.fork\(\) was called", RuntimeWarning)
            ray.init()
    try:
        task = ray.remote(_run_in)
        limit = os.environ.get(MEMORY_LIMIT)  # what local worker processes inherit
        waiting = [task.remote(os.getcwd(), resolved, out, limit) for resolved, out in todo]
        try:
            while waiting:
                ready, waiting = ray.wait(waiting, num_returns=1)
                done(ray.get(ready[0]))
        except BaseException:  # Ctrl-C or a failed run: a Ray the caller keeps must not go on with the sweep
            for ref in waiting:
                ray.cancel(ref)  # a queued run never starts; a running one stops, its directory unwritten
            raise
    finally:
        if started_here:
            ray.shutdown()
