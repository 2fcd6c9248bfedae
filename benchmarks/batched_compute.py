#!/usr/bin/env python
"""Batched client compute: many workers' gradients in one vmapped call vs one call per worker.

    python benchmarks/batched_compute.py            # 16 and 64 workers, best of 20
    python benchmarks/batched_compute.py --quick    # best of 5

When several workers ask for a gradient on the same parameters at the same
simulated instant (every SSGD round), ``fred.simulation.engine.GradientService`` serves them
with one ``Numerics.shard_sums_of(params, dataset, rows, shards)`` call over all
their rows. This measures what that saves against a Python loop of per-worker
calls (``shard_sums_of(params, dataset, rows_i, 1)``), for ``reduction: exact``
and ``fast``, on the overhead benchmark's model (digits MLP [64], batch 32 per
worker), and checks that the two give the same bits. Each timing is the best of
``--repeats`` after one untimed warm-up call that compiles, the variants timed in
turn within each repeat; results are waited for with ``block_until_ready``.
Ratios, never asserts; results also go to ``benchmarks/results/batched_compute.json``.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from common import RESULTS_DIR, begin, options, table, write_results

from fred.numerics.gradients import CHUNK_ROWS, GradSum
from fred.runs.api import resolve
from fred.runs.runner import build
from fred.simulation.engine import GradientService

WORKERS = (16, 64)
BATCH = 32
RESULTS = RESULTS_DIR / "batched_compute.json"


class Case:
    """One model and reduction, with every worker's batch drawn up front."""

    def __init__(self, reduction: str, workers: int):
        # One simulated worker is enough to build the model, data and initial parameters;
        # 64 workers of 32 rows would need more examples than digits' training split has.
        built = build(resolve(scenario(reduction)))
        self.numerics, self.dataset, self.params = built.numerics, built.dataset, built.sim.init_params
        draw = np.random.default_rng(0)  # rows with replacement: the gradients' cost does not care
        self.rows = draw.integers(0, len(self.dataset.y_train), size=(workers, BATCH))

    def batched(self) -> list[GradSum]:
        rows = self.rows.reshape(-1)
        return jax.block_until_ready(
            self.numerics.shard_sums_of(self.params, self.dataset, rows, len(self.rows))
        )

    def looped(self) -> list[GradSum]:
        sums = [self.numerics.shard_sums_of(self.params, self.dataset, rows, 1)[0] for rows in self.rows]
        return jax.block_until_ready(sums)

    def service(self) -> list[GradSum]:
        """Through the engine's GradientService: every worker requests, the first result flushes them all."""
        service = GradientService(self.numerics, self.dataset)
        requests = [service.request(self.params, rows) for rows in self.rows]
        return jax.block_until_ready([service.result(r) for r in requests])


def scenario(reduction: str) -> dict[str, Any]:
    return {
        "name": f"bench-batched-{reduction}",
        "seed": 0,
        "model": {"kind": "mlp", "hidden": [64], "activation": "relu"},
        "data": {"source": {"kind": "digits"}, "batch_size": BATCH},
        "strategy": {"name": "ssgd", "reduction": reduction},
        "stop": {"max_updates": 1},
    }


def max_abs_diff(a: list[GradSum], b: list[GradSum]) -> float:
    """Largest difference between the two lists' gradient sums and loss sums (0.0: the same values)."""
    leaves = lambda sums: jax.tree.leaves([(s.grad, s.loss, s.count) for s in sums])
    return max(float(np.max(np.abs(np.asarray(x) - np.asarray(y)))) for x, y in zip(leaves(a), leaves(b)))


def bit_identical(a: list[GradSum], b: list[GradSum]) -> bool:
    leaves = lambda sums: jax.tree.leaves([(s.grad, s.loss, s.count) for s in sums])
    return all(
        np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(leaves(a), leaves(b), strict=True)
    )


def same_program_up_to(case: Case, most_rows: int) -> int:
    """The largest multiple of CHUNK_ROWS up to which an example's exact per-example gradient is
    the same bits as in a CHUNK_ROWS-row call (the premise of batched == unbatched)."""
    numerics, ds = case.numerics, case.dataset
    rows = np.resize(case.rows.reshape(-1), most_rows)
    x, y = ds.x_train[rows], ds.y_train[rows]
    reference = jax.tree.leaves(numerics._per_example(case.params, x[:CHUNK_ROWS], y[:CHUNK_ROWS]))
    for n in range(2 * CHUNK_ROWS, most_rows + 1, CHUNK_ROWS):
        leaves = jax.tree.leaves(numerics._per_example(case.params, x[:n], y[:n]))
        if not all(
            np.array_equal(np.asarray(a)[:CHUNK_ROWS], np.asarray(b)) for a, b in zip(leaves, reference)
        ):
            return n - CHUNK_ROWS
    return most_rows


def best_of_each(fns: list[Callable[[], Any]], repeats: int) -> list[tuple[float, Any]]:
    """best_of for several functions, timed in turn within each repeat: a change of load on the
    machine then hits all of them, not whichever happened to run during it."""
    outs = [fn() for fn in fns]  # warm-up: compiles
    best = [float("inf")] * len(fns)
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            t0 = time.perf_counter()
            outs[i] = fn()
            best[i] = min(best[i], time.perf_counter() - t0)
    return list(zip(best, outs))


def measure(reduction: str, workers: int, repeats: int) -> dict[str, Any]:
    case = Case(reduction, workers)
    timed = best_of_each([case.batched, case.looped, case.service], repeats)
    (batched_s, batched), (looped_s, looped), (service_s, served) = timed
    return {
        "reduction": reduction,
        "workers": workers,
        "rows": workers * BATCH,
        "batched_s": batched_s,
        "looped_s": looped_s,
        "service_s": service_s,
        "speedup_batched_over_looped": looped_s / batched_s,
        "speedup_service_over_looped": looped_s / service_s,
        "bit_identical": bit_identical(batched, looped),
        "max_abs_diff": max_abs_diff(batched, looped),
        "service_bit_identical_to_batched": bit_identical(served, batched),
    }


def main(argv: list[str] | None = None) -> int:
    parser = options(
        __doc__, "best of 5 instead of 20", "timed repeats per measurement (best is kept)", RESULTS
    )
    args, t_start, facts = begin(parser, argv, full=20, quick=5)
    repeats = args.repeats
    print(f"digits MLP [64], batch {BATCH} per worker; best of {repeats} after one warm-up\n")

    rows = [measure(reduction, workers, repeats) for reduction in ("exact", "fast") for workers in WORKERS]
    headers = [
        "reduction",
        "workers",
        "rows",
        "batched ms",
        "looped ms",
        "speed-up",
        "service ms",
        "speed-up",
    ]
    headers += ["bit-identical", "max |diff|"]
    cells = [
        [r["reduction"], r["workers"], r["rows"], 1e3 * r["batched_s"], 1e3 * r["looped_s"]]
        + [r["speedup_batched_over_looped"], 1e3 * r["service_s"], r["speedup_service_over_looped"]]
        + [r["bit_identical"], r["max_abs_diff"]]
        for r in rows
    ]
    print(table(headers, cells))
    print("   batched: one shard_sums_of over every worker's rows; looped: one call per worker;")
    print("   service: the same through GradientService (requests, then one flush); speed-up = looped / that")
    print(
        "   bit-identical / max |diff|: batched vs looped gradient sums, loss sums and counts, every worker"
    )
    if not all(r["service_bit_identical_to_batched"] for r in rows):
        print("   NOTE: GradientService's results differ from the direct batched call")
    most_rows = max(WORKERS) * BATCH
    same_up_to = same_program_up_to(Case("exact", max(WORKERS)), most_rows)
    print(
        f"   exact per-example gradients are the same bits as in a {CHUNK_ROWS}-row call for calls of "
        f"up to {same_up_to:,} rows (checked to {most_rows:,})"
    )
    print()

    results = {"quick": args.quick, "repeats": repeats, "batch": BATCH, "machine": facts, "cases": rows}
    results["exact_per_example_same_bits_up_to_rows"] = same_up_to
    write_results(args.out, results, t_start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
