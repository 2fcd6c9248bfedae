#!/usr/bin/env python
"""What would fred's overhead be with the changes the overhead benchmark suggests?

    python benchmarks/overhead_whatif.py [--quick]

An experiment, not a benchmark of fred as it is: it monkeypatches fred *in this
process only* (no file is changed) with candidate fixes, applied cumulatively,
and re-times the overhead cases of ``benchmarks/overhead.py`` against the same
bare JAX loop. For every variant it also checks that the final parameters are
bit-identical to unpatched fred's (``same params``), since bit-reproducibility
is what the exact reduction is for.

Variants: A, B on top of A, C on top of A (not B), D on top of A.

A. split-in-jit: ``Numerics.shard_sums`` splits the per-worker sums inside the
   jitted function (one dispatch returning one pytree per worker) instead of
   ~5 eager ``g[i]`` / ``g[:rows]`` slices per worker per update.
B. fused-exact: the exact path's per-example gradients and the in-shard pairwise
   sums in one jitted function (the bare baseline does this and matches fred's
   bits), so the (rows x params) per-example gradients need not be materialised.
   NOTE: this breaks the determinism contract (tests/test_equivalence.py fails:
   the fused program's bits depend on the shard layout), so it is shown only to
   price what the separate per-example program costs, not as a proposal.
C. lean-ring: ``Simulation._ring`` with the chunk's arrival timeout itself as
   the "received" event, instead of a timeout whose callback succeeds a second,
   pre-allocated event (half the SimPy events per chunk transfer, no
   p x 2(p-1) upfront events). Same reservations, same arithmetic.
D. closed-form-ring: ``Simulation._ring`` as one timeout of the closed-form
   ring time (``network.ring_allreduce_time_s``) instead of 2(p-1) simulated
   chunk transfers per member. Only valid when nothing else uses the links
   during the all-reduce (true here, not in general) and not bit-equal in
   simulated time (a different float sum): an upper bound on the gain.
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

import jax
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import overhead as bench  # noqa: E402

import fred  # noqa: E402
from fred import engine, numerics  # noqa: E402
from fred.network import ring_allreduce_time_s  # noqa: E402
from fred.records import params_sha256  # noqa: E402

CASES = [("ssgd", "exact"), ("ssgd", "fast"), ("asgd", "exact"), ("asgd", "fast")]


@functools.partial(jax.jit, static_argnums=(2, 3))
def _split_exact(losses, grads, rows, shards):
    block = lambda a: numerics.pairwise_sum(a[:rows].reshape(shards, -1, *a.shape[1:]))
    ls, gs = block(losses), jax.tree.map(block, grads)
    return [(ls[i], jax.tree.map(lambda g: g[i], gs)) for i in range(shards)]


@functools.partial(jax.jit, static_argnums=(2,))
def _split_fast(losses, grads, shards):
    return [(losses[i], jax.tree.map(lambda g: g[i], grads)) for i in range(shards)]


def _pad(xs, ys):
    pad = (-xs.shape[0]) % numerics.CHUNK_ROWS
    xs_p = np.concatenate([xs, np.zeros((pad, *xs.shape[1:]), xs.dtype)])
    ys_p = np.concatenate([ys, np.zeros((pad,), ys.dtype)])
    return xs_p, ys_p


def shard_sums_split(self, params, xs, ys, shards):
    rows = xs.shape[0]
    if self.reduction == "fast":
        losses, grads = self._fast(params, xs.reshape(shards, -1, *xs.shape[1:]), ys.reshape(shards, -1))
        parts = _split_fast(losses, grads, shards)
    else:
        losses, grads = self._per_example(params, *_pad(xs, ys))
        parts = _split_exact(losses, grads, rows, shards)
    return [numerics.GradSum(g, l, rows // shards) for l, g in parts]


_fused_cache: dict[int, object] = {}


def shard_sums_fused(self, params, xs, ys, shards):
    if self.reduction == "fast":
        return shard_sums_split(self, params, xs, ys, shards)
    rows = xs.shape[0]
    fused = _fused_cache.get(id(self))
    if fused is None:
        value_and_grad = jax.value_and_grad(functools.partial(numerics._example_loss, self.model, self.task))

        def fn(params, x, y, rows, shards):
            losses, grads = jax.vmap(value_and_grad, in_axes=(None, 0, 0))(params, x, y)
            return _split_exact.__wrapped__(losses, grads, rows, shards)

        fused = _fused_cache[id(self)] = jax.jit(fn, static_argnums=(3, 4))
    parts = fused(params, *_pad(xs, ys), rows, shards)
    return [numerics.GradSum(g, l, rows // shards) for l, g in parts]


def ring_lean(self, names, nbytes):
    p, cfg, env = len(names), self.network.config, self.env
    chunk = nbytes / p
    steps = 2 * (p - 1)
    received: list[list[object]] = [[None] * steps for _ in range(p)]

    def deliver_at(arrive_s, i, step):
        arrival = env.timeout(arrive_s - env.now)
        waiting = received[i][step]
        if waiting is None:
            received[i][step] = arrival
        else:  # the receiver got there first and is blocked on a plain event
            arrival.callbacks.append(lambda _: waiting.succeed())

    def slot(i, step):
        if received[i][step] is None:
            received[i][step] = env.event()
        return received[i][step]

    def member(i):
        for step in range(steps):
            if step > 0:
                yield slot(i, step - 1)
                if step <= p - 1 and cfg.reduce_s_per_byte > 0:
                    yield env.timeout(chunk * cfg.reduce_s_per_byte)
            transfer = self.network.reserve(names[i], names[(i + 1) % p], chunk, env.now)
            deliver_at(transfer.arrive_s, (i + 1) % p, step)
        if steps:
            yield slot(i, steps - 1)

    if steps:
        yield env.all_of([env.process(member(i)) for i in range(p)])
    yield env.timeout(cfg.sync_s)


def ring_closed_form(self, names, nbytes):
    yield self.env.timeout(ring_allreduce_time_s(len(names), nbytes, self.network.config))


def measure_events(updates: int, repeats: int):
    scn = bench.events_scenario(updates)
    fred_s, result = bench.best_of(lambda: fred.run(scn), repeats)
    return fred_s, result.events, result.summary["params_sha256"]


def measure(updates: int, repeats: int) -> dict[tuple[str, str], tuple[float, str, float]]:
    out = {}
    for strategy, reduction in CASES:
        scn = bench.digits_scenario(strategy, reduction, updates)
        fred_s, result = bench.best_of(lambda: fred.run(scn), repeats)
        out[(strategy, reduction)] = (fred_s, params_sha256(result.params), result.summary["sim_time_s"])
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    updates = 30 if args.quick else 300

    bare = {}
    for strategy, reduction in CASES:
        b = bench.Bare(bench.digits_scenario(strategy, reduction, updates), bench.WORKERS if strategy == "ssgd" else 1)
        bare[(strategy, reduction)] = bench.best_of(b.run_loop, args.repeats)[0]

    variants = [("fred as is", None)]
    variants.append(("A split-in-jit", lambda: setattr(numerics.Numerics, "shard_sums", shard_sums_split)))
    variants.append(("B A+fused-exact", lambda: setattr(numerics.Numerics, "shard_sums", shard_sums_fused)))
    variants.append(("C A+lean-ring", lambda: (
        setattr(numerics.Numerics, "shard_sums", shard_sums_split), setattr(engine.Simulation, "_ring", ring_lean))))
    variants.append(("D A+closed-form-ring", lambda: setattr(engine.Simulation, "_ring", ring_closed_form)))
    original = (numerics.Numerics.shard_sums, engine.Simulation._ring)
    rows, base, ev_rows, ev_base = [], None, [], None
    event_updates = 5 if args.quick else 20
    try:
        for name, patch in variants:
            if patch is not None:
                patch()
            got = measure(updates, args.repeats)
            base = base or got
            ev = measure_events(event_updates, args.repeats)
            ev_base = ev_base or ev
            ev_rows.append([name, ev[0], ev_base[0] / ev[0], ev[1].equals(ev_base[1]), ev[2] == ev_base[2]])
            for case in CASES:
                fred_s, sha, sim_s = got[case]
                rows.append(
                    [name, *case, fred_s, bare[case], fred_s / bare[case], sha == base[case][1], sim_s == base[case][2]]
                )
    finally:
        numerics.Numerics.shard_sums, engine.Simulation._ring = original

    print(f"What-if (monkeypatched in this process), {updates} updates, best of {args.repeats}")
    print(
        bench.table(
            ["variant", "strategy", "reduction", "fred s", "bare loop s", "fred/bare", "same params", "same sim time"],
            rows,
        )
    )
    print()
    print(f"64-worker logistic SSGD all-reduce (overhead.py section 3), {event_updates} updates")
    print(bench.table(["variant", "fred s", "speed-up", "same event rows", "same params"], ev_rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
