"""What every benchmark shares: best-of timing, plain-text tables, machine facts, the JSON file."""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax

import fred
from fred.runs.host import cpu_model

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


def begin(parser: argparse.ArgumentParser, argv: list[str] | None, full: int, quick: int,
          first_line: str | None = None) -> tuple[argparse.Namespace, float, dict[str, Any]]:
    """Parse the options (``args.repeats`` defaults to ``full``, or ``quick`` with ``--quick``),
    note the start time and the machine, and print the first line: ``first_line``, or what
    was measured on what. Returns (options, start time, machine facts)."""
    args = parser.parse_args(argv)
    args.repeats = args.repeats or (quick if args.quick else full)
    started, facts = time.perf_counter(), machine()
    print(first_line or f"fred {fred.__version__} | jax {facts['jax']} on {facts['backend']} | {facts['cpu_count']} CPUs")
    return args, started, facts


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

