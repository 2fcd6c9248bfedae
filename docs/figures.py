#!/usr/bin/env python
"""Regenerate the README's figure from fred's own runs.

    python docs/figures.py        # writes docs/img/convergence.png (about a minute)

It runs the four shipped baselines (`scenarios/baselines/`: SSGD and ASGD on 8 simulated
workers, each with and without worker 7 four times slower) with `fred.run` in this process,
writes no run directory, and plots each run's held-out loss (`metrics.parquet`'s
`eval_loss`) against simulated time (`sim_time_s`).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import fred  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "img" / "convergence.png"

# (scenario, label, colour, line style)
RUNS = [
    ("ssgd.yaml", "SSGD (ring all-reduce)", "tab:blue", "-"),
    ("ssgd_straggler.yaml", "SSGD, one worker 4× slower", "tab:blue", "--"),
    ("asgd.yaml", "ASGD (parameter server)", "tab:orange", "-"),
    ("asgd_straggler.yaml", "ASGD, one worker 4× slower", "tab:orange", "--"),
]


def main() -> None:
    fig, ax = plt.subplots(figsize=(7.0, 4.4), dpi=110)
    for file, label, colour, style in RUNS:
        result = fred.run(ROOT / "scenarios" / "baselines" / file)
        m = result.metrics
        updates = int(result.summary["updates"])
        ax.plot(m["sim_time_s"], m["eval_loss"], style, color=colour, lw=2,
                label=f"{label}: {updates:,} updates")
    ax.set_xlabel("simulated wall-clock time (s)")
    ax.set_ylabel("held-out loss (cross-entropy)")
    ax.set_yscale("log")
    ax.set_xlim(0, 2.0)
    ax.set_title("8 simulated workers training an MLP on 8×8 digits")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=9, frameon=False, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.16))
    fig.tight_layout()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(OUT, bbox_inches="tight", metadata={"Software": None})
    print(f"wrote {OUT.relative_to(ROOT)} ({OUT.stat().st_size // 1024} kB)")


if __name__ == "__main__":
    main()
