"""SSGD vs ASGD vs the grouped hybrid with two slowed workers; prints docs/hybrid-results.md.

python scenarios/hybrid/experiments.py     # under a minute on 2 cores
"""

from __future__ import annotations

import sys
from pathlib import Path

import fred

HERE = Path(__file__).resolve().parent
TARGETS = [1.0, 0.5, 0.3]


def main() -> None:
    lines = [
        "# Grouped hybrid experiment: results",
        "",
        "Produced by `python scenarios/hybrid/experiments.py` (120 simulated seconds, seed 0).",
        "Do not edit by hand; see [hybrid.md](hybrid.md).",
        "",
        "| method | updates | final loss | final accuracy | "
        + " | ".join(f"s to loss {t}" for t in TARGETS)
        + " | mean staleness | groups |",
        "|---" * (6 + len(TARGETS)) + "|",
    ]
    for method in ("ssgd", "asgd", "grouped_hybrid"):
        r = fred.run(HERE / f"{method}.yaml")
        s = r.summary
        reached = [r.time_to(t) for t in TARGETS]
        lines.append(
            f"| {method} | {s['updates']} | {s['final_eval_loss']:.3f} | {s['final_eval_accuracy']:.3f} | "
            + " | ".join(f"{hit[0]:.0f}" if hit else "not reached" for hit in reached)
            + f" | {s['mean_staleness']:.2f} | {s.get('groups', '—')} |"
        )
    out = HERE.parents[1] / "docs" / "hybrid-results.md"
    out.write_text("\n".join(lines + [""]))
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
