#!/usr/bin/env python
"""Scale targets: 100 timing-only iterations at 1,024 and 4,096 workers, on fairly shared links.

    python benchmarks/scale_targets.py           # 256, 1,024 and 4,096 workers
    python benchmarks/scale_targets.py --quick   # 256 and 1,024 workers

AR-SGD under each all-reduce algorithm (``network.allreduce``) and SGP (one peer of a
directed exponential graph) on ResNet-50-sized messages and 0.1 s steps, as in
``benchmarks/scale.py``, with the default ``network.sharing: fair``. For each: the wall time
of ``fred.run``, the SimPy events it processed (counted by wrapping
``simpy.Environment.step``) and those events per second of its simulation loop, against a
bare SimPy loop measured in the same run (``workers`` processes that each wait out a
timeout per step, the same number of events). Then, per strategy, the least-squares growth
exponent of wall time in workers. Ratios, never asserts; results also go to
``benchmarks/results/scale_targets.json``.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import numpy as np
import simpy
from common import (
    RESULTS_DIR,
    bare_simpy_loop,
    begin,
    counted_steps,
    options,
    table,
    timed_loop,
    write_results,
)
from scale import STRATEGIES, scenario

import fred

CASES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {  # label -> (strategy, network)
    "ring": (STRATEGIES["ring all-reduce"], {"allreduce": "ring"}),
    "recursive doubling": (STRATEGIES["ring all-reduce"], {"allreduce": "recursive_doubling"}),
    "halving-doubling": (STRATEGIES["ring all-reduce"], {"allreduce": "halving_doubling"}),
    "binary tree": (STRATEGIES["ring all-reduce"], {"allreduce": "binary_tree"}),
    "double binary tree": (STRATEGIES["ring all-reduce"], {"allreduce": "double_binary_tree"}),
    "sgp": (STRATEGIES["sgp"], {}),
}
ITERATIONS = 100
RESULTS = RESULTS_DIR / "scale_targets.json"


def case(strategy: dict[str, Any], workers: int, network: dict[str, Any]) -> dict[str, Any]:
    """``scale.py``'s scenario on synthetic data large enough for 4,096 workers' batches (digits has 1,437
    rows)."""
    scn = scenario(strategy, workers, ITERATIONS, {**network, "sharing": "fair"})
    scn["data"] = {
        "source": {"kind": "synthetic", "features": 8, "classes": 2, "examples": 10_000},
        "batch_size": 1,
    }
    return scn


def run_counted(scn: dict[str, Any]) -> tuple[float, float, int]:
    """Wall time of ``fred.run(scn)``, of its simulation loop, and the SimPy events it processed."""
    with counted_steps() as events, timed_loop() as loop_s:
        t0 = time.perf_counter()
        fred.run(scn)
        wall_s = time.perf_counter() - t0
    return wall_s, loop_s[0], events[0]


def bare_simpy_events_per_s(processes: int, events: int) -> float:
    """Events per second of a bare SimPy loop (``common.bare_simpy_loop``) of about ``events`` events."""
    run, processed = bare_simpy_loop(processes, events)
    return processed / run()


def main(argv: list[str] | None = None) -> int:
    parser = options(__doc__, "256 and 1,024 workers only", "unused (each run is timed once)", RESULTS)
    first_line = (
        f"fred {fred.__version__} | simpy {simpy.__version__} | {os.cpu_count()} CPUs | timing only, sharing "
        "fair"
    )
    args, t_start, facts = begin(parser, argv, full=1, quick=1, first_line=first_line)
    sizes = (256, 1024) if args.quick else (256, 1024, 4096)
    fred.run(scenario(STRATEGIES["sgp"], 4, 1))  # warm: imports, data loading, model init
    rows = []
    for label, (strategy, network) in CASES.items():
        for workers in sizes:
            wall_s, loop_s, events = run_counted(case(strategy, workers, network))
            bare = bare_simpy_events_per_s(workers, events)
            rows.append(
                {
                    "case": label,
                    "workers": workers,
                    "iterations": ITERATIONS,
                    "wall_s": wall_s,
                    "loop_s": loop_s,
                    "simpy_events": events,
                    "events_per_s": events / loop_s,
                    "bare_events_per_s": bare,
                    "vs_bare": events / loop_s / bare,
                }
            )
            print(f"  {label} at {workers}: {wall_s:.1f} s", flush=True)
    print(
        table(
            [
                "case",
                "workers",
                "wall s",
                "loop s",
                "SimPy events",
                "events/s",
                "bare SimPy events/s",
                "ratio",
            ],
            [
                [
                    r["case"],
                    r["workers"],
                    r["wall_s"],
                    r["loop_s"],
                    r["simpy_events"],
                    r["events_per_s"],
                    r["bare_events_per_s"],
                    r["vs_bare"],
                ]
                for r in rows
            ],
        )
    )
    exponents = {}
    for label in CASES:
        sub = [r for r in rows if r["case"] == label]
        exponents[label] = float(
            np.polyfit(np.log([r["workers"] for r in sub]), np.log([r["wall_s"] for r in sub]), 1)[0]
        )
    print(table(["case", "growth exponent of wall time in workers"], [[k, v] for k, v in exponents.items()]))
    write_results(
        args.out, {"quick": args.quick, "machine": facts, "runs": rows, "exponents": exponents}, t_start
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
