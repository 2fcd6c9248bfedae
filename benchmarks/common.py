"""What every benchmark shares: best-of timing, plain-text tables, machine facts, the JSON file."""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import jax
import simpy

import fred
from fred.runs.host import cpu_model
from fred.runs.runner import _Controller

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def best_of(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    """One untimed warm-up call (compiles), then the best wall time of ``repeats`` calls."""
    out = fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def best_in_turn(fns: dict[str, Callable[[], Any]], repeats: int) -> tuple[dict[str, float], dict[str, Any]]:
    """Like :func:`best_of` for several functions, timed in turn within each repeat, so that
    a change of load on a shared machine hits all of them: best seconds and last result, by name."""
    out = {name: fn() for name, fn in fns.items()}  # warm-up: compiles
    best = {name: float("inf") for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            out[name] = fn()
            best[name] = min(best[name], time.perf_counter() - t0)
    return best, out


@contextmanager
def counted_steps() -> Iterator[list[int]]:
    """Count every SimPy event processed inside the block (each ``simpy.Environment.step``, in
    any environment): ``counts[0]`` once the block is left. The count costs a Python call per
    event, so time runs without it."""
    step, counts = simpy.Environment.step, [0]

    def counting(env: simpy.Environment) -> None:
        step(env)  # raises on an empty queue: that call processed nothing and is not counted
        counts[0] += 1

    simpy.Environment.step = counting  # type: ignore[method-assign]
    try:
        yield counts
    finally:
        simpy.Environment.step = step  # type: ignore[method-assign]


@contextmanager
def timed_loop() -> Iterator[list[float]]:
    """The wall seconds of a fred run's simulation loop (``_Controller.drive``: stepping SimPy
    until the stop, with the controller's checks between steps; not building, not the final
    evaluation, not the tables), for the last run inside the block: ``seconds[0]``."""
    drive, seconds = _Controller.drive, [0.0]

    def timed(controller: _Controller, interrupt: Any) -> float:
        t0 = time.perf_counter()
        try:
            return drive(controller, interrupt)
        finally:
            seconds[0] = time.perf_counter() - t0

    _Controller.drive = timed  # type: ignore[method-assign]
    try:
        yield seconds
    finally:
        _Controller.drive = drive  # type: ignore[method-assign]


def bare_simpy_loop(processes: int, events: int) -> tuple[Callable[[], float], int]:
    """The bare SimPy loop a simulation's event rate is held against: ``processes`` processes,
    each waiting out one timeout after another (at times apart by a nanosecond per process, so
    that the queue holds one event per process, none simultaneous), about ``events`` events
    in all, each process's start and end included (``per_process`` timeouts + 2 events each).
    Returns a function that builds the loop and returns the seconds ``env.run()`` took, and
    the number of events it processes."""
    per_process = max(events // processes - 2, 1)

    def run() -> float:
        env = simpy.Environment()

        def proc(k: int) -> Iterator[simpy.Event]:
            for _ in range(per_process):
                yield env.timeout(0.1 + k * 1e-9)

        for k in range(processes):
            env.process(proc(k))
        t0 = time.perf_counter()
        env.run()
        return time.perf_counter() - t0

    return run, processes * (per_process + 2)


def machine() -> dict[str, Any]:
    """The facts a timing depends on, stored next to it."""
    return {
        "python": platform.python_version(),
        "jax": jax.__version__,
        "backend": jax.default_backend(),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "processor": cpu_model(),
        "load_average_1m": os.getloadavg()[0],  # other work on the machine slows every timing
    }


def options(doc: str, quick: str, repeats: str, results: Path) -> argparse.ArgumentParser:
    """The options every benchmark takes: ``--quick`` (what it leaves out), ``--repeats``, ``--out``."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=quick)
    parser.add_argument("--repeats", type=int, help=repeats)
    parser.add_argument("--out", type=Path, default=results, help="where to write the JSON")
    return parser


def begin(
    parser: argparse.ArgumentParser,
    argv: list[str] | None,
    full: int,
    quick: int,
    first_line: str | None = None,
) -> tuple[argparse.Namespace, float, dict[str, Any]]:
    """Parse the options (``args.repeats`` defaults to ``full``, or ``quick`` with ``--quick``),
    note the start time and the machine, and print the first line: ``first_line``, or what
    was measured on what. Returns (options, start time, machine facts)."""
    args = parser.parse_args(argv)
    args.repeats = args.repeats or (quick if args.quick else full)
    started, facts = time.perf_counter(), machine()
    print(
        first_line
        or f"fred {fred.__version__} | jax {facts['jax']} on {facts['backend']} | {facts['cpu_count']} CPUs"
    )
    return args, started, facts


def say_timing(args: argparse.Namespace, how: str = "") -> None:
    """The line that says how the cases are timed: full or quick, best of how many repeats."""
    print(f"{'quick' if args.quick else 'full'} run: best of {args.repeats} after one warm-up{how}\n")


def jittered_cluster(workers: int, step_time_s: float) -> dict[str, Any]:
    """The ``cluster`` and ``network`` sections of the shipped scenarios' clusters: ``workers``
    whose steps take ``step_time_s``, jittered (lognormal, sigma 0.1), 50 us and 10 Gbit/s links."""
    return {
        "cluster": {
            "workers": workers,
            "compute": {"step_time_s": step_time_s},
            "jitter": {"kind": "lognormal", "sigma": 0.1},
        },
        "network": {"latency_s": 5.0e-5, "bandwidth_bps": 1.25e9},
    }


def write_results(path: Path, results: dict[str, Any], started: float) -> None:
    """Write ``results`` with the benchmark's own wall time (since ``started``) and say where."""
    results["benchmark_wall_s"] = time.perf_counter() - started
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {path} (benchmark took {results['benchmark_wall_s']:.1f} s)")


def table(headers: list[str], rows: list[list[Any]]) -> str:
    cells = [[h for h in headers]] + [[_fmt(v) for v in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    line = lambda r: "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths)))
    return "\n".join([line(cells[0]), line(["-" * w for w in widths])] + [line(r) for r in cells[1:]])


def _fmt(v: Any) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1e-3 and v != 0 else f"{v:.3f}" if abs(v) < 100 else f"{v:,.0f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)
