#!/usr/bin/env python
"""How much slower is fred than the bare JAX math it simulates? Ratios, never asserts.

    python benchmarks/overhead.py            # full run (300 updates per digits run), ~6-7 min
    python benchmarks/overhead.py --quick    # smoke run (30 updates; 4: 8 workers, fast only), ~1-1.5 min
    python benchmarks/overhead.py --profile  # also cProfile one fred run, top functions

Four measurements, all taken in this one process (so they share its CPU, its
JAX version and its thread settings), each the best of ``--repeats`` timed
repeats (things compared are timed in turn within each) after one untimed
warm-up run that pays every compilation:

All runs here keep per-example leaves (``strategy.exact_tile: 1``), the exact path the
same-bits loops rebuild; ``benchmarks/realistic.py`` measures the default tiles on a ResNet.

1. Overhead. 8- and 64-worker digits-MLP [64] runs through ``fred.run(dict)`` against
   bare jitted JAX loops that compute the same gradients of the same sizes and
   apply the same SGD updates, with no simulation around them: a plain loop (one
   vmap over the batch) and a same-bits loop (fred's own exact program), each
   checked bit for bit against fred's first step. Done for SSGD (``aggregation:
   allreduce``, iid sharding) and ASGD, each with ``reduction: exact`` and
   ``reduction: fast``. 1b: the same runs without numerics (timing only) and the
   floor of one call per computed value; 1c: the Python thread's busy share and
   the numerics tape's cost.
2. Exact vs fast: the cost of the bit-reproducible reduction, as a ratio.
3. Event throughput: a timing-heavy 64-worker logistic SSGD run; event rows per
   second from ``fred.run``, and SimPy events per second from stepping the
   environment by hand. 3b: timing-only runs (8-worker SSGD and ASGD on digits,
   the 64-worker run of 3) against a bare SimPy loop of as many processes and
   events (``common.bare_simpy_loop``): SimPy events per second, as a ratio.
4. Wider models: the eight cases of 1 on an MLP [512, 512] and a small CNN
   (fred's ``model: {kind: cnn}``, built by fred for the bare loops too), fewer
   SSGD rounds for costlier steps; fred over the fastest loop giving its bits.

Last, the verdicts: each target (fred over the fastest loop giving its bits
<= 1.3 in the eight MLP [512, 512] cases; a timing-only run's events per second >= 0.5
of the bare SimPy loop's), the value measured and whether it is met. The digits MLP [64]
cases are a regression record without a target: their floor is one call per computed
value (docs/determinism.md), measured in 1b.

Results are printed as tables and written to ``benchmarks/results/overhead.json``.
"""

from __future__ import annotations

import cProfile
import functools
import math
import pstats
import sys
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from common import (
    RESULTS_DIR,
    bare_simpy_loop,
    begin,
    best_in_turn,
    best_of,
    counted_steps,
    jittered_cluster,
    options,
    say_timing,
    table,
    timed_loop,
    write_results,
)

import fred
from fred.numerics import rng
from fred.numerics.assembly import pairwise_sum, tree_sum
from fred.numerics.data import GlobalBatchStream
from fred.numerics.kernels import CHUNK_ROWS, ZERO, leaf_sums, stored_chunks
from fred.numerics.losses import example_loss
from fred.numerics.optim import make_sum_step, sgd
from fred.runs.api import resolve
from fred.runs.records import Recorder
from fred.runs.runner import build
from fred.simulation.engine import GradientService

PERF_TARGET_RATIO = 1.3  # fred over the fastest loop giving its bits: all eight cases on MLP [512, 512]
EVENT_RATE_TARGET = 0.5  # a timing-only run's SimPy events per second over a bare SimPy loop's
WORKERS = (8, 64)  # the overhead is measured at both cluster sizes
BATCH = 32
# Section 4's models, each with its SSGD rounds at 8 workers (fewer for costlier steps: each case about a
# second).
WIDE_MLP = {"kind": "mlp", "hidden": [512, 512], "activation": "relu"}
CNN = {"kind": "cnn", "channels": [8, 16], "kernel_size": 3, "hidden": 64}  # on digits' 8 x 8 x 1 images
WIDER: tuple[tuple[str, dict[str, Any], int], ...] = (
    ("MLP [512, 512]", WIDE_MLP, 16),
    ("CNN [8, 16] k3, 64", CNN, 50),
)
# ASGD makes as many updates on every model: with fewer, the gradients its workers have in flight when
# the run stops (computed by fred, never applied, absent from the loop) would be a large part of it.
ASGD_UPDATES = 300


def batch_for(workers: int) -> int:
    """32 per worker, less where a global batch would not fit digits' 1,437 training rows."""
    return min(BATCH, 1024 // workers)


def ssgd_rounds(at_8_workers: int, workers: int, least: int) -> int:
    """SSGD rounds at ``workers`` for ``at_8_workers`` at 8: a round at 64 workers is 8x the
    gradients of one at 8, so an eighth of them (but at least ``least``) keeps the time in bounds."""
    return max(at_8_workers * WORKERS[0] // workers, least)


LR = 0.1
RESULTS = RESULTS_DIR / "overhead.json"


# ----------------------------------------------------------------------------- scenarios
def digits_scenario(strategy: str, reduction: str, updates: int, workers: int = WORKERS[0]) -> dict[str, Any]:
    """The benchmark's digits-MLP scenario. Evaluation only at the start and the end,
    so that the comparison is about training steps, not about evaluation."""
    # Per-example leaves (exact_tile: 1): the exact path this benchmark's same-bits loops rebuild.
    strat: dict[str, Any] = {"name": strategy, "lr": LR, "reduction": reduction, "exact_tile": 1}
    if strategy == "ssgd":
        strat["aggregation"] = "allreduce"
    return {
        "name": f"bench-{strategy}-{reduction}",
        "seed": 0,
        "model": {"kind": "mlp", "hidden": [64], "activation": "relu"},
        "data": {"source": {"kind": "digits"}, "batch_size": batch_for(workers), "sharding": "iid"},
        **jittered_cluster(workers, 0.01),
        "strategy": strat,
        "stop": {"max_updates": updates},
        "eval": {"every_updates": updates},
    }


def events_scenario(updates: int, workers: int = 64) -> dict[str, Any]:
    """Timing-heavy: many workers, a tiny model, a ring all-reduce every round."""
    return {
        "name": "bench-events",
        "seed": 0,
        "model": {"kind": "logistic"},
        "data": {"source": {"kind": "digits"}, "batch_size": 8, "sharding": "iid"},
        "cluster": {
            "workers": workers,
            "compute": {"step_time_s": 0.01},
            "jitter": {"kind": "lognormal", "sigma": 0.1},
        },
        "strategy": {
            "name": "ssgd",
            "lr": LR,
            "aggregation": "allreduce",
            "reduction": "exact",
            "exact_tile": 1,
        },
        "stop": {"max_updates": updates},
        "eval": {"every_updates": updates},
    }


# ----------------------------------------------------------------------------- bare JAX baseline
def _sgd(params, grad_sum, count):
    # fred: mean_grad = g / count; sgd update = -lr * mean; params + update.
    return jax.tree.map(lambda p, g: p + (-LR * (g / count)), params, grad_sum)


def _exact_shard_sums(loss, params, x, y, shards):
    """fred's exact path: per-example grads on rows padded to CHUNK_ROWS, a pairwise
    tree inside each shard, then the pairwise tree across shards."""
    rows = x.shape[0]
    pad = (-rows) % CHUNK_ROWS
    if pad:
        x = jnp.concatenate([x, jnp.zeros((pad, *x.shape[1:]), x.dtype)])
        y = jnp.concatenate([y, jnp.zeros((pad,), y.dtype)])
    losses, grads = jax.vmap(jax.value_and_grad(loss), in_axes=(None, 0, 0))(params, x, y)
    split = lambda a: pairwise_sum(a[:rows].reshape(shards, -1, *a.shape[1:]))  # (shards, ...)
    across = lambda a: pairwise_sum(a[None])[0]  # the tree over shards, in shard order
    return across(split(losses)), jax.tree.map(lambda g: across(split(g)), grads)


def _fast_shard_sums(loss, params, x, y, shards):
    """fred's fast path: grad of each shard's summed loss, then the tree across shards."""
    batch_loss = lambda p, xs, ys: jnp.sum(jax.vmap(loss, in_axes=(None, 0, 0))(p, xs, ys))
    xs, ys = x.reshape(shards, -1, *x.shape[1:]), y.reshape(shards, -1)
    losses, grads = jax.vmap(jax.value_and_grad(batch_loss), in_axes=(None, 0, 0))(params, xs, ys)
    across = lambda a: pairwise_sum(a[None])[0]
    return across(losses), jax.tree.map(across, grads)


def _same_bits_shard_sums(per_example, params, x, y, zero, rows, shards):
    """fred's own exact program with per-example leaves (``fred.numerics.kernels.stored_chunks``:
    per-example gradients 64 rows at a time, each value stored before it is summed, then
    ``leaf_sums``: the pairwise tree inside each shard), then fred's tree across shards
    (``tree_sum``): fred's bits for any batch size. ``x`` and ``y`` are already padded to a
    multiple of CHUNK_ROWS."""
    losses, grads = leaf_sums(stored_chunks(per_example, params, x, y, zero), zero, rows, shards, None)
    return tree_sum(losses), tree_sum(grads)


class Bare:
    """The same model, data, initial parameters and batch order as a fred scenario,
    trained by a jitted step with nothing simulated around it.

    Two loops: the **plain** one differentiates the whole batch in one vmap (what anyone
    would write); the **same-bits** one computes each step with fred's own exact program
    (with ``reduction: fast`` both are fred's computation already). Which is faster
    depends on the batch; only the same-bits one gives fred's bits at every size.
    """

    def __init__(self, scenario: dict[str, Any], shards: int):
        sc = resolve(scenario)
        built = build(sc)  # same data split, model and seed-determined init params as fred
        ds = built.dataset
        self.init_params = built.sim.init_params
        self.x, self.y = jnp.asarray(ds.x_train), jnp.asarray(ds.y_train)
        self.shards = shards
        workers = sc.cluster.workers
        self.updates = sc.stop.max_updates
        loss = functools.partial(example_loss, built.numerics.model, ds.task)
        sums = _exact_shard_sums if sc.strategy.reduction == "exact" else _fast_shard_sums
        batch = sc.data.batch_size
        rows = shards * batch

        def step(params, x_all, y_all, idx):
            loss_sum, grad_sum = sums(loss, params, x_all[idx], y_all[idx], shards)
            return _sgd(params, grad_sum, rows), loss_sum

        self.step = jax.jit(step)
        self.exact = sc.strategy.reduction == "exact"
        per_example = jax.vmap(jax.value_and_grad(loss), in_axes=(None, 0, 0))

        def same_bits_step(params, x_all, y_all, idx, zero):
            loss_sum, grad_sum = _same_bits_shard_sums(
                per_example, params, x_all[idx], y_all[idx], zero, rows, shards
            )
            return _sgd(params, grad_sum, rows), loss_sum

        # The zero is an argument: XLA must not see that the XOR in fred's program changes nothing.
        self.same_bits_step = jax.jit(same_bits_step) if self.exact else None
        self.zero = jnp.asarray(ZERO)

        def scanned(params, x_all, y_all, idx_all):
            return jax.lax.scan(lambda p, idx: step(p, x_all, y_all, idx), params, idx_all)

        self.scanned = jax.jit(scanned)
        self.numerics, self.dataset, self.rows = built.numerics, ds, rows
        self.opt = sgd(LR)
        self.sum_step = make_sum_step(self.opt)
        # The batch order of fred's iid sharding: worker i takes block i of global batch k.
        stream = GlobalBatchStream(len(ds.y_train), workers, batch, rng.stream(sc.seed, "data", "batches"))
        if shards == workers:  # SSGD: one global batch of all workers' blocks per update
            idx = [np.concatenate([stream.next_for(i) for i in range(workers)]) for _ in range(self.updates)]
        else:  # ASGD: one worker's block per update (round robin; sizes are what matter)
            idx = [stream.next_for(k % workers) for k in range(self.updates)]
        self.idx = np.stack(idx).astype(np.int32)
        self.idx_dev = jnp.asarray(self.idx)
        # fred pads a call's rows to a multiple of CHUNK_ROWS with row 0, whose gradients are dropped
        pad = np.zeros((self.updates, (-self.idx.shape[1]) % CHUNK_ROWS), np.int32)
        self.idx_padded = np.concatenate([self.idx, pad], axis=1)

    def run_loop(self):
        """A Python loop over a jitted step: one dispatch per update, as any training loop."""
        params = self.init_params
        for k in range(self.updates):
            params, _ = self.step(params, self.x, self.y, self.idx[k])
        return jax.block_until_ready(params)

    def run_same_bits(self):
        """The same-bits loop: one dispatch per update of fred's exact program (the plain loop with fast)."""
        if self.same_bits_step is None:
            return self.run_loop()
        params = self.init_params
        for k in range(self.updates):
            params, _ = self.same_bits_step(params, self.x, self.y, self.idx_padded[k], self.zero)
        return jax.block_until_ready(params)

    def run_calls(self):
        """The calls loop: fred's own programs one after the other, nothing simulated: per update its
        gradient call, the sum over shards and its update (fred's dispatches, fred's bits)."""
        params, state = self.init_params, self.opt.init(self.init_params)
        for k in range(self.updates):
            params, state = self.calls_step(params, state, self.idx[k])
        return jax.block_until_ready(params)

    def calls_step(self, params, state, idx):
        """One update as fred computes it: ``Numerics.shard_sums_of``, the shards summed by its
        tree, then its update program on the sum."""
        sums = self.numerics.shard_sums_of(params, self.dataset, idx, self.shards)
        grad = sums[0].grad if len(sums) == 1 else tree_sum([s.grad for s in sums])
        return self.sum_step(params, state, grad, self.rows)

    def first_step_equal(self) -> dict[str, bool]:
        """Whether each loop's first update is fred's, bit for bit (fred's first update:
        :meth:`calls_step`, so the calls loop's always is; SSGD's final parameters check it)."""
        fred_params, _ = self.calls_step(self.init_params, self.opt.init(self.init_params), self.idx[0])
        plain, _ = self.step(self.init_params, self.x, self.y, self.idx[0])
        same = (
            plain
            if self.same_bits_step is None
            else self.same_bits_step(self.init_params, self.x, self.y, self.idx_padded[0], self.zero)[0]
        )
        equal = lambda p: all(
            np.array_equal(np.asarray(p[k]), np.asarray(fred_params[k])) for k in fred_params
        )
        return {"plain": equal(plain), "same_bits": equal(same), "calls": True}

    def call_s(self, calls: int = 300) -> float:
        """Median seconds the Python thread spends issuing the cheapest call a run makes on the
        parameters (one multiply per element, inputs ready, waited for between calls): no
        update fred computes can be issued for less."""
        scaled = jax.jit(lambda params: jax.tree.map(lambda p: p * 2.0, params))
        jax.block_until_ready(scaled(self.init_params))
        spent = []
        for _ in range(calls):
            t0 = time.perf_counter()
            out = scaled(self.init_params)
            spent.append(time.perf_counter() - t0)
            jax.block_until_ready(out)
        return float(np.median(spent))

    def run_scan(self):
        """The whole run as one jitted lax.scan: the floor, with no per-step dispatch."""
        params, _ = self.scanned(self.init_params, self.x, self.y, self.idx_dev)
        return jax.block_until_ready(params)


def _wait_for(part) -> None:
    """Block until a gradient is computed: a stacked call as it is, not split into rows."""
    jax.block_until_ready(part.source.stacked if part.source is not None else part)


def gradient_share(scenario: dict[str, Any]) -> tuple[float, float]:
    """One extra, instrumented fred.run: its wall time and the seconds spent making
    gradients (GradientService._flush_like: the jitted gradient calls, waited for so that
    the time lands here; a stacked result is waited for as it is, not split into rows)."""
    original = GradientService._flush_like
    spent = [0.0]

    def timed(self, first):
        t0 = time.perf_counter()
        try:
            original(self, first)
            _wait_for(first.result)
        finally:
            spent[0] += time.perf_counter() - t0

    GradientService._flush_like = timed  # type: ignore[method-assign]
    try:
        t0 = time.perf_counter()
        fred.run(scenario)
        total = time.perf_counter() - t0
    finally:
        GradientService._flush_like = original  # type: ignore[method-assign]
    return total, spent[0]


def _cpu_of(fn) -> tuple[float, float, float]:
    """One call of ``fn``: wall seconds, this thread's CPU seconds and the process's (all threads)."""
    wall0, thread0, process0 = time.perf_counter(), time.thread_time(), time.process_time()
    fn()
    return time.perf_counter() - wall0, time.thread_time() - thread0, time.process_time() - process0


def busiest_run(fn, repeats: int) -> dict[str, float]:
    """The fastest of ``repeats`` calls, with the thread and process CPU of that same call over its wall."""
    fn()  # warm-up: compilations
    wall, thread, process = min(_cpu_of(fn) for _ in range(repeats))
    return {"wall_s": wall, "thread_cpu_over_wall": thread / wall, "process_cpu_over_wall": process / wall}


def python_thread(scenario: dict[str, Any], loop, repeats: int) -> dict[str, float]:
    """Where a run's CPU goes: the Python thread's CPU seconds over the run's wall seconds (near 1:
    the thread is busy for the whole run, which is bound by what Python does), the whole
    process's (XLA computes in threads of its own), the same for ``loop`` (the fastest bare loop
    giving fred's bits), and the run again with the numerics tape not recording (each op called
    directly; such a run could not be replayed), timed in turn with the normal one."""
    from fred.numerics.tape import Tape

    recording = Tape.call

    def unrecorded(self, name, key, fn, args):
        self.depth += 1
        try:
            return fn(*args)
        finally:
            self.depth -= 1

    def run(record: bool) -> None:
        Tape.call = recording if record else unrecorded  # type: ignore[method-assign]
        try:
            fred.run(scenario)
        finally:
            Tape.call = recording  # type: ignore[method-assign]

    best, _ = best_in_turn({"taped": lambda: run(True), "untaped": lambda: run(False)}, repeats)
    fred_cpu, loop_cpu = busiest_run(lambda: run(True), repeats), busiest_run(loop, repeats)
    return {
        "python_cpu_over_wall": fred_cpu["thread_cpu_over_wall"],
        "process_cpu_over_wall": fred_cpu["process_cpu_over_wall"],
        "loop_process_cpu_over_wall": loop_cpu["process_cpu_over_wall"],
        "untaped_s": best["untaped"],
        "taped_s": best["taped"],
    }


def max_abs_diff(a, b) -> float:
    return float(max(np.max(np.abs(np.asarray(a[k]) - np.asarray(b[k]))) for k in a))


# ----------------------------------------------------------------------------- 1 + 2: overhead
def overhead(updates: int, repeats: int, workers: int) -> list[dict[str, Any]]:
    rows = []
    for strategy in ("ssgd", "asgd"):
        # An SSGD update at 64 workers is 8x the gradients of one at 8: fewer of them keep the
        # time in bounds. ASGD keeps them all: its workers' first, in-flight gradients must not
        # dominate the count.
        updates_here = ssgd_rounds(updates, workers, 5) if strategy == "ssgd" else updates
        for reduction in ("exact", "fast"):
            scn = digits_scenario(strategy, reduction, updates_here, workers)
            timing_only = {**scn, "workload": {"timing_only": True}}
            bare = Bare(scn, shards=workers if strategy == "ssgd" else 1)
            best, out = best_in_turn(
                {
                    "fred": lambda: fred.run(scn),  # noqa: B023 (called within this iteration)
                    "timing_only": lambda: fred.run(timing_only),  # noqa: B023 (called within this iteration)
                    "plain": bare.run_loop,
                    "same_bits": bare.run_same_bits,
                    "calls": bare.run_calls,
                    "scan": bare.run_scan,
                },
                repeats,
            )
            result = out["fred"]
            inst_total, inst_grad = gradient_share(scn)
            first = bare.first_step_equal()
            gives = fred_bits(bare, strategy, result.params, out, first)
            calls = len(result.tape[0]["calls"]) if result.tape is not None else 0
            row = {
                "workers": workers,
                "strategy": strategy,
                "reduction": reduction,
                "updates": int(result.summary["updates"]),
                "gradients": int(result.summary["gradients"]),
                "fred_s": best["fred"],
                "timing_only_s": best["timing_only"],
                "bare_loop_s": best["plain"],
                "bare_scan_s": best["scan"],
                "same_bits_loop_s": best["same_bits"],
                "calls_loop_s": best["calls"],
                "first_step_equal_plain": first["plain"],
                "first_step_equal_same_bits": first["same_bits"],
                "first_step_equal_calls": first["calls"],
                "recorded_calls_per_update": calls / updates_here,
                "min_call_s": bare.call_s(),
                "fred_ms_per_update": 1e3 * best["fred"] / updates_here,
                "bare_loop_ms_per_update": 1e3 * best["plain"] / updates_here,
                "gradient_share": inst_grad / inst_total,
            }
            if strategy == "ssgd":  # same batches, same updates: the parameters should agree
                row["max_abs_param_diff_vs_bare"] = max_abs_diff(result.params, out["plain"])
                row["max_abs_param_diff_vs_same_bits"] = max_abs_diff(result.params, out["same_bits"])
                row["max_abs_param_diff_vs_calls"] = max_abs_diff(result.params, out["calls"])
            row.update({f"{loop}_gives_fred_bits": gives[loop] for loop in LOOPS})
            same_bits = [best[loop] for loop in LOOPS if gives[loop]]
            row["fastest_same_bits_loop_s"] = min(same_bits) if same_bits else float("nan")
            for name, key in (
                ("bare_loop", "bare_loop_s"),
                ("fastest_same_bits", "fastest_same_bits_loop_s"),
                ("bare_scan", "bare_scan_s"),
            ):
                row[f"ratio_fred_over_{name}"] = row["fred_s"] / row[key]
            rows.append(row)
    return rows


LOOPS = ("plain", "same_bits", "calls")  # the bare loops each case times beside fred


def fred_bits(
    bare: Bare, strategy: str, fred_params: Any, outs: dict[str, Any], first: dict[str, bool] | None = None
) -> dict[str, bool]:
    """Which bare loops computed fred's bits, by loop: the first step, and for SSGD (the same
    batches, the same updates) the final parameters too. Sections 1 and 4 both decide with it."""
    first = first or bare.first_step_equal()
    return {
        loop: first[loop] and (strategy != "ssgd" or max_abs_diff(fred_params, outs[loop]) == 0.0)
        for loop in LOOPS
    }


def simulation_floor(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What each case costs with no numerics (``workload.timing_only``: the same events).

    Its time over the bare loop's is the ratio fred could not go below even if every
    gradient and update were free. With one call per computed value, as fred runs now,
    the floor is higher: the simulation plus, for every call the run recorded, the cheapest
    call's issue time (``Bare.call_s``), over the fastest loop that gives fred's bits.
    """
    out = []
    for r in rows:
        calls_s = r["recorded_calls_per_update"] * r["updates"] * r["min_call_s"]
        out.append(
            {
                **{
                    k: r[k]
                    for k in (
                        "workers",
                        "strategy",
                        "reduction",
                        "fred_s",
                        "bare_loop_s",
                        "timing_only_s",
                        "recorded_calls_per_update",
                        "min_call_s",
                        "fastest_same_bits_loop_s",
                    )
                },
                "timing_only_over_bare_loop": r["timing_only_s"] / r["bare_loop_s"],
                "call_floor_over_same_bits": (r["timing_only_s"] + calls_s) / r["fastest_same_bits_loop_s"],
                "fred_over_same_bits": r["ratio_fred_over_fastest_same_bits"],
            }
        )
    return out


def python_threads(rows: list[dict[str, Any]], repeats: int) -> list[dict[str, Any]]:
    """:func:`python_thread` for every ``reduction: exact`` case."""
    out = []
    for r in rows:
        if r["reduction"] != "exact":
            continue
        scn = digits_scenario(r["strategy"], "exact", r["updates"], r["workers"])
        bare = Bare(scn, shards=r["workers"] if r["strategy"] == "ssgd" else 1)
        plain = r["plain_gives_fred_bits"] and r["bare_loop_s"] <= r["same_bits_loop_s"]
        share = python_thread(scn, bare.run_loop if plain else bare.run_same_bits, repeats)
        out.append(
            {
                **{k: r[k] for k in ("workers", "strategy", "reduction", "updates")},
                **share,
                "tape_ms_per_update": 1e3 * (share["taped_s"] - share["untaped_s"]) / r["updates"],
            }
        )
    return out


def fixed_cost(repeats: int) -> float:
    """fred.run of one update: building, validating, evaluating, tables, summary."""
    scn = digits_scenario("ssgd", "exact", 1)
    return best_of(lambda: fred.run(scn), repeats)[0]


def exact_vs_fast(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by = {(r["workers"], r["strategy"], r["reduction"]): r for r in rows}
    out = []
    for workers, strategy in sorted(
        {(r["workers"], r["strategy"]) for r in rows}, key=lambda k: (k[0], k[1] != "ssgd")
    ):
        e, f = by[(workers, strategy, "exact")], by[(workers, strategy, "fast")]
        out.append(
            {
                "workers": workers,
                "strategy": strategy,
                "fred_exact_s": e["fred_s"],
                "fred_fast_s": f["fred_s"],
                "fred_exact_over_fast": e["fred_s"] / f["fred_s"],
                "bare_exact_over_fast": e["bare_loop_s"] / f["bare_loop_s"],
            }
        )
    return out


def _yes(flag: bool) -> str:
    return "equal" if flag else "differs"


# ----------------------------------------------------------------------------- 3: events
def event_throughput(updates: int, repeats: int, workers: int = 64) -> dict[str, Any]:
    from fred.scenario import registry

    scn = events_scenario(updates, workers)
    run_s, result = best_of(lambda: fred.run(scn), repeats)
    rows = len(result.events)

    def stepped() -> dict[str, float]:
        # runner.execute without the controller: build, start the strategy, and step
        # SimPy ourselves, counting every event it processes, until `updates` updates.
        sc = resolve(scn)
        built = build(sc)
        recorder = Recorder()
        built.sim.tracers.append(recorder.on_event)
        done = [0]
        built.sim.update_hooks.append(lambda contributions, version: done.__setitem__(0, done[0] + 1))
        grad_s = [0.0]
        flush = built.sim.gradients._flush_like

        def timed_flush(first):  # instance attribute: wraps this run's gradient batches only
            t0 = time.perf_counter()
            flush(first)
            _wait_for(first.result)
            grad_s[0] += time.perf_counter() - t0

        built.sim.gradients._flush_like = timed_flush
        registry.get(sc.strategy.name).start(built.sim, sc.strategy)
        env, steps = built.sim.env, 0
        t0 = time.perf_counter()
        while done[0] < updates:
            env.step()
            steps += 1
        wall = time.perf_counter() - t0
        return {"steps": steps, "wall_s": wall, "grad_s": grad_s[0], "rows": len(recorder.events["kind"])}

    step_runs = [stepped() for _ in range(repeats + 1)][1:]
    best = min(step_runs, key=lambda r: r["wall_s"])
    transfers = updates * workers * 2 * (workers - 1)
    return {
        "workers": workers,
        "updates": updates,
        "fred_run_s": run_s,
        "event_rows": rows,
        "event_rows_per_s": rows / run_s,
        "ring_chunk_transfers": transfers,
        "ring_chunk_transfers_per_s": transfers / run_s,
        "simpy_events": best["steps"],
        "simpy_loop_s": best["wall_s"],
        "simpy_events_per_s": best["steps"] / best["wall_s"],
        "gradient_s_in_loop": best["grad_s"],
        "simpy_events_per_s_excl_gradients": best["steps"] / (best["wall_s"] - best["grad_s"]),
        "sim_time_s": result.summary["sim_time_s"],
    }


def timing_only_rates(digits_updates: int, event_rounds: int, repeats: int) -> list[dict[str, Any]]:
    """3b. SimPy events per second of timing-only fred runs (``workload.timing_only``), against a
    bare SimPy loop (``common.bare_simpy_loop``) of as many processes as the run has workers and
    as many events as the run processes, the two timed in turn.

    A run's events are counted once, in an untimed run (counting costs a call per event); its
    rate is those events over its simulation loop's seconds (``common.timed_loop``: stepping
    until the stop; not building, the final evaluation or the tables), and, for reference,
    over the whole ``fred.run``. The bare loop's rate is its events over ``env.run()``'s seconds.
    """
    cases = (
        ("8 workers, SSGD, digits MLP [64]", digits_scenario("ssgd", "exact", digits_updates)),
        ("8 workers, ASGD, digits MLP [64]", digits_scenario("asgd", "exact", digits_updates)),
        ("64 workers, SSGD, logistic (as 3)", events_scenario(event_rounds)),
    )
    rows = []
    for label, scn in cases:
        scn = {**scn, "workload": {"timing_only": True}}
        with counted_steps() as counted:
            fred.run(scn)  # also the warm-up
        workers, events = scn["cluster"]["workers"], counted[0]
        bare, bare_events = bare_simpy_loop(workers, events)
        bare()
        best = {"run": math.inf, "loop": math.inf, "bare": math.inf}
        for _ in range(repeats):
            with timed_loop() as loop_s:
                t0 = time.perf_counter()
                fred.run(scn)
                run_s = time.perf_counter() - t0
            bare_s = bare()
            best = {
                "run": min(best["run"], run_s),
                "loop": min(best["loop"], loop_s[0]),
                "bare": min(best["bare"], bare_s),
            }
        rows.append(
            {
                "case": label,
                "workers": workers,
                "updates": scn["stop"]["max_updates"],
                "simpy_events": events,
                "run_s": best["run"],
                "loop_s": best["loop"],
                "events_per_s_of_run": events / best["run"],
                "events_per_s": events / best["loop"],
                "bare_events": bare_events,
                "bare_loop_s": best["bare"],
                "bare_events_per_s": bare_events / best["bare"],
                "events_per_s_over_bare": (events / best["loop"]) / (bare_events / best["bare"]),
            }
        )
    return rows


# ----------------------------------------------------------------------------- 4: wider models
def compare(scn: dict[str, Any], repeats: int) -> dict[str, Any]:
    """fred against both bare loops on one scenario, timed in turn, and which loops give fred's
    bits (first step; SSGD, whose loop makes the same updates of the same batches: the final
    parameters too). A case of section 4 and of ``model_size.py``."""
    strategy, workers, updates = (
        scn["strategy"]["name"],
        scn["cluster"]["workers"],
        scn["stop"]["max_updates"],
    )
    bare = Bare(scn, shards=workers if strategy == "ssgd" else 1)
    best, out = best_in_turn(
        {
            "fred": lambda: fred.run(scn),
            "plain": bare.run_loop,
            "same_bits": bare.run_same_bits,
            "calls": bare.run_calls,
        },
        repeats,
    )
    gives_bits = fred_bits(bare, strategy, out["fred"].params, out)
    same_bits = [best[loop] for loop in LOOPS if gives_bits[loop]]
    fastest = min(best["plain"], best["same_bits"])
    fastest_same = min(same_bits) if same_bits else float("nan")
    return {
        "params": int(sum(np.size(p) for p in bare.init_params.values())),
        "workers": workers,
        "batch_per_worker": batch_for(workers),
        "strategy": strategy,
        "reduction": scn["strategy"]["reduction"],
        "updates": updates,
        "fred_gradients": int(out["fred"].summary["gradients"]),
        "loop_gradients": updates * (workers if strategy == "ssgd" else 1),
        "fred_s": best["fred"],
        "plain_loop_s": best["plain"],
        "same_bits_loop_s": best["same_bits"],
        "calls_loop_s": best["calls"],
        "plain_gives_fred_bits": gives_bits["plain"],
        "same_bits_gives_fred_bits": gives_bits["same_bits"],
        "calls_gives_fred_bits": gives_bits["calls"],
        "fastest_loop_ms_per_update": 1e3 * fastest / updates,
        "ratio_fred_over_fastest_loop": best["fred"] / fastest,
        "ratio_fred_over_fastest_same_bits": best["fred"] / fastest_same,
        "fred_added_ms_per_update": 1e3 * (best["fred"] - fastest_same) / updates,
    }


def exact_refusal(model: dict[str, Any]) -> str:
    """Why fred refuses ``reduction: exact`` for ``model`` on digits (``Model.exact_issue``; "" if it does
    not)."""
    scn = {**digits_scenario("ssgd", "fast", 1), "model": model}
    return build(resolve(scn)).numerics.model.exact_issue


def wider_models(quick: bool, repeats: int) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """4. The eight cases on each of ``WIDER``'s models (``quick``: 8 workers, fast only, fewer updates:
    compiling the exact programs of wide models is most of a smoke run's time), as :func:`compare`'s
    rows, and, by model, why fred refused the exact reduction where it did (those run fast only)."""
    rows, refused = [], {}
    for label, model, rounds in WIDER:
        if issue := exact_refusal(model):
            refused[label] = issue
        reductions = ("fast",) if issue or quick else ("exact", "fast")
        for workers in WORKERS[:1] if quick else WORKERS:
            for strategy in ("ssgd", "asgd"):
                if strategy == "ssgd":
                    updates = ssgd_rounds(4 if quick else rounds, workers, 4)
                else:
                    updates = 30 if quick else ASGD_UPDATES
                for reduction in reductions:
                    scn = {**digits_scenario(strategy, reduction, updates, workers), "model": model}
                    rows.append({"model": label, **compare(scn, repeats)})
                    r = rows[-1]
                    print(
                        f"  4. {label}, {workers} workers {strategy} {reduction}: fred/same-bits "
                        f"{r['ratio_fred_over_fastest_same_bits']:.2f}",
                        file=sys.stderr,
                        flush=True,
                    )
    return rows, refused


# ----------------------------------------------------------------------------- verdicts
def verdicts(wider: list[dict[str, Any]], rates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each target measured in this run: what, the value, the limit, and whether it is met (a ratio
    over a loop that never gave fred's bits is NaN, and not met)."""
    out = []

    def target(what: str, value: float, sense: str, limit: float) -> None:
        met = value <= limit if sense == "<=" else value >= limit
        out.append({"target": what, "value": value, "limit": f"{sense} {limit}", "met": bool(met)})

    for r in (r for r in wider if r["model"] == WIDER[0][0]):
        target(
            f"{WIDER[0][0]}, {r['workers']} workers, {r['strategy']} {r['reduction']}: fred / fastest "
            "same-bits loop",
            r["ratio_fred_over_fastest_same_bits"],
            "<=",
            PERF_TARGET_RATIO,
        )
    for r in rates:
        target(
            f"timing only, {r['case']}: SimPy events/s over a bare SimPy loop's",
            r["events_per_s_over_bare"],
            ">=",
            EVENT_RATE_TARGET,
        )
    return out


# ----------------------------------------------------------------------------- profile
def profile(updates: int, case: str, top: int = 15) -> dict[str, list[dict[str, Any]]]:
    """cProfile one warm fred.run of one overhead case ("strategy:reduction")."""
    strategy, reduction = case.split(":")
    scn = digits_scenario(strategy, reduction, updates)
    fred.run(scn)  # warm: compile outside the profile
    prof = cProfile.Profile()
    prof.enable()
    fred.run(scn)
    prof.disable()
    stats = pstats.Stats(prof)
    out: dict[str, list[dict[str, Any]]] = {}
    for key in ("cumulative", "tottime"):
        stats.sort_stats(key)
        entries = []
        for func in stats.fcn_list[:top]:  # type: ignore[attr-defined]
            cc, nc, tt, ct, _ = stats.stats[func]  # type: ignore[attr-defined]
            filename, line, name = func
            where = f"{_short(filename)}:{line}({name})"
            entries.append({"function": where, "calls": nc, "tottime_s": tt, "cumtime_s": ct})
        out[key] = entries
    return out


def _short(filename: str) -> str:
    for marker in ("site-packages/", f"{Path(__file__).resolve().parents[1]}/"):  # any checkout, not one path
        if marker in filename:
            return filename.split(marker, 1)[1]
    return filename


# ----------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    parser = options(
        __doc__,
        "30 updates per digits run, 5 rounds of 64 workers",
        "timed repeats per measurement (best is kept; default 3)",
        RESULTS,
    )
    parser.add_argument(
        "--profile",
        nargs="?",
        const="ssgd:exact",
        choices=["ssgd:exact", "ssgd:fast", "asgd:exact", "asgd:fast"],
        help="also cProfile one warm fred run of this case (default ssgd:exact)",
    )
    args, t_start, facts = begin(parser, argv, full=3, quick=3)
    updates = 30 if args.quick else 300
    event_updates = 5 if args.quick else 20
    rate_updates, rate_rounds = (
        (100, 20) if args.quick else (1000, 100)
    )  # 3b: enough events for a steady rate
    say_timing(args)

    rows = [r for w in WORKERS for r in overhead(updates, args.repeats, w)]
    print(
        f"1. Overhead: {WORKERS[0]} workers x batch {batch_for(WORKERS[0])} and {WORKERS[1]} x "
        f"{batch_for(WORKERS[1])}, "
        f"digits MLP [64], {updates} updates (SSGD at {WORKERS[1]} workers: "
        f"{ssgd_rounds(updates, WORKERS[1], 5)}) "
        "(a regression record: its floor is one call per computed value, docs/determinism.md; no target)"
    )
    headers = ["workers", "strategy", "reduction", "grads", "fred s", "bare loop s", "fred/bare"]
    headers += [
        "same-bits s",
        "calls s",
        "fred/fastest same-bits",
        "bare scan s",
        "fred/scan",
        "ms/update",
        "in grads",
    ]
    keys = [
        "workers",
        "strategy",
        "reduction",
        "gradients",
        "fred_s",
        "bare_loop_s",
        "ratio_fred_over_bare_loop",
    ]
    keys += [
        "same_bits_loop_s",
        "calls_loop_s",
        "ratio_fred_over_fastest_same_bits",
        "bare_scan_s",
        "ratio_fred_over_bare_scan",
    ]
    keys += ["fred_ms_per_update"]
    print(table(headers, [[r[k] for k in keys] + [f"{100 * r['gradient_share']:.0f}%"] for r in rows]))
    fixed = fixed_cost(args.repeats)
    print(
        f"   fixed cost of a fred.run (1-update SSGD exact run: build, eval, tables, summary): {fixed:.3f} s"
    )
    print(
        "   in grads: share of an instrumented fred.run spent in GradientService._flush_like (gradient math)"
    )
    print(
        "   same-bits: a loop of one program per update, fred's exact gradient program and the update (fast: "
        "the bare"
    )
    print(
        "   loop); calls: a loop of fred's own calls (gradient, sum over shards, update: fred's dispatches, "
        "fred's bits);"
    )
    print(
        "   fred/same-bits is over the fastest loop that gave fred's bits (first step, and SSGD's final "
        "parameters):"
    )
    for r in rows:
        line = (
            f"   {r['workers']} workers {r['strategy']} {r['reduction']}: first step plain "
            f"{_yes(r['first_step_equal_plain'])}"
        )
        line += f", same-bits {_yes(r['first_step_equal_same_bits'])}"
        if "max_abs_param_diff_vs_bare" in r:
            line += f"; final max |fred - bare| {r['max_abs_param_diff_vs_bare']:.3g}, |fred - same-bits| "
            line += (
                f"{r['max_abs_param_diff_vs_same_bits']:.3g}, |fred - calls| "
                f"{r['max_abs_param_diff_vs_calls']:.3g}"
            )
        print(line)
    print()

    floor = simulation_floor(rows)
    print(
        "1b. The simulation alone: workload.timing_only (same events, no numerics), and the floor of one "
        "call per value"
    )
    print(
        table(
            [
                "workers",
                "strategy",
                "reduction",
                "fred s",
                "timing-only s",
                "bare loop s",
                "timing-only/bare",
                "calls/update",
                "min call ms",
                "floor/same-bits",
                "fred/same-bits",
            ],
            [
                [
                    f["workers"],
                    f["strategy"],
                    f["reduction"],
                    f["fred_s"],
                    f["timing_only_s"],
                    f["bare_loop_s"],
                    f["timing_only_over_bare_loop"],
                    f["recorded_calls_per_update"],
                    1e3 * f["min_call_s"],
                    f["call_floor_over_same_bits"],
                    f["fred_over_same_bits"],
                ]
                for f in floor
            ],
        )
    )
    print("   fred/bare cannot fall below timing-only/bare, however cheap the numerics become")
    print(
        "   floor/same-bits: (timing-only + recorded calls x min call) / the fastest loop giving fred's bits;"
    )
    print("   no run that issues one call per computed value, as fred does, can go below it\n")

    threads = python_threads(rows, args.repeats)
    print("1c. Where the CPU goes (reduction: exact)")
    cores = facts["cpu_count"]
    print(
        table(
            [
                "workers",
                "strategy",
                "python cpu/wall",
                "fred cores busy",
                "loop cores busy",
                "fred s",
                "fred s, tape off",
                "tape ms/update",
            ],
            [
                [
                    t["workers"],
                    t["strategy"],
                    t["python_cpu_over_wall"],
                    t["process_cpu_over_wall"],
                    t["loop_process_cpu_over_wall"],
                    t["taped_s"],
                    t["untaped_s"],
                    t["tape_ms_per_update"],
                ]
                for t in threads
            ],
        )
    )
    print(
        "   python cpu/wall near 1: the Python thread is busy for nearly the whole run (simulating, issuing "
        "calls,"
    )
    print(
        "   taping) while XLA computes beside it; the run is bound by Python. cores busy: the whole "
        "process's CPU"
    )
    print(
        f"   seconds over wall seconds (this machine has {cores}), for fred and for the fastest bare loop "
        "giving its"
    )
    print(
        "   bits, measured in the same call; where the loop alone keeps the cores busy, fred's Python thread "
        "takes"
    )
    print("   CPU from XLA. tape off: recording bypassed (not replayable)\n")

    evf = exact_vs_fast(rows)
    print("2. Exact vs fast reduction")
    print(
        table(
            ["workers", "strategy", "fred exact s", "fred fast s", "fred exact/fast", "bare exact/fast"],
            [
                [
                    r["workers"],
                    r["strategy"],
                    r["fred_exact_s"],
                    r["fred_fast_s"],
                    r["fred_exact_over_fast"],
                    r["bare_exact_over_fast"],
                ]
                for r in evf
            ],
        )
    )
    print()

    ev = event_throughput(event_updates, args.repeats)
    print(
        f"3. Event throughput: {ev['workers']} workers, logistic model, SSGD ring all-reduce, "
        f"{ev['updates']} updates"
    )
    print(
        table(
            ["measure", "count", "wall s", "per second"],
            [
                ["fred.run: event rows", ev["event_rows"], ev["fred_run_s"], ev["event_rows_per_s"]],
                [
                    "fred.run: ring chunk transfers (not rows)",
                    ev["ring_chunk_transfers"],
                    ev["fred_run_s"],
                    ev["ring_chunk_transfers_per_s"],
                ],
                [
                    "env.step() loop: SimPy events",
                    ev["simpy_events"],
                    ev["simpy_loop_s"],
                    ev["simpy_events_per_s"],
                ],
                [
                    "  same, gradient time excluded",
                    ev["simpy_events"],
                    ev["simpy_loop_s"] - ev["gradient_s_in_loop"],
                    ev["simpy_events_per_s_excl_gradients"],
                ],
            ],
        )
    )
    print(
        f"   each all-reduce over {ev['workers']} workers simulates 2*{ev['workers'] - 1} chunk transfers "
        "per member "
        f"({2 * (ev['workers'] - 1) * ev['workers']:,} per round), none a SimPy event or an event row; "
        "on idle links a round books them in one pass (Network.ring_on_idle_links), on busy ones one by one"
    )
    print()

    rates = timing_only_rates(rate_updates, rate_rounds, args.repeats)
    print("3b. Timing-only runs (workload.timing_only) against a bare SimPy loop, timed in turn")
    print(
        table(
            [
                "case",
                "updates",
                "SimPy events",
                "loop s",
                "events/s",
                "events/s, whole run",
                "bare loop events",
                "bare loop s",
                "bare events/s",
                "events/s over bare",
            ],
            [
                [
                    r["case"],
                    r["updates"],
                    r["simpy_events"],
                    r["loop_s"],
                    r["events_per_s"],
                    r["events_per_s_of_run"],
                    r["bare_events"],
                    r["bare_loop_s"],
                    r["bare_events_per_s"],
                    r["events_per_s_over_bare"],
                ]
                for r in rates
            ],
        )
    )
    print(
        "   events: SimPy events the run processes (env.step() calls, counted in an untimed run); loop s: "
        "its simulation"
    )
    print(
        "   loop (stepping to the stop, with the controller's checks; not building, the final evaluation, "
        "the tables);"
    )
    print(
        "   whole run: over fred.run's wall. Bare loop: as many SimPy processes as workers, each waiting out "
        "one"
    )
    print(
        "   env.timeout after another (no two at the same time), as many events in all, each process's start "
        "and end"
    )
    print(f"   included; its time is env.run()'s (target: events/s over bare >= {EVENT_RATE_TARGET})\n")

    wider, refused = wider_models(args.quick, args.repeats)
    sizes = f"{WORKERS[0]} workers, fast only" if args.quick else f"{WORKERS[0]} and {WORKERS[1]} workers"
    print(f"4. Wider models on digits: {', '.join(label for label, _, _ in WIDER)}, {sizes}, batch as in 1")
    print(
        table(
            [
                "model",
                "workers",
                "strategy",
                "reduction",
                "params",
                "updates",
                "grads: fred, loop",
                "loop ms/update",
                "fred/fastest loop",
                "fred/same-bits",
                "fred adds ms/update",
                "plain: fred's bits",
                "same-bits: fred's bits",
            ],
            [
                [
                    r["model"],
                    r["workers"],
                    r["strategy"],
                    r["reduction"],
                    r["params"],
                    r["updates"],
                    f"{r['fred_gradients']:,}, {r['loop_gradients']:,}",
                    r["fastest_loop_ms_per_update"],
                    r["ratio_fred_over_fastest_loop"],
                    r["ratio_fred_over_fastest_same_bits"],
                    r["fred_added_ms_per_update"],
                    r["plain_gives_fred_bits"],
                    r["same_bits_gives_fred_bits"],
                ]
                for r in wider
            ],
        )
    )
    for label, issue in refused.items():
        print(f"   {label}: fred refuses reduction: exact ({issue}); fast only")
    print(
        "   loop ms/update: the faster bare loop (plain or same-bits) whatever its bits; fred/same-bits: "
        "over the"
    )
    print("   faster loop that gave fred's bits (first step; SSGD: final parameters too; nan: neither did);")
    print(
        f"   fred adds: (fred - that loop) / updates (target: fred/same-bits <= {PERF_TARGET_RATIO} on "
        f"{WIDER[0][0]})\n"
    )

    verdict = verdicts(wider, rates)
    print(
        "Verdicts"
        + (
            " (a quick run: smoke numbers, fewer cases; the full run measures the targets)"
            if args.quick
            else ""
        )
    )
    print(
        table(
            ["target", "measured", "limit", "met"],
            [[v["target"], v["value"], v["limit"], v["met"]] for v in verdict],
        )
    )
    print(f"   {sum(v['met'] for v in verdict)} of {len(verdict)} met\n")

    results: dict[str, Any] = {
        "quick": args.quick,
        "repeats": args.repeats,
        "targets": {
            "wide_mlp_ratio": PERF_TARGET_RATIO,
            "timing_only_events_per_s_over_bare": EVENT_RATE_TARGET,
        },
        "machine": facts,
        "overhead": rows,
        "fixed_cost_s": fixed,
        "simulation_floor": floor,
        "python_thread": threads,
        "exact_vs_fast": evf,
        "event_throughput": ev,
        "timing_only_rates": rates,
        "wider_models": wider,
        "exact_refused": refused,
        "verdicts": verdict,
    }
    if args.profile:
        prof = profile(updates, args.profile)
        results["profile"] = {"case": args.profile, "updates": updates, **prof}
        for key in ("cumulative", "tottime"):
            print(f"Profile of one warm fred.run ({args.profile}, {updates} updates), top by {key}")
            cells = [[e["function"], e["calls"], e["tottime_s"], e["cumtime_s"]] for e in prof[key]]
            print(table(["function", "calls", "tottime s", "cumtime s"], cells))
            print()

    write_results(args.out, results, t_start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
