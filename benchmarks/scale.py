#!/usr/bin/env python
"""Scale: simulated events per second and wall time at 32, 256 and 1,024 workers, timing only.

    python benchmarks/scale.py            # 32, 256, 1024 workers x 1, 2, 4 iterations
    python benchmarks/scale.py --quick    # 32, 256 workers x 1, 2, 4 iterations

Real gradients for 1,024 workers would measure JAX, not the engine, so every run
here has ``workload.timing_only: true``: the same schedule, links and records, with
no numbers. Four strategies: ring all-reduce (``arsgd``: every iteration all n
workers all-reduce a ResNet-50-sized gradient; also with recursive doubling and
halving-doubling, ``network.allreduce``), SGP (``directed_exponential``,
one peer: every iteration each node sends one message), and two on one parameter
server, whose downlink every push shares: ASGD (each push is an update; also with
``network.sharing: fcfs``, pushes served one after another) and SASGD with 4
soft-sync groups (an update every n/4 pushes). An iteration is one
round of arsgd (one update), one step of every SGP node (n updates), one push of
every ASGD worker on average (n updates) and 4 SASGD updates (n pushes).

For each run: ``fred.run`` wall time (best of ``--repeats``; runs over 5 s once),
SimPy events (counted in one extra run by wrapping ``simpy.Environment.step``: the
count is deterministic), event rows (``result.events``), link bookings (calls of
``Network.reserve``) and one-pass rings (``Network.ring_on_idle_links`` calls that
booked a whole ring all-reduce: its 2n(n-1) chunk transfers without a ``reserve``
each; a ring on busy links books them one by one). Then least squares of
``log(wall) = a + b log(workers) + c log(iterations)`` per strategy: ``b`` and ``c``
are how cost grows. Ratios and fits, never asserts; results also go to
``benchmarks/results/scale.json``.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import numpy as np
import simpy
from common import RESULTS_DIR, begin, options, table, write_results

import fred
from fred.runs.runner import _Controller
from fred.simulation.network import Network

STRATEGIES: dict[str, dict[str, Any]] = {
    "ring all-reduce": {"name": "arsgd"},
    "recursive doubling": {"name": "arsgd"},
    "halving-doubling": {"name": "arsgd"},
    "sgp": {"name": "sgp", "topology": "directed_exponential", "peers": 1},
    "ps asgd": {"name": "asgd"},
    "ps asgd fcfs": {"name": "asgd"},
    "ps sasgd/4": {"name": "sasgd", "n_soft": 4},
}
NETWORKS: dict[str, dict[str, Any]] = {  # AR-SGD under each all-reduce algorithm; ASGD's pushes queued
    "recursive doubling": {"allreduce": "recursive_doubling"},
    "halving-doubling": {"allreduce": "halving_doubling"},
    "ps asgd fcfs": {"sharing": "fcfs"},
}
RESULTS = RESULTS_DIR / "scale.json"
ONCE_OVER_S = 5.0  # a run this long is timed once: its noise is small next to its length


def scenario(
    strategy: dict[str, Any], workers: int, iterations: int, network: dict[str, Any] | None = None
) -> dict[str, Any]:
    """ResNet-50 messages and 0.1 s steps; evaluation (NaN rows in timing-only runs) only at the ends."""
    per_iteration = {"arsgd": 1, "sasgd": strategy.get("n_soft", workers)}.get(strategy["name"], workers)
    updates = iterations * per_iteration
    return {
        "name": f"scale-{strategy['name']}-{workers}",
        "seed": 0,
        "model": {"kind": "logistic"},
        # batch 1: 1,024 workers' batches fit digits' 1,437 training rows; no batch is drawn anyway
        "data": {"source": {"kind": "digits"}, "batch_size": 1},
        "cluster": {
            "workers": workers,
            "compute": {"step_time_s": 0.1},
            "jitter": {"kind": "lognormal", "sigma": 0.1},
        },
        "workload": {"profile": "resnet50", "timing_only": True},
        "network": network or {},
        "strategy": strategy,
        "stop": {"max_updates": updates},
        "eval": {"every_updates": updates},
    }


def counted(scn: dict[str, Any]) -> tuple[int, int, int]:
    """SimPy events processed, link bookings made and rings booked in one pass by one run of ``scn``."""
    counts = {"steps": 0, "bookings": 0, "one_pass": 0}
    step, reserve, ring = simpy.Environment.step, Network.reserve, Network.ring_on_idle_links

    def counting_step(env):
        counts["steps"] += 1
        return step(env)

    def counting_reserve(net, *args, **kwargs):
        counts["bookings"] += 1
        return reserve(net, *args, **kwargs)

    def counting_ring(net, *args, **kwargs):
        done_s = ring(net, *args, **kwargs)
        counts["one_pass"] += done_s is not None
        return done_s

    simpy.Environment.step, Network.reserve = counting_step, counting_reserve  # type: ignore[method-assign]
    Network.ring_on_idle_links = counting_ring  # type: ignore[method-assign]
    try:
        fred.run(scn)
    finally:
        simpy.Environment.step, Network.reserve = step, reserve  # type: ignore[method-assign]
        Network.ring_on_idle_links = ring  # type: ignore[method-assign]
    return counts["steps"], counts["bookings"], counts["one_pass"]


def timed(scn: dict[str, Any], repeats: int) -> tuple[float, float, fred.RunResult]:
    """Best wall time of ``fred.run(scn)`` and of its simulation loop alone (``_Controller.drive``:
    SimPy, the strategy and the records, without building, tables and summary). A run longer
    than ONCE_OVER_S is not repeated."""
    drive = _Controller.drive
    loop_s = [float("inf")]

    def timed_drive(controller, interrupt):
        t0 = time.perf_counter()
        try:
            return drive(controller, interrupt)
        finally:
            loop_s[0] = min(loop_s[0], time.perf_counter() - t0)

    best, result = float("inf"), None
    _Controller.drive = timed_drive  # type: ignore[method-assign]
    try:
        for _ in range(repeats):
            t0 = time.perf_counter()
            result = fred.run(scn)
            best = min(best, time.perf_counter() - t0)
            if best > ONCE_OVER_S:
                break
    finally:
        _Controller.drive = drive  # type: ignore[method-assign]
    return best, loop_s[0], result  # type: ignore[return-value]


def measure(label: str, workers: int, iterations: int, repeats: int) -> dict[str, Any]:
    scn = scenario(STRATEGIES[label], workers, iterations, NETWORKS.get(label))
    wall_s, loop_s, result = timed(scn, repeats)
    events, bookings, one_pass = counted(scn)
    return {
        "strategy": label,
        "workers": workers,
        "iterations": iterations,
        "updates": int(result.summary["updates"]),
        "sim_time_s": result.summary["sim_time_s"],
        "wall_s": wall_s,
        "loop_s": loop_s,
        "simpy_events": events,
        "event_rows": len(result.events),
        "link_bookings": bookings,
        "one_pass_rings": one_pass,
        "simpy_events_per_s": events / loop_s,
        "event_rows_per_s": len(result.events) / loop_s,
        "link_bookings_per_s": bookings / loop_s,
    }


def fit(rows: list[dict[str, Any]], seconds: str) -> dict[str, Any]:
    """Least squares of log(seconds) = a + b log(workers) + c log(iterations), and b alone at
    each iteration count (does it drift?)."""
    design = np.array([[1.0, np.log(r["workers"]), np.log(r["iterations"])] for r in rows])
    (a, b, c), *_ = np.linalg.lstsq(design, np.log([r[seconds] for r in rows]), rcond=None)
    alone = {}
    for iterations in sorted({r["iterations"] for r in rows}):
        sub = [r for r in rows if r["iterations"] == iterations]
        slope, _ = np.polyfit(np.log([r["workers"] for r in sub]), np.log([r[seconds] for r in sub]), 1)
        alone[iterations] = float(slope)
    return {
        "a": float(a),
        "workers_exponent": float(b),
        "iterations_exponent": float(c),
        "workers_exponent_at": alone,
    }


def main(argv: list[str] | None = None) -> int:
    parser = options(
        __doc__, "32 and 256 workers only", "timed repeats per run (best is kept; default 3)", RESULTS
    )
    first_line = f"fred {fred.__version__} | simpy {simpy.__version__} | {os.cpu_count()} CPUs | timing only"
    args, t_start, facts = begin(parser, argv, full=3, quick=3, first_line=first_line)
    workers = (32, 256) if args.quick else (32, 256, 1024)
    iterations = (1, 2, 4)
    print(f"best of {args.repeats} (runs over {ONCE_OVER_S:.0f} s once); events counted in one extra run\n")
    fred.run(scenario(STRATEGIES["sgp"], 4, 1))  # warm: imports, data loading, model init

    rows = [measure(label, n, k, args.repeats) for label in STRATEGIES for n in workers for k in iterations]
    headers = ["strategy", "workers", "iters", "updates", "wall s", "loop s", "SimPy events", "events/s"]
    headers += ["event rows", "rows/s", "link bookings", "bookings/s", "one-pass rings"]
    keys = [
        "strategy",
        "workers",
        "iterations",
        "updates",
        "wall_s",
        "loop_s",
        "simpy_events",
        "simpy_events_per_s",
    ]
    keys += ["event_rows", "event_rows_per_s", "link_bookings", "link_bookings_per_s", "one_pass_rings"]
    print(table(headers, [[r[k] for k in keys] for r in rows]))
    print("   wall: fred.run; loop: its simulation loop alone; per second: over the loop's time")
    print()

    fits = {
        seconds: {label: fit([r for r in rows if r["strategy"] == label], seconds) for label in STRATEGIES}
        for seconds in ("wall_s", "loop_s")
    }
    print("Least squares: log(seconds) = a + b log(workers) + c log(iterations)")
    cells = []
    for seconds, by_strategy in fits.items():
        for label, f in by_strategy.items():
            per = ", ".join(f"{b:.2f} at {k}" for k, b in f["workers_exponent_at"].items())
            cells.append(
                [label, seconds.removesuffix("_s"), f["workers_exponent"], f["iterations_exponent"], per]
            )
    print(table(["strategy", "of", "b (workers)", "c (iterations)", "b alone, per iteration count"], cells))
    print()

    results = {"quick": args.quick, "repeats": args.repeats, "machine": facts, "runs": rows, "fits": fits}
    write_results(args.out, results, t_start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
