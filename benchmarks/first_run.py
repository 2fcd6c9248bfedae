"""A first ``fred run scenarios/quickstart.yaml``: a new process with no compiled programs on disk.

    python benchmarks/first_run.py            # ~1 min: best of 3; --quick: best of 1

Each case is the whole command's wall time in a fresh process (``python -m fred run``),
writing its run directory to a temporary folder:

- **cold**: an empty compilation cache (``FRED_JAX_CACHE`` a new folder), as on a new
  machine or virtualenv; Python's bytecode of fred and its dependencies as installed.
- **cold, no bytecode**: also every module compiled from source (``PYTHONPYCACHEPREFIX`` a
  new folder), more than a fresh virtualenv pays (pip byte-compiles what it installs).
- **warm**: the cache as the cold run left it: the baseline, measured in the same run.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import RESULTS_DIR, begin, options, table, write_results

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "scenarios" / "quickstart.yaml"
RESULTS = RESULTS_DIR / "first_run.json"


def command_s(env: dict[str, str], out: Path) -> float:
    """Wall seconds of one ``fred run`` of the quickstart in a new process."""
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "fred", "run", str(QUICKSTART), "--out", str(out)],
        env=env,
        check=True,
        capture_output=True,
        cwd=out.parent,
    )
    return time.perf_counter() - started


def measure(repeats: int) -> dict[str, float]:
    best = {"cold": float("inf"), "cold, no bytecode": float("inf"), "warm": float("inf")}
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as scratch:
            folder = Path(scratch)
            env = dict(os.environ, FRED_JAX_CACHE=str(folder / "jax"))
            best["cold"] = min(best["cold"], command_s(env, folder / "cold"))
            best["warm"] = min(best["warm"], command_s(env, folder / "warm"))
            fresh = dict(env, FRED_JAX_CACHE=str(folder / "jax2"), PYTHONPYCACHEPREFIX=str(folder / "pyc"))
            best["cold, no bytecode"] = min(best["cold, no bytecode"], command_s(fresh, folder / "fresh"))
    return best


def main(argv: list[str] | None = None) -> int:
    parser = options(__doc__, "best of 1 instead of 3", "times each case is run (best is kept)", RESULTS)
    args, t_start, facts = begin(parser, argv, full=3, quick=1)
    best = measure(args.repeats)
    print(table(["case", "wall s", "over warm"], [[k, v, v / best["warm"]] for k, v in best.items()]))
    results: dict[str, Any] = {"machine": facts, "repeats": args.repeats, "wall_s": best}
    write_results(args.out, results, t_start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
