#!/usr/bin/env python
"""fred on models of realistic size and shape: ResNet-20 on CIFAR-shaped data, a dense-heavy CNN
and a bring-your-own Flax ResNet-20, against bare JAX loops.

    python benchmarks/realistic.py            # full run: ResNet-20 at 8 and 16 workers, other shapes
    python benchmarks/realistic.py --quick    # smoke run: 8 workers, fewer steps, best of 1
    python benchmarks/realistic.py --shapes dense_cnn,flax_resnet   # the other shapes only

ResNet-20 with GroupNorm (0.27 M parameters) on synthetic CIFAR-shaped images (32 x 32 x 3,
10 classes), batch 32 per worker, for ASGD, SSGD over a ring all-reduce, Local SGD and SGP at
8 and 16 workers, each with three numerics: the default (``reduction: exact``, tiles of 8
rows), per-example leaves (``exact_tile: 1``) and ``reduction: fast``. Then two other shapes
(:data:`SHAPES`), 8 workers each:

- **dense_cnn**, ASGD: the built-in ``cnn`` with channels [32, 64], kernel 3, hidden 128 (8.4 M
  parameters, nearly all in one 65,536 x 128 dense layer): the default, ``fast``, and tiles of
  32 rows (``exact_tile: 32``, one tile a worker's batch);
- **flax_resnet**, SGP: ResNet-20 with GroupNorm written in Flax linen (``flax_resnet.py``),
  ``model: {kind: python}``: the default and ``fast``.

Against:

- the **per-worker loop**: one jitted fused step (gradient of a worker's 32 rows and the SGD
  update, one program) per gradient step fred simulates (its compute events: Local SGD's local
  steps too), on the batches fred's workers draw;
- for SSGD also the **large-batch loop**: one fused step of all workers' rows per update.

The *bare loop* of a case is the faster of the two. Everything is timed in turn in this one
process, best of ``--repeats`` after one untimed warm-up that pays every compilation. fred's
time is ``fred.run``'s wall time less its evaluations (``eval_wall_s``) and less building the
run (loading the data, the model, the cluster), both reported apart; the runs evaluate at their
start and end only, on 256 held-out images. The whole ``fred.run`` (building and evaluations
included) over the bare loop is reported beside it ("whole").

Peak memory: each case runs once more in a process of its own (``--memory-of``), fred or a bare
loop, and reports its peak resident set (``VmHWM``): the process's whole footprint, JAX and the
data included, as a user sees it.

Last, the verdicts table (the targets of a training loop's speed):

| target | limit |
| --- | --- |
| default (exact, tiles of 8) / bare loop, every case | <= 1.3 |
| fast / bare loop, every case | <= 1.1 |
| peak memory / bare loop's, every case | <= 1.5 |
| 16-worker Local SGD and SGP (default) / per-worker loop | <= 1.0 |
| the Flax ResNet-20's SGP (default) / per-worker loop | <= 1.1 |

Results are printed as tables and written to ``benchmarks/results/realistic.json`` (without the
ResNet-20 cases: ``realistic_shapes.json``).
"""

from __future__ import annotations

import contextlib
import functools
import json
import resource
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from common import RESULTS_DIR, begin, best_in_turn, jittered_cluster, options, table, write_results

import fred
from fred.numerics import rng
from fred.numerics.data import GlobalBatchStream
from fred.runs import runner
from fred.runs.api import resolve
from fred.runs.runner import build

RESULTS = RESULTS_DIR / "realistic.json"
HERE = Path(__file__).resolve().parent
BATCH = 32
LR = 0.05
STRATEGIES = ("asgd", "ssgd", "local_sgd", "sgp")
SYNC_EVERY = 4  # Local SGD's local steps between averaging rounds
NUMERICS = {
    "default": {},
    "per_example": {"exact_tile": 1},
    "fast": {"reduction": "fast"},
    "tile_32": {"exact_tile": 32},  # the dense-heavy model only: one tile a worker's batch
}
# Each model's numerics (per-example leaves of 8.4 M parameters would hold 2 GB a 64-row chunk)
MODEL_NUMERICS = {
    "resnet": ("default", "per_example", "fast"),
    "dense_cnn": ("default", "tile_32", "fast"),
    "flax_resnet": ("default", "fast"),
}
MODELS: dict[str, dict[str, Any]] = {
    "resnet": {"kind": "resnet", "depth": 20, "width": 16, "norm": "group"},
    # 8.4 M parameters, nearly all in the 65,536 x 128 dense layer after the convolutions
    "dense_cnn": {"kind": "cnn", "channels": [32, 64], "kernel_size": 3, "hidden": 128},
    # ResNet-20 with GroupNorm written in Flax linen: a bring-your-own model (flax_resnet.py)
    "flax_resnet": {"kind": "python", "factory": "flax_resnet:resnet20", "code_dir": str(HERE)},
}
# The other model shapes, each one case: (model, strategy, workers)
SHAPES = (("dense_cnn", "asgd", 8), ("flax_resnet", "sgp", 8))
TARGETS = {"default": 1.3, "fast": 1.1, "memory": 1.5, "per_worker_16": 1.0, "byo": 1.1}


def scenario(strategy: str, workers: int, numerics: str, steps: int, model: str = "resnet") -> dict[str, Any]:
    """About ``steps`` gradient steps of ``strategy`` on ``model`` (a key of :data:`MODELS`; each
    worker's batch of 32 is one step)."""
    strat: dict[str, Any] = {"name": strategy, "lr": LR, **NUMERICS[numerics]}
    updates = steps
    if strategy == "ssgd":
        strat["aggregation"] = "allreduce"
        updates = max(steps // workers, 1)
    elif strategy == "local_sgd":  # an update is an averaging round: every worker's SYNC_EVERY steps
        strat["sync_every"] = SYNC_EVERY
        updates = max(steps // (workers * SYNC_EVERY), 1)
    return {
        "name": f"realistic-{model}-{strategy}-{workers}-{numerics}",
        "seed": 0,
        "model": MODELS[model],
        "data": {
            "source": {"kind": "synthetic_images", "examples": 4096},
            "batch_size": BATCH,
            "eval_examples": 256,
        },
        **jittered_cluster(workers, 0.05),
        "strategy": strat,
        "stop": {"max_updates": updates},
        "eval": {"every_updates": 10**6},  # the start and the end only
    }


# ----------------------------------------------------------------------------- the bare loops
class BareLoops:
    """The scenario's model, data and initial parameters trained by jitted fused steps with
    nothing simulated: per worker step (batch 32), and for SSGD per update (all workers' rows)."""

    def __init__(self, scn: dict[str, Any], steps: int):
        sc = resolve(scn)
        built = build(sc)
        ds, model = built.dataset, built.numerics.model
        self.params = built.sim.init_params
        self.x, self.y = jnp.asarray(ds.x_train), jnp.asarray(ds.y_train)
        workers = sc.cluster.workers

        def loss(params, x, y):
            out = model.apply(params, x)
            return -jnp.sum(jnp.take_along_axis(jax.nn.log_softmax(out), y[:, None], axis=1))

        def step(params, x_all, y_all, idx):
            value, grad = jax.value_and_grad(loss)(params, x_all[idx], y_all[idx])
            return jax.tree.map(lambda p, g: p - LR * g / idx.shape[0], params, grad), value

        self.step = jax.jit(step)
        stream = GlobalBatchStream(len(ds.y_train), workers, BATCH, rng.stream(sc.seed, "data", "batches"))
        self.per_worker = np.stack([stream.next_for(k % workers) for k in range(steps)]).astype(np.int32)
        rounds = max(steps // workers, 1)
        self.large = self.per_worker[: rounds * workers].reshape(rounds, workers * BATCH)

    def run(self, batches: np.ndarray):
        params = self.params
        for idx in batches:
            params, _ = self.step(params, self.x, self.y, idx)
        return jax.block_until_ready(params)


# ----------------------------------------------------------------------------- one case
@contextlib.contextmanager
def built_in() -> Iterator[dict[str, float]]:
    """The least wall seconds ``fred.runs.runner.build`` took for each scenario (by name) inside the
    block: loading the data, building the model and the cluster, before any step (a fixed cost
    reported apart: 0.5-1 s, a large share of a short run's)."""
    build, seconds = runner.build, {}

    def timed(scenario: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return build(scenario)
        finally:
            spent = time.perf_counter() - t0
            seconds[scenario.name] = min(spent, seconds.get(scenario.name, spent))

    runner.build = timed  # type: ignore[assignment]
    try:
        yield seconds
    finally:
        runner.build = build  # type: ignore[assignment]


def steps_of(result: fred.RunResult) -> int:
    """The gradient steps a run simulated (its compute events): Local SGD's local steps too, which
    the summary's ``gradients`` (gradients applied to the model) counts as one a round."""
    return int((result.events["kind"] == "compute").sum())


def case(strategy: str, workers: int, steps: int, repeats: int, model: str = "resnet") -> dict[str, Any]:
    """fred with each numerics and the bare loops, timed in turn: seconds, ratios, gradients; for
    fred both its training seconds and the whole ``fred.run`` (building and evaluations included)."""
    numerics = MODEL_NUMERICS[model]
    scns = {name: scenario(strategy, workers, name, steps, model) for name in numerics}
    gradients = {name: steps_of(fred.run(scn)) for name, scn in scns.items()}  # also compiles
    bare = BareLoops(scns["default"], gradients["default"])
    loops: dict[str, Any] = {f"fred_{name}": functools.partial(fred.run, scn) for name, scn in scns.items()}
    loops["per_worker"] = functools.partial(bare.run, bare.per_worker)
    if strategy == "ssgd":
        loops["large_batch"] = functools.partial(bare.run, bare.large)
    with built_in() as build_s:
        best, out = best_in_turn(loops, repeats)
    row: dict[str, Any] = {"model": model, "strategy": strategy, "workers": workers, "gradients": gradients}
    row["bare_s"] = min(best["per_worker"], best.get("large_batch", float("inf")))
    for name in NUMERICS:
        if name not in numerics:
            row.update(
                {f"{name}_{k}": float("nan") for k in ("s", "over_bare", "over_per_worker", "whole_s")}
            )
            row[f"{name}_whole_over_bare"] = float("nan")
            continue
        summary = out[f"fred_{name}"].summary
        row[f"{name}_eval_s"] = summary["eval_wall_s"]
        row[f"{name}_build_s"] = build_s[scns[name]["name"]]
        row[f"{name}_whole_s"] = best[f"fred_{name}"]
        row[f"{name}_s"] = best[f"fred_{name}"] - summary["eval_wall_s"] - row[f"{name}_build_s"]
        row[f"{name}_over_bare"] = row[f"{name}_s"] / row["bare_s"]
        row[f"{name}_over_per_worker"] = row[f"{name}_s"] / best["per_worker"]
        row[f"{name}_whole_over_bare"] = row[f"{name}_whole_s"] / row["bare_s"]
    row["per_worker_s"] = best["per_worker"]
    row["large_batch_s"] = best.get("large_batch", float("nan"))
    row["ms_per_step_bare"] = 1e3 * row["bare_s"] / gradients["default"]
    return row


def peak_rss_mb(strategy: str, workers: int, steps: int, what: str, model: str = "resnet") -> float:
    """Peak resident set of a process that runs one case once: fred with ``what`` numerics, or a bare loop."""
    spec = json.dumps(
        {"strategy": strategy, "workers": workers, "steps": steps, "what": what, "model": model}
    )
    done = subprocess.run(
        [sys.executable, __file__, "--memory-of", spec], capture_output=True, text=True, check=True
    )
    return float(done.stdout.strip().splitlines()[-1])


def _memory_of(spec: dict[str, Any]) -> None:
    """Run one case once in this process and print its peak RSS in MB (the child of :func:`peak_rss_mb`)."""
    what, model = spec["what"], spec.get("model", "resnet")
    if what in NUMERICS:
        fred.run(scenario(spec["strategy"], spec["workers"], what, spec["steps"], model))
    else:
        scn = scenario(spec["strategy"], spec["workers"], "default", spec["steps"], model)
        bare = BareLoops(scn, spec["steps"])
        bare.run(bare.large if what == "large_batch" else bare.per_worker)
    print(peak_resident_mb())


def peak_resident_mb() -> float:
    """This process's peak resident set (VmHWM). Not ``ru_maxrss``: on Linux a child starts with
    its parent's at the fork, and keeps it through exec, so every child reported the benchmark's."""
    for line in open("/proc/self/status", encoding="ascii"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def memory(strategy: str, workers: int, model: str = "resnet") -> dict[str, float]:
    """Peak RSS of each numerics and bare loop, a process each, over one step a worker (Local SGD:
    one round): what a step holds does not grow with the steps."""
    loops = ["per_worker", *(["large_batch"] if strategy == "ssgd" else [])]
    steps = workers * (SYNC_EVERY if strategy == "local_sgd" else 1)
    numerics = MODEL_NUMERICS[model]
    rss = {what: peak_rss_mb(strategy, workers, steps, what, model) for what in [*numerics, *loops]}
    bare = min(rss[loop] for loop in loops)
    return {
        **{f"{name}_rss_mb": rss.get(name, float("nan")) for name in [*NUMERICS, *loops]},
        "bare_rss_mb": bare,
        **{f"{name}_rss_over_bare": rss.get(name, float("nan")) / bare for name in NUMERICS},
    }


# ----------------------------------------------------------------------------- verdicts
def verdicts(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []

    def target(what: str, value: float, limit: float) -> None:
        out.append({"target": what, "value": value, "limit": f"<= {limit}", "met": bool(value <= limit)})

    for r in rows:
        label = f"{r['workers']} workers {r['strategy']}"
        if r["model"] != "resnet":
            label = f"{r['model']}, {label}"
        if r["model"] == "flax_resnet":
            target(f"{label}: default / per-worker loop", r["default_over_per_worker"], TARGETS["byo"])
        target(f"{label}: default / bare loop", r["default_over_bare"], TARGETS["default"])
        target(f"{label}: fast / bare loop", r["fast_over_bare"], TARGETS["fast"])
        target(f"{label}: default peak RSS / bare loop's", r["default_rss_over_bare"], TARGETS["memory"])
        if r["workers"] == 16 and r["strategy"] in ("local_sgd", "sgp"):
            target(
                f"{label}: default / per-worker loop", r["default_over_per_worker"], TARGETS["per_worker_16"]
            )
    return out


def plan(quick: bool, shapes: str) -> list[tuple[str, str, int]]:
    """The cases to run, (model, strategy, workers) each: ResNet-20's four strategies at 8 and 16
    workers (8 with ``quick``), then the other shapes asked for (:data:`SHAPES`)."""
    wanted = shapes.split(",")
    cases = [
        ("resnet", strategy, workers)
        for workers in ((8,) if quick else (8, 16))
        for strategy in STRATEGIES
        if "resnet" in wanted
    ]
    return cases + [shape for shape in SHAPES if shape[0] in wanted]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--memory-of"]:
        _memory_of(json.loads(argv[1]))
        return 0
    parser = options(
        __doc__,
        "8 workers only, 16 steps a worker count, best of 1",
        "timed repeats (default 3; quick 1)",
        RESULTS,
    )
    parser.add_argument(
        "--shapes",
        default="resnet,dense_cnn,flax_resnet",
        help="the model shapes to run, comma-separated: resnet (the 8 or 16 ResNet-20 cases), "
        "dense_cnn, flax_resnet (one case each)",
    )
    args, started, facts = begin(parser, argv, full=3, quick=1)
    if args.out == RESULTS and "resnet" not in args.shapes.split(","):  # the ResNet-20 cases' file stays
        args.out = RESULTS_DIR / "realistic_shapes.json"
    rows = []
    for model, strategy, workers in plan(args.quick, args.shapes):
        steps = (2 if args.quick else 4) * workers  # gradient steps a case: 4 a worker (SSGD: 4 rounds)
        row = case(strategy, workers, steps, args.repeats, model)
        row.update(memory(strategy, workers, model))
        rows.append(row)
        print(
            f"  {model}, {workers} workers {strategy}: default/bare {row['default_over_bare']:.2f}, "
            f"fast/bare {row['fast_over_bare']:.2f}, per-example/bare {row['per_example_over_bare']:.2f}, "
            f"tile 32/bare {row['tile_32_over_bare']:.2f}",
            file=sys.stderr,
            flush=True,
        )
    print(
        "\nBatch 32 a worker: fred's training seconds over the bare loop's (evaluation and building "
        "the run excluded, reported apart), and the whole fred.run's over the bare loop's"
    )
    print(
        table(
            [
                "model",
                "workers",
                "strategy",
                "grads",
                "bare ms/step",
                "default",
                "per-example",
                "tile 32",
                "fast",
                "default/per-worker",
                "eval s",
                "build s",
                "whole default",
                "whole fast",
            ],
            [
                [
                    r["model"],
                    r["workers"],
                    r["strategy"],
                    r["gradients"]["default"],
                    r["ms_per_step_bare"],
                    r["default_over_bare"],
                    r["per_example_over_bare"],
                    r["tile_32_over_bare"],
                    r["fast_over_bare"],
                    r["default_over_per_worker"],
                    r["default_eval_s"],
                    r["default_build_s"],
                    r["default_whole_over_bare"],
                    r["fast_whole_over_bare"],
                ]
                for r in rows
            ],
        )
    )
    print("\nPeak memory (RSS, MB) of one process running the case once")
    print(
        table(
            [
                "model",
                "workers",
                "strategy",
                "bare",
                "default",
                "per-example",
                "tile 32",
                "fast",
                "default/bare",
            ],
            [
                [
                    r["model"],
                    r["workers"],
                    r["strategy"],
                    r["bare_rss_mb"],
                    r["default_rss_mb"],
                    r["per_example_rss_mb"],
                    r["tile_32_rss_mb"],
                    r["fast_rss_mb"],
                    r["default_rss_over_bare"],
                ]
                for r in rows
            ],
        )
    )
    verdict = verdicts(rows)
    print("\nVerdicts")
    print(
        table(
            ["target", "value", "limit", "met"],
            [[v["target"], v["value"], v["limit"], v["met"]] for v in verdict],
        )
    )
    print(f"   {sum(v['met'] for v in verdict)} of {len(verdict)} met\n")
    results = {
        "quick": args.quick,
        "repeats": args.repeats,
        "targets": TARGETS,
        "machine": facts,
        "cases": rows,
        "verdicts": verdict,
    }
    write_results(args.out, results, started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
