#!/usr/bin/env python
"""Regenerate the README's and the tutorial's figures from fred's own runs.

    python docs/figures.py            # writes docs/img/convergence.png (about a minute)
    python docs/figures.py --resnet   # writes docs/img/resnet20.png (about 15 minutes on 2 cores)

It runs the four shipped baselines (`scenarios/baselines/`: SSGD and ASGD on 8 simulated
workers, each with and without worker 7 four times slower) with `fred.run` in this process,
writes no run directory, and plots each run's held-out loss (`metrics.parquet`'s
`eval_loss`) against simulated time (`sim_time_s`).

``--resnet`` runs the four `scenarios/cifar/` baselines (ResNet-20 with GroupNorm, 8 workers of
32 images) on synthetic CIFAR-shaped images instead of CIFAR-10's files, which are not shipped,
for RESNET_S simulated seconds each, and plots them alike (the tutorial's section 5).
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import fred  # noqa: E402
from fred.scenario.loading import read_yaml  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "img" / "convergence.png"

RESNET_OUT = ROOT / "docs" / "img" / "resnet20.png"
RESNET_S = 1.0  # simulated seconds a run: up to 5,000 ResNet-20 gradients of 32 images at 1.6 ms a step
RESNET_DATA = {
    "source": {"kind": "synthetic_images", "examples": 8192},
    "batch_size": 32,
    "eval_examples": 512,
}
RESNET_RUNS = [
    ("ssgd.yaml", "SSGD (ring all-reduce)", "tab:blue"),
    ("asgd.yaml", "ASGD (parameter server)", "tab:orange"),
    ("local_sgd.yaml", "Local SGD (averaging every 8 steps)", "tab:green"),
    ("sgp.yaml", "SGP (gossip, one peer)", "tab:red"),
]

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
        ax.plot(
            m["sim_time_s"], m["eval_loss"], style, color=colour, lw=2, label=f"{label}: {updates:,} updates"
        )
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


def resnet() -> None:
    fig, ax = plt.subplots(figsize=(7.0, 4.4), dpi=110)
    for file, label, colour in RESNET_RUNS:
        # The quick variant (synthetic images) with the full scenario's strategy, batch and length.
        strategy = read_yaml(ROOT / "scenarios" / "cifar" / file)["strategy"]
        result = fred.run(
            ROOT / "scenarios" / "cifar" / "quick" / file,
            data=RESNET_DATA,
            strategy=strategy,
            stop={"max_updates": None, "max_sim_time_s": RESNET_S},
            eval={"every_updates": None, "every_s": RESNET_S / 20},
        )
        m = result.metrics
        steps = int((result.events["kind"] == "compute").sum())  # gradient steps, Local SGD's local ones too
        accuracy = m["eval_accuracy"].iloc[-1]
        ax.plot(
            m["sim_time_s"],
            m["eval_loss"],
            color=colour,
            lw=2,
            label=f"{label}: {steps:,} gradient steps, {accuracy:.0%} accuracy",
        )
        print(
            f"  {file}: {steps} gradient steps, final eval loss {m['eval_loss'].iloc[-1]:.3f}, "
            f"accuracy {m['eval_accuracy'].iloc[-1]:.3f}, {result.summary['wall_time_s']:.0f} s",
            flush=True,
        )
    ax.set_xlabel("simulated wall-clock time (s)")
    ax.set_ylabel("held-out loss (cross-entropy)")
    ax.set_yscale("log")
    ax.set_xlim(0, RESNET_S)
    ax.set_title(
        "ResNet-20 (GroupNorm), 8 simulated workers of 32 images\non synthetic CIFAR-shaped images (32×32×3, "
        "10 classes)"
    )
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=9, frameon=False, ncol=1, loc="upper center", bbox_to_anchor=(0.5, -0.16))
    fig.tight_layout()
    fig.savefig(RESNET_OUT, bbox_inches="tight", metadata={"Software": None})
    print(f"wrote {RESNET_OUT.relative_to(ROOT)} ({RESNET_OUT.stat().st_size // 1024} kB)")


if __name__ == "__main__":
    resnet() if "--resnet" in sys.argv[1:] else main()
