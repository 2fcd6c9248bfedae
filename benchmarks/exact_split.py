#!/usr/bin/env python
"""What SSGD's exactness for every batch costs: a gradient step's flush with and without the tiles.

    python benchmarks/exact_split.py            # best of 20
    python benchmarks/exact_split.py --quick    # best of 5

For a batch per worker that is not a power of two, the exact reduction's gradient calls also
return the sums of the global tree's nodes inside each shard, and the all-reduce puts the
large batch's tree together from them (``fred.numerics.assembly.assemble``). This times one
SSGD step's numbers, n workers of batch b on the digits MLP [64]: every worker's request served
by ``GradientService`` (its calls of up to 256 rows), then ``sum_grads`` over the shards, as an
all-reduce takes it. ``tiled`` is the product; ``fixed tree`` is the same step with the shards
not told where they lie (``Numerics.starts`` answering ``None``): each shard's own tree, then the
tree over shards, as SSGD summed such batches before (not large-batch SGD's bits). It also
times whole runs (``fred.run``, 200 SSGD steps, compiled programs warm, best of a quarter as
many repeats) both ways.
Ratios, never asserts; results also go to ``benchmarks/results/exact_split.json``.
"""

from __future__ import annotations

import sys
from typing import Any

import jax
import numpy as np
from common import RESULTS_DIR, begin, best_in_turn, options, table, write_results

import fred
from fred.numerics.gradients import Numerics, sum_grads
from fred.runs.api import resolve
from fred.runs.runner import build
from fred.simulation.engine import GradientService

LAYOUTS = ((3, 24), (8, 24), (16, 12), (4, 100), (16, 3))  # (workers, batch per worker)
RUN_LAYOUTS = ((8, 24), (16, 3))
RESULTS = RESULTS_DIR / "exact_split.json"


def scenario(workers: int, batch: int, steps: int = 1) -> dict[str, Any]:
    return {
        "name": "bench-exact-split",
        "seed": 0,
        "model": {"kind": "mlp", "hidden": [64], "activation": "relu"},
        "data": {"source": {"kind": "digits"}, "batch_size": batch},
        "cluster": {"workers": workers, "compute": {"step_time_s": 0.01}},
        "strategy": {"name": "ssgd"},
        "stop": {"max_updates": steps},
        "eval": {"every_updates": 100_000},
    }


class Untiled:
    """Numerics.starts answering None for the duration: the fixed tree over shards."""

    def __enter__(self) -> None:
        self.starts = Numerics.starts
        Numerics.starts = lambda self, workers, batch: None  # type: ignore[method-assign]

    def __exit__(self, *_: object) -> None:
        Numerics.starts = self.starts  # type: ignore[method-assign]


def step(numerics: Numerics, dataset: Any, params: Any, rows: np.ndarray) -> Any:
    """Every worker's gradient request, served, then the all-reduce's sum of the shards."""
    service = GradientService(numerics, dataset)
    requests = [service.request(params, r, w) for w, r in enumerate(rows)]
    total = sum_grads([service.result(r) for r in requests])
    return jax.block_until_ready((total.grad, total.loss))


def measure_step(workers: int, batch: int, repeats: int) -> dict[str, Any]:
    built = build(resolve(scenario(workers, batch)))
    numerics, dataset, params = built.numerics, built.dataset, built.sim.init_params
    rows = np.random.default_rng(0).integers(0, len(dataset.y_train), size=(workers, batch))

    def untiled() -> Any:
        with Untiled():
            return step(numerics, dataset, params, rows)

    best, _ = best_in_turn(
        {"tiled": lambda: step(numerics, dataset, params, rows), "fixed": untiled}, repeats
    )
    return {"workers": workers, "batch": batch, "tiled_s": best["tiled"], "fixed_s": best["fixed"]}


def measure_run(workers: int, batch: int, steps: int, repeats: int) -> dict[str, Any]:
    def run() -> None:
        fred.run(scenario(workers, batch, steps))

    def untiled() -> None:
        with Untiled():
            run()

    best, _ = best_in_turn({"tiled": run, "fixed": untiled}, repeats)
    return {
        "workers": workers,
        "batch": batch,
        "steps": steps,
        "tiled_s": best["tiled"],
        "fixed_s": best["fixed"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = options(
        __doc__, "best of 5 instead of 20", "timed repeats per measurement (best is kept)", RESULTS
    )
    args, t_start, facts = begin(parser, argv, full=20, quick=5)
    print(f"digits MLP [64], SSGD; best of {args.repeats} after one warm-up\n")
    steps = [measure_step(n, b, args.repeats) for n, b in LAYOUTS]
    cells = [
        [s["workers"], s["batch"], 1e3 * s["fixed_s"], 1e3 * s["tiled_s"], s["tiled_s"] / s["fixed_s"]]
        for s in steps
    ]
    print(table(["workers", "batch", "fixed tree ms", "tiled ms", "ratio"], cells))
    runs = [measure_run(n, b, 200, max(args.repeats // 4, 2)) for n, b in RUN_LAYOUTS]
    cells = [
        [r["workers"], r["batch"], r["steps"], r["fixed_s"], r["tiled_s"], r["tiled_s"] / r["fixed_s"]]
        for r in runs
    ]
    print("\nwhole runs (fred.run, warm):")
    print(table(["workers", "batch", "steps", "fixed tree s", "tiled s", "ratio"], cells))
    write_results(
        args.out, {"machine": facts, "repeats": args.repeats, "steps": steps, "runs": runs}, t_start
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
