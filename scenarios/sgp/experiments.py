"""The SGP paper's cluster table, simulated: hours for 90 ImageNet epochs at 4-32 nodes.

    python scenarios/sgp/experiments.py      # about 2 minutes on 2 cores

Each scenario simulates 30 s of its cluster; the steady-state seconds per iteration
(median gap between worker 0's gradient steps over the second half) times the
iterations of 90 epochs (1,281,167 images, 256 per node per iteration) gives hours.
Prints docs/sgp-results.md.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

import fred

HERE = Path(__file__).resolve().parent
NODES = [4, 8, 16, 32]
METHODS = ["arsgd", "dpsgd", "sgp", "osgp"]
IMAGES, PER_NODE, EPOCHS = 1_281_167, 256, 90
PAPER_HOURS = {  # seed 004's table, 10 Gbit/s Ethernet; 1-OSGP given at 16 nodes only
    "arsgd": [22.0, 14.0, 8.5, 5.1],
    "dpsgd": [19.7, 9.7, 5.0, 2.6],
    "sgp": [11.8, 5.9, 3.2, 1.7],
    "osgp": [math.nan, math.nan, 1.8, math.nan],
}


def seconds_per_iteration(result: fred.RunResult) -> float:
    ev = result.events
    starts = ev[(ev["entity"] == "worker0") & (ev["kind"] == "compute")]["start_s"].to_numpy()
    gaps = np.diff(starts)
    return float(np.median(gaps[len(gaps) // 2 :]))


def fmt(x: float, digits: int = 2) -> str:
    return "—" if math.isnan(x) else f"{x:.{digits}f}"


def main() -> None:
    hours: dict[str, list[float]] = {m: [] for m in METHODS}
    per_iter: dict[str, list[float]] = {m: [] for m in METHODS}
    for method in METHODS:
        for nodes in NODES:
            period = seconds_per_iteration(fred.run(HERE / f"{method}_{nodes}.yaml"))
            iterations = math.ceil(EPOCHS * IMAGES / (nodes * PER_NODE))
            per_iter[method].append(period)
            hours[method].append(period * iterations / 3600)
    lines = [
        "# SGP cluster table: results",
        "",
        "Produced by `python scenarios/sgp/experiments.py`. Do not edit by hand; see [sgp.md](sgp.md).",
        "",
        "## Seconds per iteration (simulated, steady state)",
        "",
        "| method | " + " | ".join(f"{n} nodes" for n in NODES) + " |",
        "|---" * (len(NODES) + 1) + "|",
    ]
    lines += [f"| {m} | " + " | ".join(f"{p:.4f}" for p in per_iter[m]) + " |" for m in METHODS]
    lines += ["", "## Hours for 90 epochs: simulated (paper)", "", lines[6], lines[7]]
    for m in METHODS:
        lines.append(
            f"| {m} | "
            + " | ".join(f"{fmt(h)} ({fmt(p, 1)})" for h, p in zip(hours[m], PAPER_HOURS[m]))
            + " |"
        )
    lines += ["", "## Ratios: simulated (paper)", "", lines[6], lines[7]]
    for num, den in [("arsgd", "sgp"), ("dpsgd", "sgp"), ("arsgd", "osgp")]:
        ours = [a / b for a, b in zip(hours[num], hours[den])]
        theirs = [a / b for a, b in zip(PAPER_HOURS[num], PAPER_HOURS[den])]
        lines.append(
            f"| {num}/{den} | " + " | ".join(f"{fmt(o)} ({fmt(t)})" for o, t in zip(ours, theirs)) + " |"
        )
    out = HERE.parents[1] / "docs" / "sgp-results.md"
    out.write_text("\n".join(lines + [""]))
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
