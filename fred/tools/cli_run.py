"""``fred run``: one scenario, or the interrupted run a checkpoint finishes (``--resume``), and
what every command that runs a scenario shares: the refusal of user code, the summary printed."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from fred.runs import interrupt  # os, signal and threading only, like paths
from fred.runs.paths import check_replaceable  # os and pathlib only
from fred.scenario.errors import Refusal  # no imports of its own
from fred.tools.cli_stops import summary_id
from fred.tools.progress_bars import _progress

if TYPE_CHECKING:
    from fred.scenario.schema import Scenario

SUMMARY_KEYS = [
    "status", "stop_reason", "strategy", "workers", "sim_time_s", "updates",
    "final_eval_loss", "final_eval_accuracy", "bytes_sent", "mean_staleness", "params_sha256", "wall_time_s",
]  # fmt: skip


def refuse_user_code(scenarios: Sequence[Scenario], where: str) -> None:
    """--no-user-code: refuse, before anything runs, any of ``scenarios`` that would import code."""
    from fred.numerics.user_code import names_user_code

    for scenario in scenarios:
        named = names_user_code(scenario)
        if named:
            raise Refusal(
                f"{where}: {' and '.join(named)} would be imported and run, and --no-user-code refuses "
                "user code; leave --no-user-code out only if you trust that code"
            )


def run_command(args: argparse.Namespace) -> int:
    from fred.runs.api import default_run_dir, run
    from fred.scenario.loading import load_scenario

    if args.resume:
        if args.no_user_code:
            from fred.runs.checkpoint import checkpoint_dir
            from fred.scenario.loading import read_yaml, validate

            saved = checkpoint_dir(args.resume) / "scenario.yaml"
            if saved.is_file():
                refuse_user_code([validate(read_yaml(saved, own=True), str(saved))], str(saved))
        return _resume(args)
    if not args.scenario:
        raise Refusal("fred run needs a scenario file, or --resume RUN_DIR")
    scenario = load_scenario(args.scenario, args.sets, args.seed)
    if args.no_user_code:
        refuse_user_code([scenario], args.scenario)
    out = Path(args.out) if args.out else default_run_dir(scenario)
    check_replaceable(out)  # before the run: the rest of check_out is the run's own
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


def _status(summary: dict, out: Path) -> int:
    """A finished run's exit status; a run that ran out of memory says so, on stderr, in one line."""
    if summary.get("stop_reason") == "out_of_memory":
        print(f"fred: {summary['failure']}; the run so far is recorded as failed in {out}", file=sys.stderr)
    return 0 if summary["status"] in ("completed", "diverged") else 1


def _stop_says(args: argparse.Namespace, out: Path) -> None:
    """What a stop's line needs to know of ``fred run``: its run directory, which summary was
    there before, and where a checkpoint would be (imported here, not in the watcher thread)."""
    from fred.runs.checkpoint import checkpoint_dir

    args.out_resolved, args.summary_before = out, summary_id(out)
    if args.checkpoint_every_s is not None or args.resume:  # a resume's checkpoint stays
        args.checkpoint_file = checkpoint_dir(out) / "checkpoint.npz"


def _resume(args: argparse.Namespace) -> int:
    from fred.runs.api import resume

    if args.scenario or args.sets or args.seed is not None or args.out:
        raise Refusal("--resume takes only the run directory: the scenario is the checkpoint's")
    check_replaceable(Path(args.resume), "--resume")
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
