"""The ``fred`` command line: ``run``, ``list``, ``compare``, ``sweep``, ``calibrate``, ``replay``, ``plot``,
``trace``."""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

from fred.runs import interrupt  # os, signal and threading only, like paths
from fred.runs.paths import (  # os and pathlib only: the heavy libraries load in main, where Ctrl-C is taken
    NoSpace,
    full_disk,
    output_file,
    write_whole,
)
from fred.scenario.errors import Refusal  # no imports of its own

if TYPE_CHECKING:
    from fred.scenario.schema import Scenario

SUMMARY_KEYS = [
    "status", "stop_reason", "strategy", "workers", "sim_time_s", "updates",
    "final_eval_loss", "final_eval_accuracy", "bytes_sent", "mean_staleness", "params_sha256", "wall_time_s",
]  # fmt: skip


COMPILES = frozenset({"run", "compare", "sweep", "calibrate", "replay"})  # the commands that run jitted code


def main(argv: Sequence[str] | None = None) -> int:
    global _current
    args = _current = None
    try:
        from fred.scenario.loading import ScenarioError  # noqa: F401 - pydantic: loaded where a stop is taken

        # asked for while loading (a KeyboardInterrupt in a collection callback is dropped)
        interrupt.raise_if_asked()
        parser = _parser()
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
        print(_stop_line(signum, args), file=sys.stderr)
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
    ends without interpreter shutdown, where JAX/XLA crashed now and then with a
    segmentation fault (2 in 7 Ctrl-Cs during compilation) after fred had reported it.
    """
    interrupt.take_signals(lambda signum: _stop_line(signum, _current))
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
            print(_stop_line(signum, _current), file=sys.stderr)
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
    saying what was left out (a value echoed whole once made a message of megabytes)."""
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


STOPPED = (130, 143)  # the statuses a shell reports for a command ended by SIGINT and by SIGTERM
STOPS = {signal.SIGINT: "interrupted", signal.SIGTERM: "terminated"}


def _stop_line(signum: int, args: argparse.Namespace | None) -> str:
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


def _summary_id(run_dir: Path | None) -> tuple[int, int, int] | None:
    """Which summary.json ``run_dir`` holds, if any (a run directory is put in place whole)."""
    try:
        found = (run_dir / "summary.json").stat() if run_dir is not None else None
    except OSError:
        return None
    return None if found is None else (found.st_dev, found.st_ino, found.st_mtime_ns)


def _written(args: argparse.Namespace) -> Path | None:
    """The run directory ``fred run`` wrote, once it is in place (another summary than the one before)."""
    out = getattr(args, "out_resolved", None)
    now = _summary_id(out)
    return out if now is not None and now != getattr(args, "summary_before", None) else None


def _resumable(args: argparse.Namespace) -> str:
    """What to type to finish an interrupted ``fred run`` that left a checkpoint."""
    kept = getattr(args, "checkpoint_file", None)  # set by _stop_says, so that no import is needed here
    if kept is None or not kept.is_file():
        return ""
    return f"; its checkpoint is kept: fred run --resume {args.out_resolved}"


MEMORY_HELP = (
    "refuse runs estimated to need more than N GB (default: the memory available, as /proc/meminfo "
    "or a container's limit says; FRED_MEMORY_LIMIT_GB=N does the same)"
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fred",
        description="Simulate distributed deep-learning training.",
        epilog="run, compare, sweep, calibrate and replay keep the programs JAX compiles in "
        "~/.cache/fred/jax "
        "($XDG_CACHE_HOME/fred/jax if set), one folder per CPU, for later processes (the same bits, "
        "seconds sooner); FRED_JAX_CACHE=off turns that off, FRED_JAX_CACHE=DIR moves it.",
    )
    parser.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    sub = parser.add_subparsers(dest="command")
    run = sub.add_parser("run", help="run one scenario and write its run directory")
    run.add_argument("scenario", nargs="?", help="scenario YAML file (not with --resume)")
    run.add_argument(
        "--out",
        help="run directory (default: runs/<name>-s<seed>-<hash of the resolved scenario>); "
        "it replaces an earlier run there, never other files",
    )
    run.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="PATH=VALUE",
        help="override a scenario field, e.g. --set cluster.workers=16 (repeatable)",
    )
    run.add_argument("--seed", type=int, help="override the scenario's seed")
    run.add_argument("--quiet", action="store_true", help="no progress bar and no summary table")
    run.add_argument(
        "--checkpoint-every-s",
        type=float,
        metavar="S",
        help="keep a checkpoint next to the run directory, renewed every S seconds of wall time",
    )
    run.add_argument(
        "--resume",
        metavar="RUN_DIR",
        help="finish the interrupted run that was to be written to RUN_DIR, from its checkpoint",
    )
    run.add_argument("--memory-limit-gb", type=float, metavar="N", help=MEMORY_HELP)
    run.add_argument("--no-user-code", action="store_true", help=NO_USER_CODE_HELP)
    run.set_defaults(handler=_run)
    lst = sub.add_parser("list", help="list the registered strategies")
    lst.set_defaults(handler=_list)
    cmp_ = sub.add_parser(
        "compare", help="run (or reuse) several scenarios; one table and side-by-side plots"
    )
    cmp_.add_argument(
        "items",
        nargs="+",
        help="scenario YAML files, finished run directories or sweep tables (.parquet from fred sweep)",
    )
    cmp_.add_argument(
        "--out", default="comparison", help="where the table and plots go (default: comparison/)"
    )
    cmp_.add_argument("--runs", default="runs", help="where runs are stored and reused (default: runs/)")
    cmp_.add_argument(
        "--target-loss",
        type=float,
        help="report simulated time and updates to this eval loss "
        "(recorded in comparison.csv's target_loss column)",
    )
    cmp_.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="PATH=VALUE",
        help="override a field of every scenario file given, e.g. --set stop.max_updates=200 (repeatable)",
    )
    cmp_.add_argument("--seeds", metavar="N|S1,S2", help=SEEDS_HELP.format(what="every scenario file given"))
    cmp_.add_argument(
        "--per-seed",
        action="store_true",
        help="a row and a curve for each run; without it, runs that differ only by their seed are one row "
        "(mean ± sd over the seeds) and one curve (their mean, in a band from the least to the greatest)",
    )
    cmp_.add_argument("--memory-limit-gb", type=float, metavar="N", help=MEMORY_HELP)
    cmp_.add_argument(
        "--no-user-code",
        action="store_true",
        help=NO_USER_CODE_HELP + "; finished runs and sweep tables are only read, never run",
    )
    cmp_.set_defaults(handler=_compare)
    plot = sub.add_parser("plot", help="loss curves, staleness histogram and per-worker timeline of one run")
    plot.add_argument("run_dir")
    plot.add_argument("--out", help="where the figures go (default: RUN_DIR/plots)")
    plot.add_argument(
        "--from",
        dest="start_s",
        type=float,
        metavar="S",
        help="the timeline starts at S simulated seconds (default: 0)",
    )
    plot.add_argument(
        "--to",
        dest="end_s",
        type=float,
        metavar="S",
        help="the timeline ends at S simulated seconds (default: the run's last event)",
    )
    plot.add_argument(
        "--workers",
        metavar="N,A-B",
        help="the workers the timeline draws, e.g. --workers 0-7,100 (default: every worker "
        "up to 32; of more, the first 8, the last 4 and the slowest)",
    )
    plot.add_argument("--svg", action="store_true", help="write each figure as SVG too, beside the PNG")
    plot.set_defaults(handler=_plot)
    cal = sub.add_parser("calibrate", help="measure real per-batch gradient time; write a compute profile")
    cal.add_argument(
        "scenario",
        nargs="?",
        help="the model, data, batch size and reduction to time (default: digits, MLP [64], batch 32, exact)",
    )
    cal.add_argument(
        "--model",
        metavar="SPEC",
        help="a model kind (logistic, mlp, cnn) or a YAML mapping, e.g. '{kind: mlp, hidden: [128, 64]}'",
    )
    cal.add_argument("--batch", type=int, metavar="N", help="the batch size (rows per gradient step)")
    cal.add_argument("--reduction", choices=["exact", "fast"], help="how the batch's gradient is summed")
    cal.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="PATH=VALUE",
        help="override a field of the scenario timed, e.g. --set data.source.kind=synthetic (repeatable)",
    )
    cal.add_argument("--backend", default="cpu", help="JAX backend: cpu, gpu, ... (default: cpu)")
    cal.add_argument(
        "--repeats", type=int, default=20, help="timed gradient calls; the median is the profile (default 20)"
    )
    cal.add_argument(
        "--warmup", type=int, default=3, help="untimed calls first; the first one compiles (default 3)"
    )
    cal.add_argument(
        "-o", "--output", default="profile.yaml", help="the profile file to write (default: profile.yaml)"
    )
    cal.set_defaults(handler=_calibrate)
    rep = sub.add_parser(
        "replay", help="re-execute a run's numerics from its tape and check the final parameters"
    )
    rep.add_argument("run_dir")
    rep.add_argument("--backend", help="JAX backend: cpu, gpu, ... (default: the one that made the run, cpu)")
    rep.add_argument(
        "--check",
        choices=["bitwise", "close"],
        default="bitwise",
        help="bitwise: the final parameters are the run's bits (same backend); close: every step "
        "agrees with the same step on the run's backend, given the same inputs (another backend)",
    )
    rep.add_argument(
        "--rtol",
        type=float,
        default=1e-5,
        help="--check close: a step's arrays may differ by atol + rtol * max|reference| (default 1e-5)",
    )
    rep.add_argument(
        "--atol", type=float, default=1e-6, help="absolute tolerance for --check close (default 1e-6)"
    )
    rep.add_argument(
        "--matmul-precision",
        choices=["default", "high", "highest"],
        default="highest",
        help="jax.default_matmul_precision for the replay (default: highest, float32 products as "
        "on CPU; 'default' lets a GPU use TF32)",
    )
    rep.add_argument(
        "--timings",
        help="write every gradient call's real and simulated time here (.parquet, else CSV; "
        "a directory: timings.csv in it)",
    )
    rep.set_defaults(handler=_replay)
    sw = sub.add_parser("sweep", help="run a Cartesian grid over scenario fields (resumable)")
    sw.add_argument("scenario")
    sw.add_argument(
        "--grid",
        action="append",
        default=[],
        metavar="PATH=V1,V2",
        help="a field and its values, e.g. --grid strategy.lr=0.01,0.1 (repeatable)",
    )
    sw.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="PATH=VALUE",
        help="override a scenario field in every run, e.g. --set stop.max_updates=200 (repeatable)",
    )
    sw.add_argument(
        "--seeds",
        metavar="N|S1,S2",
        help=SEEDS_HELP.format(what="every combination") + "; the same as --grid seed=...",
    )
    sw.add_argument(
        "--jobs", type=int, default=1, help="runs at once, in separate processes (local executor)"
    )
    sw.add_argument(
        "--executor",
        choices=["local", "ray"],
        default="local",
        help="local: this machine's processes; ray: Ray tasks, on the cluster RAY_ADDRESS names "
        'or a Ray started here (needs pip install -e ".[ray]" in fred\'s checkout)',
    )
    sw.add_argument("--runs", default="runs", help="where runs are stored and reused (default: runs/)")
    sw.add_argument(
        "--out",
        help="the gathered table, or a folder to write sweep.parquet in (default: "
        "RUNS/sweep-NAME.parquet, NAME the scenario file's name without .yaml, in the --runs "
        "folder beside the sweep's runs)",
    )
    sw.add_argument(
        "--per-seed",
        action="store_true",
        help="print a row for each run; without it, runs that differ only by their seed are one row "
        "(mean ± sd over the seeds), as fred compare prints them",
    )
    sw.add_argument("--memory-limit-gb", type=float, metavar="N", help=MEMORY_HELP)
    sw.add_argument("--no-user-code", action="store_true", help=NO_USER_CODE_HELP)
    sw.set_defaults(handler=_sweep)
    trace = sub.add_parser("trace", help="export the event timeline as Chrome trace-event JSON (Perfetto)")
    trace.add_argument("run_dir")
    trace.add_argument(
        "-o",
        "--output",
        help="output file, or a directory to write trace.json in (default: RUN_DIR/trace.json)",
    )
    trace.set_defaults(handler=_trace)
    fit = sub.add_parser(
        "fit", help="fit named scenario constants to measured seconds per iteration; write them as a profile"
    )
    fit.add_argument(
        "measurements",
        help="a CSV with columns scenario,measured_s: a scenario file (relative to the CSV's "
        "folder, or absolute) and the seconds one iteration took on the real cluster",
    )
    fit.add_argument(
        "--fit",
        dest="paths",
        required=True,
        metavar="PATH[=START],...",
        help="the constants to fit, as --set names them, e.g. network.bandwidth_bps,network.latency_s; "
        "=START to start elsewhere than the scenarios' value",
    )
    fit.add_argument(
        "--holdout",
        default="",
        metavar="ROW,...",
        help="rows predicted but not fitted on: row numbers (1 is the first under the header) or scenarios",
    )
    fit.add_argument(
        "--iterations",
        type=int,
        default=20,
        metavar="N",
        help="a prediction times N iterations of every worker (default 20)",
    )
    fit.add_argument(
        "--warmup",
        type=int,
        default=5,
        metavar="N",
        help="after N iterations left out, as a measured steady-state time leaves out the start (default 5)",
    )
    fit.add_argument(
        "--max-evals",
        type=int,
        default=200,
        metavar="N",
        help="stop after N evaluations of the fitted rows (default 200)",
    )
    fit.add_argument("-o", "--output", default="fit.yaml", help="the profile to write (default: fit.yaml)")
    fit.set_defaults(handler=_fit)
    for command in sub.choices.values():  # after the command too: fred run S.yaml --debug
        command.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP)
    return parser


DEBUG_HELP = (
    "a bug in fred (exit status 3) prints its traceback here, not only the line that says where it is kept"
)


def _fit(args: argparse.Namespace) -> int:
    from fred.tools.fit import command

    return command(args)


SEEDS_HELP = "run {what} once with each seed: N for seeds 0 to N-1 (--seeds 3), or the seeds (--seeds 0,4,7)"
NO_USER_CODE_HELP = "refuse a scenario that names Python code to import and run (model.factory, model.loss)"


def _refuse_user_code(scenarios: Sequence[Scenario], where: str) -> None:
    """--no-user-code: refuse, before anything runs, any of ``scenarios`` that would import code."""
    from fred.numerics.user_code import names_user_code

    for scenario in scenarios:
        named = names_user_code(scenario)
        if named:
            raise Refusal(
                f"{where}: {' and '.join(named)} would be imported and run, and --no-user-code refuses "
                "user code; leave --no-user-code out only if you trust that code"
            )


def _run(args: argparse.Namespace) -> int:
    from fred.runs.api import default_run_dir, run
    from fred.scenario.loading import load_scenario

    if args.resume:
        if args.no_user_code:
            from fred.runs.checkpoint import checkpoint_dir
            from fred.scenario.loading import read_yaml, validate

            saved = checkpoint_dir(args.resume) / "scenario.yaml"
            if saved.is_file():
                _refuse_user_code([validate(read_yaml(saved, own=True), str(saved))], str(saved))
        return _resume(args)
    if not args.scenario:
        raise Refusal("fred run needs a scenario file, or --resume RUN_DIR")
    scenario = load_scenario(args.scenario, args.sets, args.seed)
    if args.no_user_code:
        _refuse_user_code([scenario], args.scenario)
    out = Path(args.out) if args.out else default_run_dir(scenario)
    _replaceable(out)
    _stop_says(args, out)
    if args.checkpoint_every_s is not None:  # a scenario read from the checkpoint folder would go with it
        from fred.runs.checkpoint import check_folder, checkpoint_dir

        check_folder(checkpoint_dir(out), (args.scenario,))
    show = not args.quiet and sys.stderr.isatty()
    if args.checkpoint_every_s is not None and args.checkpoint_every_s > 0 and not args.quiet:
        print(f"checkpoints in {out}.checkpoint/; after a kill: fred run --resume {out}", file=sys.stderr)
    interrupt.raise_if_asked()  # the last point before the run: nothing is written yet
    with _progress(scenario, show) as progress:
        result = run(scenario, out=out, progress=progress, checkpoint_every_s=args.checkpoint_every_s)
    if not args.quiet:
        _print_summary(result.summary, out)
    return _status(result.summary, out)


def _replaceable(out: Path, option: str = "--out") -> None:
    """Refuse, before the run, a run directory's place the finished run could not be put in.

    The run is written beside ``out`` and renamed onto it: a folder that is a mount point, or on a
    read-only file system, refuses the rename (EBUSY, EROFS) only once the whole run is done.
    The folder ``out`` is made in is checked by :func:`fred.runs.paths.check_out`.
    """
    if not out.is_dir() or out.is_symlink():  # a link or a file: check_out says why not
        return
    if os.path.ismount(out):
        raise Refusal(
            f"{option} {out} is a mount point, and the run directory is renamed into place when "
            f"it is written, which a mount point refuses: give a folder inside it, "
            f"e.g. --out {out / 'run'}"
        )
    if not os.access(out, os.W_OK):  # read-only: its permissions, or a read-only file system even for root
        raise Refusal(
            f"{option} {out} is not writable, and the run directory replaces it when it is "
            "written: give another --out"
        )


def _status(summary: dict, out: Path) -> int:
    """A finished run's exit status; a run that ran out of memory says so, on stderr, in one line."""
    if summary.get("stop_reason") == "out_of_memory":
        print(f"fred: {summary['failure']}; the run so far is recorded as failed in {out}", file=sys.stderr)
    return 0 if summary["status"] in ("completed", "diverged") else 1


def _stop_says(args: argparse.Namespace, out: Path) -> None:
    """What a stop's line needs to know of ``fred run``: its run directory, which summary was
    there before, and where a checkpoint would be (imported here, not in the watcher thread)."""
    from fred.runs.checkpoint import checkpoint_dir

    args.out_resolved, args.summary_before = out, _summary_id(out)
    if args.checkpoint_every_s is not None or args.resume:  # a resume's checkpoint stays
        args.checkpoint_file = checkpoint_dir(out) / "checkpoint.npz"


def _resume(args: argparse.Namespace) -> int:
    from fred.runs.api import resume

    if args.scenario or args.sets or args.seed is not None or args.out:
        raise Refusal("--resume takes only the run directory: the scenario is the checkpoint's")
    _replaceable(Path(args.resume), "--resume")
    _stop_says(args, Path(args.resume))

    def restarting(reason: str) -> None:  # said before the long part, not after it
        if not args.quiet:
            print(f"resuming: running from the start ({reason})", file=sys.stderr)

    result, slow = resume(args.resume, checkpoint_every_s=args.checkpoint_every_s, restarting=restarting)
    if not args.quiet:
        how = "fast-forwarded to its checkpoint" if slow is None else f"ran from the start ({slow})"
        print(f"resumed: {how}", file=sys.stderr)
        _print_summary(result.summary, Path(args.resume))
    return _status(result.summary, Path(args.resume))


def _compare(args: argparse.Namespace) -> int:
    from fred.tools.compare import compare, readable_table
    from fred.tools.formats import count
    from fred.tools.seeds import parse_seeds

    show = sys.stderr.isatty()  # a bar for each scenario that has to be run
    seeds = parse_seeds(args.seeds) if args.seeds is not None else None
    if args.no_user_code:  # every scenario file, as each of its runs would be, before any runs
        from fred.scenario.loading import load_scenario
        from fred.tools.compare import scenario_files

        for item in scenario_files(args.items):
            _refuse_user_code([load_scenario(item, args.sets, seed) for seed in seeds or [None]], item)
    table, ran = compare(
        args.items,
        Path(args.out),
        Path(args.runs),
        args.target_loss,
        lambda s: _progress(s, show),
        args.sets,
        seeds,
        args.per_seed,
    )
    print(readable_table(table, shutil.get_terminal_size().columns))
    runs = int(table["n_seeds"].sum()) if "n_seeds" in table.columns else len(table)
    print(f"\n{count(ran, 'run')} made, {runs - ran:,} reused; table and plots in {args.out}/")
    return 0


def _calibrate(args: argparse.Namespace) -> int:
    from fred.tools.calibrate import calibration_scenario, measure, write_profile

    scenario = calibration_scenario(args.scenario, args.sets, args.model, args.batch, args.reduction)
    inputs = (args.scenario,) if args.scenario is not None else ()
    output = output_file(args.output, "profile.yaml", inputs)  # before measuring: a bad path fails at once
    args.writing = f"{output} is written whole or not at all"  # for the message after a Ctrl-C
    measured = measure(scenario, args.backend, args.repeats, args.warmup)
    path = write_profile(measured, output)
    print(
        f"{measured['device']}: median {measured['median_s'] * 1e3:.3f} ms per batch of "
        f"{measured['batch_size']} "
        f"(p10 {measured['p10_s'] * 1e3:.3f}, p90 {measured['p90_s'] * 1e3:.3f}, {measured['repeats']} "
        "repeats)\n"
        f"wrote {path}; use it with  cluster: {{compute: {{profile: {path}}}}}"
    )
    return 0


def _replay(args: argparse.Namespace) -> int:
    from fred.tools.formats import count, seconds
    from fred.tools.replay import replay

    timings = (
        output_file(args.timings, "timings.csv", (args.run_dir,)) if args.timings else None
    )  # fail at once
    if timings is not None:
        args.writing = f"{timings} is written whole or not at all"  # for the message after a Ctrl-C
    with _count_bar(f"replay {Path(args.run_dir).name}", sys.stderr.isatty()) as progress:
        report = replay(
            args.run_dir, args.backend, args.check, args.rtol, args.atol, args.matmul_precision, progress
        )
    for note in report.notes:
        print(f"note: {note}", file=sys.stderr)
    grads = report.gradients
    warm = grads[~grads["compiled"]]
    print(
        f"replayed {report.replayed_calls:,} of {count(report.recorded_calls, 'recorded call')} on "
        f"{report.device} "
        f"in {seconds(report.wall_s)} (calls the final parameters do not depend on are skipped)"
    )
    if len(warm):
        print(
            f"{count(len(grads), 'gradient call')}: real median {warm['real_s'].median() * 1e3:.3f} ms "
            f"(p90 {warm['real_s'].quantile(0.9) * 1e3:.3f}; first call of each shape, with compilation, "
            "left out), "
            f"simulated median {warm['simulated_s'].median() * 1e3:.3f} ms per worker step"
        )
    floats = lambda x: f"{x:.3g}"  # noqa: E731
    if report.steps is not None:
        print("each step against the same step on the run's backend, from the same inputs:")
        print(report.steps.to_string(index=False, float_format=floats))
        print("final parameters against the run's (differences of single steps grow over a long run):")
    print(report.leaves.to_string(index=False, float_format=floats))
    if timings is not None:
        write = grads.to_parquet if timings.suffix == ".parquet" else grads.to_csv
        write_whole(timings, lambda partial: write(partial, index=False))
    tolerance = "" if args.check == "bitwise" else f" (rtol {args.rtol:g}, atol {args.atol:g})"
    print(f"{args.check} check{tolerance}: {'passed' if report.passed else 'FAILED'}")
    return 0 if report.passed else 1


def _sweep(args: argparse.Namespace) -> int:
    from fred.tools.compare import comparison_table, readable_table, sweep_runs
    from fred.tools.formats import count
    from fred.tools.seeds import parse_seeds
    from fred.tools.sweep import parse_grid, sweep, sweep_table_name, with_seeds

    grid = parse_grid(args.grid)
    if args.seeds is not None:
        grid = with_seeds(grid, parse_seeds(args.seeds), args.sets)
    progress = lambda line: print(line, file=sys.stderr, flush=True)  # a line per finished run
    if args.no_user_code:
        from fred.scenario.loading import apply_overrides, read_yaml
        from fred.tools.sweep import expand

        base = apply_overrides(read_yaml(args.scenario), list(args.sets))
        combos = expand(base, grid, args.scenario, Path(args.scenario).parent)
        _refuse_user_code([scenario for _, scenario in combos], args.scenario)
    out = (
        output_file(args.out, "sweep.parquet", (args.scenario,)) if args.out else None
    )  # a bad --out: at once
    table, ran = sweep(args.scenario, grid, Path(args.runs), args.jobs, args.executor, args.sets, progress)
    if (
        out is None
    ):  # beside its runs, not in the working directory; the runs folder is checked and made by now
        out = output_file(
            Path(args.runs) / sweep_table_name(args.scenario), "sweep.parquet", (args.scenario,)
        )
    write_whole(
        out, lambda partial: table.to_parquet(partial, index=False)
    )  # a Ctrl-C now leaves the earlier table whole
    args.done = True  # the runs and the table are written: a Ctrl-C now only cuts the printing short
    readable, _ = comparison_table(
        sweep_runs(out), per_seed=args.per_seed
    )  # fred compare's table: seeds averaged
    print(readable_table(readable, shutil.get_terminal_size().columns))
    print(
        f"\n{count(len(table), 'combination')}: {ran:,} made, {len(table) - ran:,} reused; table in {out} "
        f"(fred compare {out} plots it)"
    )
    return 0


def _plot(args: argparse.Namespace) -> int:
    from fred.runs.analysis import SUMMARY_FIELDS_PLOTTED, with_summary_fields
    from fred.runs.api import load_run
    from fred.tools.plots import (
        loss_curves,
        staleness_histograms,
        timeline,
        timeline_entities,
        timeline_window,
    )
    from fred.tools.timeline_rows import check_workers, parse_workers

    result = with_summary_fields(
        load_run(args.run_dir), SUMMARY_FIELDS_PLOTTED, "plot"
    )  # before any figure is written
    window = timeline_window(
        result.events, args.start_s, args.end_s, ("--from", "--to")
    )  # so is a bad window
    workers = parse_workers(args.workers) if args.workers is not None else None
    if workers is not None:  # and workers the run has not got
        check_workers(timeline_entities(result.events), workers)
    out = Path(args.out) if args.out else Path(args.run_dir) / "plots"
    args.writing = (
        f"{out} may hold only some of the figures (each is written whole)"  # for the message after a Ctrl-C
    )
    losses = loss_curves([result], out, svg=args.svg)
    if not losses:
        print("note: no loss curves: the run has no evaluation losses (a timing-only run)", file=sys.stderr)
    paths = losses + staleness_histograms([result], out, args.svg)
    paths += timeline(result, out, *window, workers=workers, svg=args.svg)
    print("\n".join(str(p) for p in paths))
    return 0


def _trace(args: argparse.Namespace) -> int:
    from fred.runs.api import load_run
    from fred.tools.formats import count
    from fred.tools.trace import write_trace

    result = load_run(args.run_dir)
    output = (
        output_file(args.output, "trace.json", (args.run_dir,))
        if args.output
        else Path(args.run_dir) / "trace.json"
    )
    args.writing = f"{output} is written whole or not at all"  # for the message after a Ctrl-C
    path = write_trace(result.events, output)
    linked = int((result.events["peer"].fillna("") != "").sum())
    twice = (
        (
            f", of which {count(linked, 'transfer')} {'is' if linked == 1 else 'are'} drawn twice (on the "
            "sender's track "
            "and the link's)"
        )
        if linked
        else ", no transfers among them"
    )
    print(
        f"{path}: {count(len(result.events), 'event')}{twice}; open it in https://ui.perfetto.dev or "
        "chrome://tracing"
    )
    return 0


def _list(args: argparse.Namespace) -> int:
    from fred.scenario import registry

    strategies = registry.all_strategies()
    width = max(len(s.name) for s in strategies)  # one column, however long a name
    for strategy in strategies:
        plugin = (
            f"  [{strategy.source}]" if strategy.source.split(".")[0] not in registry.PLUGIN_PACKAGES else ""
        )
        print(f"{strategy.name:<{width}}  {strategy.summary}{plugin}")
    for problem in registry.problems():  # plug-ins left out; the others work
        print(f"fred list: {problem}", file=sys.stderr)
    return 0


class _progress:
    """A rich progress bar on a terminal; nothing at all otherwise."""

    def __init__(self, scenario, show: bool):
        self.scenario, self.show = scenario, show

    def __enter__(self) -> Callable[[float, int, float], None] | None:
        if not self.show:
            return None
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        stop = self.scenario.stop
        self.total = stop.max_updates if stop.max_updates is not None else stop.max_sim_time_s
        self.by_updates = stop.max_updates is not None
        self.bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.fields[info]}"),
            TimeElapsedColumn(),
            transient=True,
        )
        self.task = self.bar.add_task(
            self.scenario.name, total=self.total, info="loading data, building the model"
        )
        self.bar.start()
        return self.update

    def update(self, sim_time_s: float, updates: int, eval_loss: float) -> None:
        done = updates if self.by_updates else sim_time_s
        info = f"t={sim_time_s:.3f}s  updates={updates}  eval_loss={eval_loss:.4f}"
        if updates == 0:  # JAX compiles each function at its first call: seconds, before the first update
            info += "  (compiling the first steps)"
        self.bar.update(self.task, completed=min(done, self.total), info=info)

    def __exit__(self, *exc) -> None:
        if self.show:
            self.bar.stop()


class _count_bar:
    """A rich bar of ``(done, total)`` on a terminal; nothing at all otherwise."""

    def __init__(self, description: str, show: bool):
        self.description, self.show = description, show

    def __enter__(self) -> Callable[[int, int], None] | None:
        if not self.show:
            return None
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            transient=True,
        )
        self.task = self.bar.add_task(self.description, total=None)
        self.bar.start()
        return lambda done, total: self.bar.update(self.task, completed=done, total=total)

    def __exit__(self, *exc) -> None:
        if self.show:
            self.bar.stop()


def _print_summary(summary: dict, out: Path) -> None:
    """The summary's main fields, each number as every command writes it (summary.json keeps them raw)."""
    from fred.tools import formats

    shown: dict[str, Callable[[Any], str]] = {
        "workers": lambda v: f"{v:,}",
        "updates": lambda v: f"{v:,}",
        "sim_time_s": formats.seconds,
        "wall_time_s": formats.seconds,
        "bytes_sent": formats.bytes_,
        "final_eval_loss": formats.number,
        "final_eval_accuracy": formats.percent,
        "mean_staleness": lambda v: formats.number(v, 3),
    }
    width = max(len(k) for k in SUMMARY_KEYS)
    for key in SUMMARY_KEYS:
        value = summary.get(key)
        numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
        text = shown[key](value) if key in shown and numeric else "-" if value is None else str(value)
        print(f"{key:<{width}}  {text}")
    print(f"{'run directory':<{width}}  {out}")


if __name__ == "__main__":
    entry()
