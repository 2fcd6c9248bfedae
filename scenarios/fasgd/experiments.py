"""Re-run the FASGD paper's experiments on the bundled digits and print docs/fasgd-results.md.

    python scenarios/fasgd/experiments.py            # about 10 minutes on 2 cores
    python scenarios/fasgd/experiments.py --quick    # a smoke run, minutes less

1. ASGD vs SASGD vs FASGD at 4, 16 and 64 clients, each method's learning rate
   chosen from a grid as the paper did (the best mean final loss over the scales),
   in simulated time and, with the same settings, on the logical clock.
2. B-FASGD at 16 clients: sweeps over c_fetch (pushes kept) and c_push (fetches kept).
Every run is a shipped scenario in this folder with overrides; nothing is tuned
after the fact. The output is the results page, written as produced.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import fred
from fred.scenario.loading import read_yaml

HERE = Path(__file__).resolve().parent
CLIENTS = [4, 16, 64]
METHODS = ["asgd", "sasgd", "fasgd"]
LR_GRID = {  # wide enough that each method's best mean lies inside its grid, not on an edge
    "asgd": [0.001, 0.003, 0.01, 0.03, 0.1],
    "sasgd": [0.1, 0.3, 1.0, 3.0],
    "fasgd": [0.001, 0.003, 0.01, 0.03],
}
C_GRID = [0.003, 0.01, 0.03, 0.1, 0.3]
TARGET_LOSS = 0.3


def scenario(method: str, clients: int, **overrides) -> dict:
    data = read_yaml(HERE / f"{method}_{clients}.yaml")
    return fred.scenario.loading.merge(data, overrides)


def fmt(x: float, digits: int = 3) -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}g}"


def final_loss(result: fred.RunResult) -> float:
    loss = result.summary["final_eval_loss"]
    return math.inf if loss is None else loss


def choose_learning_rates(updates: int) -> tuple[dict[str, float], list[str]]:
    lines = [
        "| method | lr | " + " | ".join(f"{n} clients" for n in CLIENTS) + " | mean |",
        "|---" * (len(CLIENTS) + 3) + "|",
    ]
    best: dict[str, float] = {}
    for method in METHODS:
        scores = {}
        for lr in LR_GRID[method]:
            losses = [
                final_loss(fred.run(scenario(method, n, strategy={"lr": lr}, stop={"max_updates": updates})))
                for n in CLIENTS
            ]
            scores[lr] = sum(losses) / len(losses)
            lines.append(
                f"| {method} | {lr:g} | " + " | ".join(fmt(x) for x in losses) + f" | {fmt(scores[lr])} |"
            )
        best[method] = min(scores, key=lambda lr: scores[lr])
    return best, lines


def compare(best: dict[str, float], updates: int, clock: str) -> list[str]:
    unit = "s" if clock == "simulated" else "steps"
    lines = [
        f"| clients | method | lr | final loss | final accuracy | {unit} to loss {TARGET_LOSS} | updates to "
        f"loss {TARGET_LOSS} | mean staleness |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for n in CLIENTS:
        for method in METHODS:
            r = fred.run(
                scenario(
                    method, n, strategy={"lr": best[method], "clock": clock}, stop={"max_updates": updates}
                )
            )
            t, u = r.time_to(TARGET_LOSS) or (math.nan, math.nan)
            s = r.summary
            lines.append(
                f"| {n} | {method} | {best[method]:g} | {fmt(s['final_eval_loss'])} | "
                f"{fmt(s['final_eval_accuracy'])} "
                f"| {fmt(t)} | {fmt(u)} | {fmt(s['mean_staleness'])} |"
            )
    return lines


def bandwidth(best_lr: float, updates: int) -> list[str]:
    lines = [
        "| c_fetch | c_push | final loss | fetches sent / opportunities | pushes sent / opportunities | "
        "total bytes vs FASGD | updates from cached gradients |",
        "|---|---|---|---|---|---|---|",
    ]
    base_bytes = None
    settings = [(0.0, 0.0)] + [(c, 0.0) for c in C_GRID] + [(0.0, c) for c in C_GRID]
    for c_fetch, c_push in settings:
        r = fred.run(
            scenario(
                "bfasgd",
                16,
                strategy={"lr": best_lr, "c_fetch": c_fetch, "c_push": c_push},
                stop={"max_updates": updates},
            )
        )
        s = r.summary
        total = s["bytes_pushed"] + s["bytes_fetched"]
        base_bytes = base_bytes or total
        fetch_ops = s["fetches_sent"] + s["fetches_dropped"]
        push_ops = s["pushes_sent"] + s["pushes_dropped"]
        lines.append(
            f"| {c_fetch:g} | {c_push:g} | {fmt(s['final_eval_loss'])} | {s['fetches_sent']}/{fetch_ops} "
            f"({s['fetches_sent'] / fetch_ops:.2f}) | {s['pushes_sent']}/{push_ops} "
            f"({s['pushes_sent'] / push_ops:.2f}) "
            f"| {total / base_bytes:.2f} (÷{base_bytes / total:.1f}) | {int(r.updates['cached'].sum())} |"
        )
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer updates, for a smoke run")
    parser.add_argument("--out", default=str(HERE.parents[1] / "docs" / "fasgd-results.md"))
    args = parser.parse_args(argv)
    updates = 300 if args.quick else 3000
    best, grid = choose_learning_rates(updates)
    page = [
        "# FASGD experiments: results",
        "",
        f"Produced by `python scenarios/fasgd/experiments.py` ({updates} updates per run, seed 0, digits,"
        " MLP of 200 ReLU units). Do not edit by hand; see [fasgd.md](fasgd.md) for the discussion.",
        "",
        "## Learning-rate grid (final eval loss; the best mean per method is used below)",
        "",
        *grid,
        "",
        "## ASGD vs SASGD vs FASGD, simulated clock",
        "",
        *compare(best, updates, "simulated"),
        "",
        "## The same on the logical clock (the original FRED dispatcher)",
        "",
        *compare(best, updates, "logical"),
        "",
        "## B-FASGD at 16 clients: dropping fetches, dropping pushes",
        "",
        *bandwidth(best["fasgd"], updates),
        "",
    ]
    Path(args.out).write_text("\n".join(page))
    print("\n".join(page))


if __name__ == "__main__":
    sys.exit(main())
