"""SSGD vs Local SGD vs HPSGD at 4, 8 and 16 workers; prints docs/hpsgd-results.md.

    python scenarios/hpsgd/experiments.py     # about a minute on 2 cores

Throughput is training examples processed per simulated second (all workers);
"syncs" counts each worker's all-reduces in the 60 simulated seconds.
"""

from __future__ import annotations

import sys
from pathlib import Path

import fred

HERE = Path(__file__).resolve().parent
TARGET_LOSS = 0.3


def row(method: str, workers: int) -> tuple[str, float]:
    r = fred.run(HERE / f"{method}_{workers}.yaml")
    events, batch = r.events, r.scenario.data.batch_size
    computes = int((events["kind"] == "compute").sum())
    syncs = int(((events["kind"] == "allreduce") & (events["entity"] == "worker0")).sum())
    throughput = computes * batch / r.summary["sim_time_s"]
    hit = r.time_to(TARGET_LOSS)
    reached = f"{hit[0]:.1f}" if hit else "not reached"
    line = (
        f"| {workers} | {method} | {throughput:,.0f} | {syncs} | {reached} | "
        f"{r.summary['final_eval_loss']:.3f} | {r.summary['final_eval_accuracy']:.3f} |"
    )
    return line, throughput


def main() -> None:
    lines = [
        "# HPSGD experiments: results",
        "",
        "Produced by `python scenarios/hpsgd/experiments.py` (60 simulated seconds per run, seed 0).",
        "Do not edit by hand; see [hpsgd-pipe-sgd.md](hpsgd-pipe-sgd.md) for the discussion.",
        "",
        f"| workers | method | examples / s | syncs (worker 0) | s to loss {TARGET_LOSS} | final loss | "
        "final accuracy |",
        "|---|---|---|---|---|---|---|",
    ]
    speedups = []
    for workers in (4, 8, 16):
        got = {m: row(m, workers) for m in ("ssgd", "local_sgd", "hpsgd")}
        lines += [got[m][0] for m in ("ssgd", "local_sgd", "hpsgd")]
        hp = got["hpsgd"][1]
        speedups.append(
            f"| {workers} | {100 * (hp / got['local_sgd'][1] - 1):+.0f} % | "
            f"{100 * (hp / got['ssgd'][1] - 1):+.0f} % |"
        )
    lines += [
        "",
        "Throughput of HPSGD relative to the others:",
        "",
        "| workers | vs Local SGD | vs SSGD |",
        "|---|---|---|",
    ]
    lines += speedups + [""]
    out = HERE.parents[1] / "docs" / "hpsgd-results.md"
    out.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
