"""How a stop (SIGINT, SIGTERM) ends a ``fred`` command: the one line it says, and what the command
left behind. The watcher thread of :mod:`fred.runs.interrupt` calls :func:`stop_line` too, so this
module imports nothing that could wait on the main thread's imports."""

from __future__ import annotations

import argparse
import signal
from pathlib import Path

STOPPED = (130, 143)  # the statuses a shell reports for a command ended by SIGINT and by SIGTERM
STOPS = {signal.SIGINT: "interrupted", signal.SIGTERM: "terminated"}


def stop_line(signum: int, args: argparse.Namespace | None) -> str:
    """The one line a stop ends the command with: how, and what it left. The watcher thread
    calls it too, so it only reads ``args`` and files (an import there could wait for ever on
    one the main thread is in)."""
    how = STOPS.get(signum, f"stopped by signal {signum}")
    if args is None or not getattr(args, "command", None):
        return f"fred: {how} while starting; nothing was done"
    return f"fred: {how}; {_left(args)}"


RUNS = frozenset({"compare", "sweep"})  # the commands that make and keep runs (fred run makes one)


def _left(args: argparse.Namespace) -> str:
    """What a stop left, said for the command cut short: a run directory is written whole or not
    at all, so runs that finished are kept; a command that runs nothing has no runs to keep, only
    what it was writing (the handler says what, in ``args.writing``, before it writes)."""
    if args.command == "run":
        written = _written(args)
        if written is not None:
            return f"the run had finished: its run directory {written} is written"
        return f"no run directory was written{_resumable(args)}"
    if getattr(args, "done", False):
        return "the command had finished"
    if args.command == "sweep":
        return "every run that finished is kept, and fred sweep again reuses them"
    if args.command in RUNS:
        return "runs that finished are kept"
    return getattr(args, "writing", None) or "nothing was written"


def summary_id(run_dir: Path | None) -> tuple[int, int, int] | None:
    """Which summary.json ``run_dir`` holds, if any (a run directory is put in place whole)."""
    try:
        found = (run_dir / "summary.json").stat() if run_dir is not None else None
    except OSError:
        return None
    return None if found is None else (found.st_dev, found.st_ino, found.st_mtime_ns)


def _written(args: argparse.Namespace) -> Path | None:
    """The run directory ``fred run`` wrote, once it is in place (another summary than the one before)."""
    out = getattr(args, "out_resolved", None)
    now = summary_id(out)
    return out if now is not None and now != getattr(args, "summary_before", None) else None


def _resumable(args: argparse.Namespace) -> str:
    """What to type to finish an interrupted ``fred run`` that left a checkpoint."""
    kept = getattr(args, "checkpoint_file", None)  # set by _stop_says, so that no import is needed here
    if kept is None or not kept.is_file():
        return ""
    return f"; its checkpoint is kept: fred run --resume {args.out_resolved}"
