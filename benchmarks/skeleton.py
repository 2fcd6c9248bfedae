#!/usr/bin/env python
"""The least a SimPy model can cost around the bare step: where fred's overhead comes from.

    python benchmarks/skeleton.py            # SSGD/ASGD x exact/fast x 8/64 workers, ~2 min
    python benchmarks/skeleton.py --quick    # 8 workers only, best of 2, ~30 s

``overhead.py`` compares fred with a bare jitted loop. Two *skeletons* sit between them:
the same cluster as a minimal SimPy model (one process per worker, each compute and each
push/fetch or all-reduce a timeout; no records, no tape, no links, no faults), with the
numerics done in one of two ways:

- **fused**: one compiled program per update, the bare loop's step. For ASGD it takes the
  gradient at the worker's (stale) copy and applies it to the server's parameters in the
  same program, so the work per update is the bare loop's exactly.
- **fred's programs**: the calls fred makes, built from fred's own jitted programs (the
  gradient call when a worker's compute ends, exact calls of up to ``CALL_ROWS`` rows;
  ``stacked_sum`` across SSGD's workers; the update), with none of fred's Python around them.

So, per case, ``fused / bare`` is what a SimPy model costs at all, ``fred's programs / bare``
what fred's call structure costs on top of it, and ``fred / fred's programs`` what the rest of
fred (records, links, tape, gradient service, hooks) costs per update. Ratios, never asserts;
the skeletons' simulated times do not matter here, only what they make the machine do.
"""

from __future__ import annotations

import functools
import sys
from typing import Any, Callable

import jax
import numpy as np
import simpy
from common import RESULTS_DIR, begin, best_in_turn, options, say_timing, table, write_results
from overhead import (
    LR,
    PERF_TARGET_RATIO,
    WORKERS,
    Bare,
    _exact_shard_sums,
    _fast_shard_sums,
    _sgd,
    digits_scenario,
    max_abs_diff,
    ssgd_rounds,
)

import fred
from fred.numerics.assembly import stacked_sum
from fred.numerics.gradients import CALL_ROWS
from fred.numerics.losses import example_loss
from fred.numerics.optim import make_sum_step, sgd

RESULTS = RESULTS_DIR / "skeleton.json"
UPDATES = 300  # ASGD always; SSGD at 8 workers (a 64-worker round is 8x the gradients: 1/8 of them)
TRANSFER_S = 5.0e-5  # a push or fetch in the skeletons; any constant does: the clock only orders events
ALLREDUCE_S = 1.0e-3


# ----------------------------------------------------------------------------- the two ways to compute
class Programs:
    """One case's compiled programs: the bare step, the fused parameter-server step, fred's calls."""

    def __init__(self, bare: Bare, reduction: str, per_worker_rows: int):
        loss = functools.partial(example_loss, bare.numerics.model, bare.dataset.task)
        sums = _exact_shard_sums if reduction == "exact" else _fast_shard_sums

        def ps_step(
            server, read, x_all, y_all, idx
        ):  # the gradient at the worker's copy, applied to the server's
            _, grad_sum = sums(loss, read, x_all[idx], y_all[idx], 1)
            return _sgd(server, grad_sum, idx.shape[0])

        self.bare, self.reduction, self.rows = bare, reduction, per_worker_rows
        self.ps_step = jax.jit(ps_step)
        self.opt = sgd(LR)
        self.sum_step = make_sum_step(self.opt)
        self.x_all, self.y_all, self.zero = bare.numerics._on_device(bare.dataset)

    def gradient(self, params, rows: np.ndarray, shards: int, stack: bool):
        """fred's gradient program on ``rows`` (``Numerics._call``: the tiles or shards it cuts them into)."""
        return self.bare.numerics._call(params, self.bare.dataset, rows, shards, stack)

    def fred_round(self, params, state, idx: np.ndarray, workers: int):
        """fred's SSGD round: gradient calls of up to CALL_ROWS rows (fast: one), the sum across them, the
        update."""
        per_call = workers if self.reduction == "fast" else max(1, CALL_ROWS // self.rows)
        calls = [
            self.gradient(
                params, idx[s * self.rows : (s + per_call) * self.rows], min(per_call, workers - s), True
            )
            for s in range(0, workers, per_call)
        ]
        grad, _ = stacked_sum(calls)
        return self.sum_step(params, state, grad, len(idx))


# ----------------------------------------------------------------------------- the SimPy skeletons
def ring(progs: Programs, workers: int, numbers: str, durations_s: np.ndarray) -> Callable[[], Any]:
    """SSGD: every worker computes, the last to finish makes the round's numbers, all wait for the all-reduce.
    ``numbers``: "none" (the SimPy model alone), "fused" or "programs"."""
    bare = progs.bare

    def run():
        env = simpy.Environment()
        st = {
            "params": bare.init_params,
            "opt": progs.opt.init(bare.init_params),
            "arrived": 0,
            "reduced": env.event(),
        }

        def worker(i: int):
            for k in range(bare.updates):
                yield env.timeout(durations_s[k, i])
                st["arrived"] += 1
                if st["arrived"] < workers:
                    yield st["reduced"]
                    continue
                if numbers == "fused":
                    st["params"], _ = bare.step(st["params"], bare.x, bare.y, bare.idx[k])
                elif numbers == "programs":
                    st["params"], st["opt"] = progs.fred_round(st["params"], st["opt"], bare.idx[k], workers)
                yield env.timeout(ALLREDUCE_S)
                st["arrived"], reduced, st["reduced"] = 0, st["reduced"], env.event()
                reduced.succeed()

        for i in range(workers):
            env.process(worker(i))
        env.run()
        return jax.block_until_ready(st["params"])

    return run


def parameter_server(
    progs: Programs, workers: int, numbers: str, durations_s: np.ndarray
) -> Callable[[], Any]:
    """ASGD: a worker computes on its copy, pushes, the server applies it at once, the worker fetches.
    ``numbers`` as for :func:`ring`."""
    bare = progs.bare

    def run():
        env = simpy.Environment()
        st = {"params": bare.init_params, "opt": progs.opt.init(bare.init_params), "k": 0}

        def worker(i: int):
            held, n = st["params"], 0
            while st["k"] < bare.updates:
                yield env.timeout(durations_s[n, i])
                n += 1
                if st["k"] >= bare.updates:  # the run ended while it computed
                    return
                k = st["k"]
                if numbers == "programs":  # fred computes a gradient when its compute time has passed
                    _, grads = progs.gradient(held, bare.idx[k], 1, False)
                yield env.timeout(TRANSFER_S)
                if numbers == "fused":
                    st["params"] = progs.ps_step(st["params"], held, bare.x, bare.y, bare.idx[k])
                elif numbers == "programs":
                    st["params"], st["opt"] = progs.sum_step(
                        st["params"], st["opt"], grads[0], len(bare.idx[k])
                    )
                st["k"] += 1
                yield env.timeout(TRANSFER_S)
                held = st["params"]

        for i in range(workers):
            env.process(worker(i))
        env.run()
        return jax.block_until_ready(st["params"])

    return run


# ----------------------------------------------------------------------------- one case
def case(strategy: str, reduction: str, workers: int, repeats: int) -> dict[str, Any]:
    updates = ssgd_rounds(UPDATES, workers, 5) if strategy == "ssgd" else UPDATES  # as overhead.py
    scn = digits_scenario(strategy, reduction, updates, workers)
    bare = Bare(scn, shards=workers if strategy == "ssgd" else 1)
    progs = Programs(bare, reduction, scn["data"]["batch_size"])
    rng = np.random.default_rng(0)  # the skeletons' compute times: lognormal around 10 ms, as the scenario's
    durations_s = 0.01 * rng.lognormal(0.0, 0.1, size=(updates + workers, workers))
    model = ring if strategy == "ssgd" else parameter_server
    timing_only = {**scn, "workload": {"timing_only": True}}
    best, out = best_in_turn(
        {
            "bare": bare.run_loop,
            "simpy": model(progs, workers, "none", durations_s),
            "fused": model(progs, workers, "fused", durations_s),
            "programs": model(progs, workers, "programs", durations_s),
            "fred_timing_only": lambda: fred.run(timing_only),
            "fred": lambda: fred.run(scn),
        },
        repeats,
    )
    per_update_us = {name: 1e6 * seconds / updates for name, seconds in best.items()}
    return {
        "workers": workers,
        "strategy": strategy,
        "reduction": reduction,
        "updates": updates,
        **{f"{name}_s": seconds for name, seconds in best.items()},
        "bare_us_per_update": per_update_us["bare"],
        "simpy_model_us_per_update": per_update_us["simpy"],
        "fred_timing_only_us_per_update": per_update_us["fred_timing_only"],
        "ratio_fused_over_bare": best["fused"] / best["bare"],
        "ratio_programs_over_bare": best["programs"] / best["bare"],
        "ratio_fred_over_bare": best["fred"] / best["bare"],
        "fred_rest_us_per_update": per_update_us["fred"] - per_update_us["programs"],
        # SSGD's rounds are the same batches in any schedule: making fred's calls must give fred's bits
        # (a check that the skeleton does fred's work); ASGD's order depends on the schedule, so no check.
        "programs_max_abs_diff_vs_fred": max_abs_diff(out["programs"], out["fred"].params)
        if strategy == "ssgd"
        else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = options(
        __doc__,
        "8 workers only",
        "timed repeats per case, in turn (best is kept); default 5, --quick 2",
        RESULTS,
    )
    args, started, facts = begin(parser, argv, full=5, quick=2)
    repeats = args.repeats
    say_timing(args, ", all four timed in turn")
    rows = []
    for workers in WORKERS[:1] if args.quick else WORKERS:
        for strategy in ("ssgd", "asgd"):
            for reduction in ("exact", "fast"):
                rows.append(case(strategy, reduction, workers, repeats))
                print(
                    f"  {workers} workers {strategy} {reduction}: fred/bare "
                    f"{rows[-1]['ratio_fred_over_bare']:.2f}",
                    file=sys.stderr,
                    flush=True,
                )
    print(
        "Skeletons: overhead.py's digits MLP [64] cases, each over its bare loop (target "
        f"{PERF_TARGET_RATIO})"
    )
    print(
        table(
            [
                "workers",
                "strategy",
                "reduction",
                "updates",
                "bare us/update",
                "SimPy model us/update",
                "fred timing-only us/update",
                "fused skeleton",
                "fred's programs",
                "fred",
                "rest of fred us/update",
                "programs vs fred: max abs diff",
            ],
            [
                [
                    r["workers"],
                    r["strategy"],
                    r["reduction"],
                    r["updates"],
                    r["bare_us_per_update"],
                    r["simpy_model_us_per_update"],
                    r["fred_timing_only_us_per_update"],
                    r["ratio_fused_over_bare"],
                    r["ratio_programs_over_bare"],
                    r["ratio_fred_over_bare"],
                    r["fred_rest_us_per_update"],
                    "-" if r["programs_max_abs_diff_vs_fred"] is None else r["programs_max_abs_diff_vs_fred"],
                ]
                for r in rows
            ],
        )
    )
    print(
        "   SimPy model: the skeleton computing nothing; fred timing-only: fred computing nothing "
        "(workload.timing_only);"
    )
    print(
        "   fused: the skeleton making one bare-step call per update; fred's programs: the skeleton making "
        "fred's calls;"
    )
    print(
        "   the last three over the bare loop; rest of fred: (fred - fred's programs) / updates, the Python "
        "fred adds;"
    )
    print(
        "   max abs diff: the skeleton's final parameters against fred's (SSGD only: ASGD's order depends on "
        "the schedule)\n"
    )
    write_results(
        args.out,
        {
            "quick": args.quick,
            "repeats": repeats,
            "target_ratio": PERF_TARGET_RATIO,
            "machine": facts,
            "cases": rows,
        },
        started,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
