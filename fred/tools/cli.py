"""The ``fred`` command line: ``run``, ``list``, ``compare``, ``sweep``, ``calibrate``, ``replay``, ``plot``,
``trace``, ``fit``.

:func:`entry` (the ``fred`` script) and :func:`main` take the command and answer how it ended: the
parser is :mod:`fred.tools.cli_parser`, each command's handler is in its group's module
(:mod:`~fred.tools.cli_run`, :mod:`~fred.tools.cli_compare`, :mod:`~fred.tools.cli_show`,
:mod:`~fred.tools.cli_measure`) and the line a stop ends a command with is :mod:`fred.tools.cli_stops`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
from typing import Iterator, Sequence

from fred.runs import interrupt  # os, signal and threading only, like paths
from fred.runs.paths import NoSpace, full_disk  # os and pathlib only: the heavy libraries load in main
from fred.scenario.errors import Refusal  # no imports of its own
from fred.tools.cli_parser import build_parser  # the handlers' modules import as little as this one
from fred.tools.cli_stops import STOPPED, stop_line

COMPILES = frozenset({"run", "compare", "sweep", "calibrate", "replay"})  # the commands that run jitted code


def main(argv: Sequence[str] | None = None) -> int:
    global _current
    args = _current = None
    try:
        from fred.scenario.loading import ScenarioError  # noqa: F401 - pydantic: loaded where a stop is taken

        # asked for while loading (a KeyboardInterrupt in a collection callback is dropped)
        interrupt.raise_if_asked()
        parser = build_parser()
        args = _current = parser.parse_args(argv)
        if args.command is None:
            parser.print_help()
            return 2
        empty = _empty_path(args)
        if empty:  # Path("") is ".": --out '' wrote into the working directory, or meant the default
            print(f"fred: {empty}", file=sys.stderr)
            return 2
        if args.command in COMPILES:
            from fred.tools.compilation_cache import enable

            enable()  # compiled programs from earlier processes: most of a short run's time otherwise
        with _memory_limit(getattr(args, "memory_limit_gb", None)):
            code = args.handler(args)
        args.done = True  # for the line a signal from now on ends the command with
        return code
    except BaseException as err:  # each kind is answered in _ended; argparse's exit goes on
        code = _ended(err, args)
        if code is None:
            raise
        return code


_current: argparse.Namespace | None = None  # the command being run, for the line a stop ends it with


def _ended(err: BaseException, args: argparse.Namespace | None) -> int | None:
    """Say what ended the command early and return its status: 2 for input refused on purpose
    (:mod:`fred.tools.refusals`), 3 for a bug; None for argparse's exit.

    A stop comes first: asked for by a signal, whatever it became on its way out (an
    ImportError from an import it cut short, a ValueError a library made of it).
    """
    signum = interrupt.stop_of(err)
    if signum is not None:
        interrupt.ending()
        print(stop_line(signum, args), file=sys.stderr)
        return interrupt.STATUS[signum]
    if isinstance(err, SystemExit):
        return None
    from fred.tools.refusals import is_refusal

    if is_refusal(err):  # a bad scenario, data file, shard size or path, a missing extra: refused on purpose
        print(f"fred: {_readable(str(err))}", file=sys.stderr)
        return 2
    if isinstance(
        err, BrokenPipeError
    ):  # `fred compare ... | head` closed the pipe: the reader has what it wanted
        os.dup2(
            os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno()
        )  # no second error as Python flushes at exit
        return 141  # what a shell reports for a command ended by SIGPIPE
    if (
        isinstance(err, OSError) and full_disk(err) is not None
    ):  # the machine's state, not bad input: 1, not 2
        said = (
            err.strerror
            if isinstance(err, NoSpace)
            else f"{full_disk(err)}{f' writing {err.filename}' if err.filename else ''}"
        )
        print(
            f"fred: {said}"
            + ("" if isinstance(err, NoSpace) else "; free some space there or write elsewhere"),
            file=sys.stderr,
        )
        return 1
    if isinstance(err, OSError):  # a read-only folder: the machine's answer, not a bug
        print(f"fred: {err.strerror or err}: {err.filename or ''}".rstrip(": "), file=sys.stderr)
        return 2
    from fred.runs.memory import OutOfMemory, allocation_failed

    if isinstance(err, OutOfMemory):  # it says the estimate, the limit and the fixes
        print(f"fred: {err}", file=sys.stderr)
        return 1
    if allocation_failed(
        err
    ):  # numpy's "Unable to allocate 745. GiB", XLA's "Out of memory allocating": not a bug, nor bad input
        print(
            f"fred: out of memory ({_readable(str(err), lines=1)}); make the data set or the model smaller, "
            "or give the memory this machine has with --memory-limit-gb N",
            file=sys.stderr,
        )
        return 1
    if isinstance(err, Exception):
        from fred.tools.refusals import INTERNAL, report_bug

        report_bug(err, getattr(args, "debug", False))
        return INTERNAL
    return None


@contextlib.contextmanager
def _memory_limit(gb: float | None) -> Iterator[None]:
    """``--memory-limit-gb`` for this command's runs, and the processes it starts, as the
    environment's FRED_MEMORY_LIMIT_GB (fred.runs.memory reads it), restored after."""
    if gb is None:
        yield
        return
    if not 0 < gb < float("inf"):
        raise Refusal(
            f"--memory-limit-gb {gb}: give the memory runs may use, in GB, e.g. --memory-limit-gb 64"
        )
    before = os.environ.get("FRED_MEMORY_LIMIT_GB")
    os.environ["FRED_MEMORY_LIMIT_GB"] = repr(gb)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("FRED_MEMORY_LIMIT_GB", None)
        else:
            os.environ["FRED_MEMORY_LIMIT_GB"] = before


def entry() -> None:
    """The ``fred`` command: :func:`main`, with SIGINT and SIGTERM taken from its first line.

    A signal ends the command with one line on stderr and status 130 (SIGINT) or 143
    (SIGTERM), whatever it is doing: a run stops between two steps and keeps a last
    checkpoint when it is checkpointed (:mod:`fred.runs.interrupt`). After a stop the process
    ends without interpreter shutdown, in which JAX/XLA can crash with a segmentation fault
    (a Ctrl-C during compilation) after fred has reported the stop.
    """
    interrupt.take_signals(lambda signum: stop_line(signum, _current))
    usage: SystemExit | None = None
    try:
        try:
            code = main()
        except SystemExit as exit_:  # argparse's --help or a usage error, said already
            usage, code = exit_, 0
        signum = interrupt.asked()
        if (
            signum is not None and code not in STOPPED
        ):  # its KeyboardInterrupt was dropped, or came as main returned
            raise interrupt.stop_exception(signum)
        if code not in STOPPED:
            interrupt.finished()
    except KeyboardInterrupt as stop:  # cut main's own report short, or came before finished() took over
        signum = interrupt.stop_of(stop) or signal.SIGINT
        if not interrupt.is_ending():
            interrupt.ending()
            print(stop_line(signum, _current), file=sys.stderr)
        code = interrupt.STATUS[signum]
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    if code in STOPPED:
        interrupt.release_semaphores()  # what the skipped shutdown would have done
        os._exit(code)
    if usage is not None:
        raise usage
    sys.exit(code)


def _readable(message: str, width: int = 1000, lines: int = 40) -> str:
    """``message`` cut to what a person reads: ``lines`` lines of at most ``width`` characters,
    saying what was left out (a value echoed whole can make a message of megabytes)."""
    kept = [
        line if len(line) <= width else f"{line[: width - 1]}… ({len(line):,} characters)"
        for line in message.splitlines()[:lines]
    ]
    more = len(message.splitlines()) - lines
    return "\n".join(kept + ([f"... and {more} more lines"] if more > 0 else []))


PATH_ARGUMENTS = {  # each argument that names a file or a folder, and what to say when it is ''
    "scenario": "the scenario file is ''; give a .yaml file",
    "run_dir": "the run directory is ''; give a run directory",
    "items": "an item to compare is ''; give scenario files, run directories or sweep tables",
    "resume": "--resume is ''; give the run directory to finish",
    "timings": "--timings is ''; give a file or a directory, or leave --timings out to write none",
    **{
        dest: f"{flag} is ''; give a path, or leave {flag} out for its default"
        for dest, flag in [("out", "--out"), ("runs", "--runs"), ("output", "-o/--output")]
    },
}


def _empty_path(args: argparse.Namespace) -> str | None:
    """What to say of the first path argument given as an empty string (``--out ''``), if any."""
    for dest, message in PATH_ARGUMENTS.items():
        value = getattr(args, dest, None)
        if any(isinstance(v, str) and not v.strip() for v in (value if isinstance(value, list) else [value])):
            return message
    return None


if __name__ == "__main__":
    entry()
