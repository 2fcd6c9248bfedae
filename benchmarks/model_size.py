#!/usr/bin/env python
"""fred's overhead against model size: at what cost per step the simulation stops showing.

    python benchmarks/model_size.py            # 4 MLP sizes x SSGD/ASGD x exact/fast x 8/64 workers, ~5 min
    python benchmarks/model_size.py --quick    # 2 sizes, 8 workers, exact only, best of 2, ~45 s

A simulated update costs fred roughly the same Python whatever the model (events, links,
the tape, one call per computed value), while the bare loop's step grows with the model.
So fred/bare falls as the model grows; ``overhead.py`` measures it on the digits MLP
``[64]`` only, whose bare step (0.03-0.6 ms) is about the cost of simulating one update.
This script runs ``overhead.py``'s scenarios and bare loops (same data, batches, initial
parameters, and the same check of which loop gives fred's bits) with wider MLPs, and
reports, per case, fred over the fastest bare loop, fred over the fastest loop that gives
fred's bits, and what fred adds per update in milliseconds. Ratios, never asserts.
"""

from __future__ import annotations

import sys
from typing import Any

from common import RESULTS_DIR, begin, options, say_timing, table, write_results
from overhead import (
    ASGD_UPDATES,
    PERF_TARGET_RATIO,
    WORKERS,
    batch_for,
    compare,
    digits_scenario,
    ssgd_rounds,
)

# (hidden layers, SSGD updates at 8 workers): fewer rounds for wider models keep each case near a second.
# ASGD always makes overhead.ASGD_UPDATES.
MODELS: tuple[tuple[tuple[int, ...], int], ...] = (
    ((64,), 300),
    ((128, 128), 150),
    ((256, 256), 50),
    ((512, 512), 16),
)
QUICK_MODELS = MODELS[0:1] + MODELS[2:3]
RESULTS = RESULTS_DIR / "model_size.json"


def scenario(
    hidden: tuple[int, ...], strategy: str, reduction: str, updates: int, workers: int
) -> dict[str, Any]:
    scn = digits_scenario(strategy, reduction, updates, workers)
    scn["model"] = {**scn["model"], "hidden": list(hidden)}
    return scn


def case(
    hidden: tuple[int, ...], updates: int, strategy: str, reduction: str, workers: int, repeats: int
) -> dict[str, Any]:
    """fred against both bare loops on one model, timed in turn; which loops give fred's bits is checked."""
    updates = ssgd_rounds(updates, workers, 4) if strategy == "ssgd" else ASGD_UPDATES
    return {
        "hidden": list(hidden),
        **compare(scenario(hidden, strategy, reduction, updates, workers), repeats),
    }


def crossover(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per case, the smallest model at which fred is within the target of each loop (None: none measured)."""
    out = []
    for key in sorted(
        {(r["workers"], r["strategy"], r["reduction"]) for r in rows},
        key=lambda k: (k[0], k[1] != "ssgd", k[2]),
    ):
        mine = [r for r in rows if (r["workers"], r["strategy"], r["reduction"]) == key]
        within = lambda ratio: next((r["hidden"] for r in mine if r[ratio] <= PERF_TARGET_RATIO), None)  # noqa: B023 (called within this iteration)
        out.append(
            {
                "workers": key[0],
                "strategy": key[1],
                "reduction": key[2],
                "within_target_of_fastest_loop_from": within("ratio_fred_over_fastest_loop"),
                "within_target_of_same_bits_from": within("ratio_fred_over_fastest_same_bits"),
            }
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = options(
        __doc__,
        "2 model sizes, 8 workers, exact only",
        "timed repeats per case, in turn (best is kept); default 3, --quick 2",
        RESULTS,
    )
    args, started, facts = begin(parser, argv, full=3, quick=2)
    repeats = args.repeats
    say_timing(args, ", fred and the loops in turn")

    models = QUICK_MODELS if args.quick else MODELS
    workers = WORKERS[:1] if args.quick else WORKERS
    reductions = ("exact",) if args.quick else ("exact", "fast")
    rows = []
    for w in workers:
        for strategy in ("ssgd", "asgd"):
            for reduction in reductions:
                for hidden, updates in models:
                    rows.append(case(hidden, updates, strategy, reduction, w, repeats))
                    r = rows[-1]
                    print(
                        f"  {w} workers {strategy} {reduction} {list(hidden)}: fred/fastest "
                        f"{r['ratio_fred_over_fastest_loop']:.2f}",
                        file=sys.stderr,
                        flush=True,
                    )

    print(
        "Overhead against model size: digits, MLP (relu) of the given hidden layers, batch "
        f"{batch_for(WORKERS[0])} "
        f"per worker at {WORKERS[0]} workers, {batch_for(WORKERS[1])} at {WORKERS[1]} (target "
        f"{PERF_TARGET_RATIO})"
    )
    headers = [
        "workers",
        "strategy",
        "reduction",
        "hidden",
        "params",
        "updates",
        "grads: fred, loop",
        "loop ms/update",
        "fred/fastest loop",
        "fred/same-bits",
        "fred adds ms/update",
        "plain: fred's bits",
        "same-bits: fred's bits",
    ]
    print(
        table(
            headers,
            [
                [
                    r["workers"],
                    r["strategy"],
                    r["reduction"],
                    "x".join(map(str, r["hidden"])),
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
                for r in rows
            ],
        )
    )
    print(
        "   loop ms/update: the faster bare loop (plain or same-bits) whatever its bits; fred/same-bits: "
        "over the"
    )
    print(
        "   faster loop that gave fred's bits (first step; SSGD: final parameters too); fred adds: (fred - "
        "that loop) / updates\n"
    )
    cross = crossover(rows)
    print(f"Smallest model measured at which fred is within {PERF_TARGET_RATIO}x")
    print(
        table(
            ["workers", "strategy", "reduction", "of the fastest loop", "of the same-bits loop"],
            [
                [
                    c["workers"],
                    c["strategy"],
                    c["reduction"],
                    _hidden(c["within_target_of_fastest_loop_from"]),
                    _hidden(c["within_target_of_same_bits_from"]),
                ]
                for c in cross
            ],
        )
    )
    print()
    write_results(
        args.out,
        {
            "quick": args.quick,
            "repeats": repeats,
            "target_ratio": PERF_TARGET_RATIO,
            "machine": facts,
            "cases": rows,
            "crossover": cross,
        },
        started,
    )
    return 0


def _hidden(hidden: list[int] | None) -> str:
    return "none measured" if hidden is None else "x".join(map(str, hidden))


if __name__ == "__main__":
    sys.exit(main())
