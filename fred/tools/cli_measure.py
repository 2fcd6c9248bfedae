"""``fred calibrate``, ``fred replay`` and ``fred fit``: the commands that measure real time and
real numerics against the simulation."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fred.runs.paths import output_file, write_whole  # os and pathlib only
from fred.tools.progress_bars import _count_bar


def fit_command(args: argparse.Namespace) -> int:
    from fred.tools.fit import command

    return command(args)


def calibrate_command(args: argparse.Namespace) -> int:
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


def replay_command(args: argparse.Namespace) -> int:
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
