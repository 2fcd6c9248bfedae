"""The ``fred`` command line's parser: each command, its arguments and its handler."""

from __future__ import annotations

import argparse
from typing import Any

from fred.tools.cli_compare import compare_command, sweep_command
from fred.tools.cli_measure import calibrate_command, fit_command, replay_command
from fred.tools.cli_run import run_command
from fred.tools.cli_show import list_command, plot_command, trace_command

MEMORY_HELP = (
    "refuse runs estimated to need more than N GB (default: the memory available, as /proc/meminfo "
    "or a container's limit says; FRED_MEMORY_LIMIT_GB=N does the same)"
)


DEBUG_HELP = (
    "a bug in fred (exit status 3) prints its traceback here, not only the line that says where it is kept"
)


SEEDS_HELP = "run {what} once with each seed: N for seeds 0 to N-1 (--seeds 3), or the seeds (--seeds 0,4,7)"
NO_USER_CODE_HELP = "refuse a scenario that names Python code to import and run (model.factory, model.loss)"


def build_parser() -> argparse.ArgumentParser:
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
    _add_run(sub)
    _add_list(sub)
    _add_compare(sub)
    _add_plot(sub)
    _add_calibrate(sub)
    _add_replay(sub)
    _add_sweep(sub)
    _add_trace(sub)
    _add_fit(sub)
    for command in sub.choices.values():  # after the command too: fred run S.yaml --debug
        command.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP)
    return parser


def _add_run(sub: Any) -> None:
    """``fred run``: one scenario, or the run a checkpoint finishes."""
    run = sub.add_parser("run", help="run one scenario and write its run directory")
    run.add_argument("scenario", nargs="?", help="scenario YAML file (not with --resume)")
    run.add_argument(
        "--out",
        help="run directory (default: runs/<name>-s<seed>-<hash of the resolved scenario>); "
        "it replaces an earlier run there, never other files",
    )
    _add_sets(run, "override a scenario field, e.g. --set cluster.workers=16 (repeatable)")
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
    run.set_defaults(handler=run_command)


def _add_list(sub: Any) -> None:
    """``fred list``."""
    lst = sub.add_parser("list", help="list the registered strategies")
    lst.set_defaults(handler=list_command)


def _add_compare(sub: Any) -> None:
    """``fred compare``."""
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
    _add_sets(
        cmp_, "override a field of every scenario file given, e.g. --set stop.max_updates=200 (repeatable)"
    )
    cmp_.add_argument("--seeds", metavar="N|S1,S2", help=SEEDS_HELP.format(what="every scenario file given"))
    _add_runs_options(
        cmp_,
        "a row and a curve for each run; without it, runs that differ only by their seed are one row "
        "(mean ± sd over the seeds) and one curve (their mean, in a band from the least to the greatest)",
        NO_USER_CODE_HELP + "; finished runs and sweep tables are only read, never run",
    )
    cmp_.set_defaults(handler=compare_command)


def _add_plot(sub: Any) -> None:
    """``fred plot``."""
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
    plot.set_defaults(handler=plot_command)


def _add_calibrate(sub: Any) -> None:
    """``fred calibrate``."""
    cal = sub.add_parser("calibrate", help="measure real per-batch gradient time; write a compute profile")
    cal.add_argument(
        "scenario",
        nargs="?",
        help="the model, data, batch size and reduction to time (default: digits, MLP [64], batch 32, exact)",
    )
    cal.add_argument(
        "--model",
        metavar="SPEC",
        help=f"a model kind ({', '.join(_model_kinds())}) or a YAML mapping, "
        "e.g. '{kind: mlp, hidden: [128, 64]}'",
    )
    cal.add_argument("--batch", type=int, metavar="N", help="the batch size (rows per gradient step)")
    cal.add_argument("--reduction", choices=["exact", "fast"], help="how the batch's gradient is summed")
    _add_sets(
        cal, "override a field of the scenario timed, e.g. --set data.source.kind=synthetic (repeatable)"
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
    cal.set_defaults(handler=calibrate_command)


def _add_replay(sub: Any) -> None:
    """``fred replay``."""
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
    rep.set_defaults(handler=replay_command)


def _add_sweep(sub: Any) -> None:
    """``fred sweep``."""
    sw = sub.add_parser("sweep", help="run a Cartesian grid over scenario fields (resumable)")
    sw.add_argument("scenario")
    sw.add_argument(
        "--grid",
        action="append",
        default=[],
        metavar="PATH=V1,V2",
        help="a field and its values, e.g. --grid strategy.lr=0.01,0.1 (repeatable)",
    )
    _add_sets(sw, "override a scenario field in every run, e.g. --set stop.max_updates=200 (repeatable)")
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
    _add_runs_options(
        sw,
        "print a row for each run; without it, runs that differ only by their seed are one row "
        "(mean ± sd over the seeds), as fred compare prints them",
        NO_USER_CODE_HELP,
    )
    sw.set_defaults(handler=sweep_command)


def _add_trace(sub: Any) -> None:
    """``fred trace``."""
    trace = sub.add_parser("trace", help="export the event timeline as Chrome trace-event JSON (Perfetto)")
    trace.add_argument("run_dir")
    trace.add_argument(
        "-o",
        "--output",
        help="output file, or a directory to write trace.json in (default: RUN_DIR/trace.json)",
    )
    trace.set_defaults(handler=trace_command)


def _add_fit(sub: Any) -> None:
    """``fred fit``."""
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
    fit.set_defaults(handler=fit_command)


def _add_sets(command: argparse.ArgumentParser, help: str) -> None:
    """``--set PATH=VALUE``, repeatable: a scenario field overridden, as ``help`` says where."""
    command.add_argument("--set", dest="sets", action="append", default=[], metavar="PATH=VALUE", help=help)


def _add_runs_options(command: argparse.ArgumentParser, per_seed_help: str, no_user_code_help: str) -> None:
    """What the commands that make several runs share: ``--per-seed``, ``--memory-limit-gb`` and
    ``--no-user-code``."""
    command.add_argument("--per-seed", action="store_true", help=per_seed_help)
    command.add_argument("--memory-limit-gb", type=float, metavar="N", help=MEMORY_HELP)
    command.add_argument("--no-user-code", action="store_true", help=no_user_code_help)


def _model_kinds() -> list[str]:
    """The model kinds, in listing order, as the schema finds them (``fred/models/``)."""
    from fred.scenario.schema import KINDS  # pydantic: loaded by main before the parser is built

    return [section.model_fields["kind"].default for section in KINDS]
