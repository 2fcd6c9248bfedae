#!/usr/bin/env python
"""Where a gradient step of a dense-heavy model goes: the programs of one worker's step, timed alone.

    python benchmarks/dense_step.py           # best of 7
    python benchmarks/dense_step.py --quick   # best of 3

The model is ``realistic.py``'s dense-heavy CNN (channels [32, 64], kernel 3, hidden 128 on
32 x 32 x 3 images: 8.4 M parameters, nearly all in one 65,536 x 128 dense layer), one worker's
batch of 32 rows. Each program is timed in turn with the others in one process, best of
``--repeats`` after a warm-up that compiles, and reported over the bare loop's fused step (the
gradient of 32 rows and the SGD update, one program):

- the bare loop's ``value_and_grad`` of 32 rows, and of four 8-row tiles called one by one;
- the dense layer's weight gradient (``x.T @ dy``) alone, on 32 rows and on 8 rows four times;
- fred's exact call on tiles of 8 rows (as a run calls it, the tiles at a worker's parameters),
  with the tiles stacked into one array before they are summed (a copy of every tile) and kept
  apart (:func:`fred.numerics.kernels.stored_tiles`); the exact call on one tile of 32 rows;
- fred's ``fast`` call of 32 rows, and the parameter server's update program (``sum_step``).

Results are printed as a table and written to ``benchmarks/results/dense_step.json``.
"""

from __future__ import annotations

import functools
import sys
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from common import RESULTS_DIR, begin, best_in_turn, options, table, write_results
from realistic import scenario

from fred.numerics import kernels
from fred.numerics.gradients import Numerics
from fred.numerics.losses import batch_loss
from fred.numerics.optim import make_sum_step, optimizer_for
from fred.runs.api import resolve
from fred.runs.runner import build

RESULTS = RESULTS_DIR / "dense_step.json"
BATCH, TILE, LR = 32, 8, 0.05


def stacked_tiles(tile_grad, tile, params, xs, ys, zero, per_tile=False):
    """The tiles of a call stacked into one chunk of leaves before they are summed."""
    at = (lambda k: params[k]) if per_tile else (lambda k: params)
    tiles = [
        kernels._as_stored(tile_grad(at(k), xs[i : i + tile], ys[i : i + tile]), zero)
        for k, i in enumerate(range(0, xs.shape[0], tile))
    ]
    return [jax.tree.map(lambda *leaf: jnp.stack(leaf), *tiles)]


def programs() -> dict[str, Any]:
    """Each program of the comparison, a function of no arguments that runs it once."""
    sc = resolve(scenario("asgd", 8, "default", 32, "dense_cnn"))
    built = build(sc)
    ds, params, model = built.dataset, built.sim.init_params, built.numerics.model
    task = ds.task
    apart, whole, fast = (
        built.numerics,
        Numerics(model, task, "exact", BATCH),
        Numerics(model, task, "fast", 1),
    )
    original, kernels.stored_tiles = kernels.stored_tiles, stacked_tiles
    try:
        stacked = Numerics(model, task, "exact", TILE)
    finally:
        kernels.stored_tiles = original
    x_all, y_all, _ = apart._on_device(ds)
    rows = np.arange(BATCH, dtype=np.int32)
    loss = functools.partial(batch_loss, model, task)
    grad = lambda p, idx: jax.value_and_grad(loss)(p, x_all[idx], y_all[idx])
    vg = jax.jit(grad)
    step = jax.jit(lambda p, idx: jax.tree.map(lambda a, g: a - LR * g / BATCH, p, grad(p, idx)[1]))
    dw = jax.jit(lambda x, d: x.T @ d)
    xd = jax.random.normal(jax.random.PRNGKey(0), (BATCH, 65536))
    dd = jax.random.normal(jax.random.PRNGKey(1), (BATCH, 128))
    opt = optimizer_for(sc.strategy)
    update, state = make_sum_step(opt), opt.init(params)
    at = (params,)  # a worker's tiles at its own parameters, as an asynchronous run calls them
    g = apart.gradients(at, ds, rows, 1)[0].grad
    out = lambda parts: [(p.loss, p.grad) for p in parts]
    tiles = range(0, BATCH, TILE)
    return {
        "bare fused step, 32 rows": lambda: step(params, rows),
        "bare value_and_grad, 32 rows": lambda: vg(params, rows),
        "bare value_and_grad, 8 rows x 4": lambda: [vg(params, rows[i : i + TILE]) for i in tiles],
        "dense weight gradient, 32 rows": lambda: dw(xd, dd),
        "dense weight gradient, 8 rows x 4": lambda: [dw(xd[i : i + TILE], dd[i : i + TILE]) for i in tiles],
        "exact, tiles of 8 stacked first": lambda: out(stacked.gradients(at, ds, rows, 1)),
        "exact, tiles of 8 kept apart (fred)": lambda: out(apart.gradients(at, ds, rows, 1)),
        "exact, one tile of 32": lambda: out(whole.gradients(at, ds, rows, 1)),
        "fast, 32 rows": lambda: out(fast.gradients(params, ds, rows, 1)),
        "server update (sum_step)": lambda: update(params, state, g, BATCH),
    }


def main(argv: list[str] | None = None) -> int:
    parser = options(__doc__, "best of 3", "timed repeats (default 7; quick 3)", RESULTS)
    args, started, facts = begin(parser, argv, full=7, quick=3)
    fns = {name: (lambda fn=fn: jax.block_until_ready(fn())) for name, fn in programs().items()}
    best, _ = best_in_turn(fns, args.repeats)
    base = best["bare fused step, 32 rows"]
    print("\nOne worker's step of the dense-heavy CNN (8.4 M parameters), batch 32")
    print(table(["program", "ms", "/ bare step"], [[k, 1e3 * v, v / base] for k, v in best.items()]))
    results = {"repeats": args.repeats, "machine": facts, "ms": {k: 1e3 * v for k, v in best.items()}}
    write_results(args.out, results, started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
