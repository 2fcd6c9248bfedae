"""The SGP paper's Ethernet table (seed 004) predicted: two constants fitted on two entries, eleven predicted.

    python scenarios/sgp/validation.py        # prints the section of docs/validation.md (a few seconds)

The paper gives hours for 90 ImageNet epochs of ResNet-50 on 4-32 nodes of 8 V100s over
10 Gbit/s Ethernet. Each entry becomes seconds per iteration (hours x 3600 over the
iterations of 90 epochs at 256 images per node), written to ``paper/measured.csv``; ``fred
fit`` fits the node's host overhead and the transport's efficiency on the 4-node SGP and
D-PSGD entries only and predicts every other entry.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

from fred.tools.fit import FitResult, fit

HERE = Path(__file__).resolve().parent
PAPER = HERE / "paper"
NODES = [4, 8, 16, 32]
IMAGES, PER_NODE, EPOCHS = 1_281_167, 256, 90
PAPER_HOURS = {  # seed 004's table (10 Gbit/s Ethernet); 1-OSGP is given at 16 nodes only
    "arsgd": {4: 22.0, 8: 14.0, 16: 8.5, 32: 5.1},
    "dpsgd": {4: 19.7, 8: 9.7, 16: 5.0, 32: 2.6},
    "sgp": {4: 11.8, 8: 5.9, 16: 3.2, 32: 1.7},
    "osgp": {16: 1.8},
}
NAMES = {"arsgd": "AR-SGD", "dpsgd": "D-PSGD", "sgp": "SGP", "osgp": "1-OSGP"}
FITTED_ON = ["sgp_4.yaml", "dpsgd_4.yaml"]
CONSTANTS = "cluster.compute.host_overhead_s,network.efficiency"
READINGS = {
    "cluster.compute.host_overhead_s": "the node's time per iteration beyond its GPUs' 0.09 s of compute: "
    "DataParallel's scatter, replicate, gather and gradient reduce over 8 GPUs, the Python loop, data "
    "loading",
    "network.efficiency": "the share of 10 Gbit/s line rate PyTorch 0.5's TCP backend reached "
    "(GPU-to-host copies, one TCP stream per pair)",
}


def iterations(nodes: int) -> int:
    return math.ceil(EPOCHS * IMAGES / (PER_NODE * nodes))


def write_measurements() -> Path:
    """``paper/measured.csv``: every entry of the paper's table as seconds per iteration."""
    lines = ["scenario,measured_s,paper_hours,iterations"]
    for method, hours in PAPER_HOURS.items():
        for nodes, h in hours.items():
            lines.append(f"{method}_{nodes}.yaml,{h * 3600 / iterations(nodes):.6g},{h},{iterations(nodes)}")
    path = PAPER / "measured.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


def holdout() -> str:
    """Every row but the two the constants are fitted on."""
    rows = [f"{m}_{n}.yaml" for m, hours in PAPER_HOURS.items() for n in hours]
    return ",".join(r for r in rows if r not in FITTED_ON)


def command() -> str:
    return f"fred fit scenarios/sgp/paper/measured.csv --fit {CONSTANTS} --holdout {holdout()}"


def predict(quick: bool = False) -> FitResult:
    """The fit and its predictions. It takes seconds, so ``quick`` changes nothing: fewer timed
    iterations would catch 1-OSGP's pipeline still filling."""
    return fit(write_measurements(), CONSTANTS, holdout())


def section(quick: bool = False) -> str:
    """The Markdown section of docs/validation.md: the paper's entries, fred's predictions, the errors."""
    result = predict(quick)
    by_label = {row.label: (row, p) for row, p in zip(result.rows, result.predicted_s)}
    lines = [
        "## SGP: hours for 90 ImageNet epochs on an Ethernet cluster (seed 004)",
        "",
        "The cluster as the authors' code ran it (their repository's README, job scripts and",
        "`gossip_module/`): one process per node driving 8 V100s (`--gres=gpu:8`, batch 256 per",
        "node), PyTorch 0.5's TCP backend over 10 Gbit/s Ethernet for every method. AR-SGD",
        "all-reduces one flattened ResNet-50 (102.4 MB) after the gradient step; the TCP backend",
        "does it by recursive doubling, log2 p full swaps. D-PSGD pairs nodes on their bipartite",
        "exponential graph with a blocking send then receive (`PushPull`: the pair's two copies",
        "cross one after the other); SGP pushes to one peer of the directed exponential graph with",
        "a non-blocking send and a blocking receive; 1-OSGP overlaps one iteration's gossip with",
        "the next one's compute. Scenarios: `scenarios/sgp/paper/`.",
        "",
        "Not fitted: 0.09 s of GPU compute per iteration (32 images per V100 at ~360 images/s in",
        "fp32), 50 µs latency, 10 Gbit/s line rate. Fitted on the 4-node SGP and D-PSGD entries",
        "only (two constants, two entries: they are met exactly):",
        "",
        "| constant | fitted | physical reading |",
        "|---|---|---|",
    ]
    for path, value in result.values.items():
        lines.append(f"| `{path}` | {value:.4g} | {READINGS[path]} |")
    efficiency = result.values["network.efficiency"]
    overhead = result.values["cluster.compute.host_overhead_s"]
    lines += [
        "",
        f"The efficiency is {efficiency * 10:.2g} Gbit/s of the 10, a plausible rate for a single TCP stream "
        "fed from",
        f"GPU memory; the overhead is {overhead / 0.09:.0%} of the GPUs' compute.",
        "",
        "Seconds per iteration (hours), the paper's and fred's:",
        "",
        "| method | nodes | paper s/it (h) | fred s/it (h) | error | row |",
        "|---|---|---|---|---|---|",
    ]
    errors = []
    for method, hours in PAPER_HOURS.items():
        for nodes in hours:
            row, predicted = by_label[f"{method}_{nodes}.yaml"]
            error = result.error_pct(row, predicted)
            if row.held_out:
                errors.append(abs(error))
            fred_hours = predicted * iterations(nodes) / 3600
            lines.append(
                f"| {NAMES[method]} | {nodes} | {row.measured_s:.3f} ({hours[nodes]:.1f}) | "
                f"{predicted:.3f} ({fred_hours:.1f}) | {error:+.1f} % | "
                f"{'fitted' if not row.held_out else 'predicted'} |"
            )
    lines += [
        "",
        f"Predicted entries: mean absolute error {sum(errors) / len(errors):.1f} %, largest "
        f"{max(errors):.1f} %.",
        "",
        "Ratios AR-SGD / SGP, the paper's table's headline:",
        "",
        "| nodes | paper | fred |",
        "|---|---|---|",
    ]
    for nodes in NODES:
        paper = PAPER_HOURS["arsgd"][nodes] / PAPER_HOURS["sgp"][nodes]
        ours = by_label[f"arsgd_{nodes}.yaml"][1] / by_label[f"sgp_{nodes}.yaml"][1]
        lines.append(f"| {nodes} | {paper:.2f} | {ours:.2f} |")
    sgp_s = {n: PAPER_HOURS["sgp"][n] * 3600 / iterations(n) for n in NODES}
    lines += [
        "",
        f"Where it misses: the paper's SGP and D-PSGD slow as nodes are added (SGP {sgp_s[4]:.3f} s per "
        "iteration",
        f"at 4 nodes, {sgp_s[32]:.3f} s at 32), which this model, where every node pushes to one peer on a",
        "non-blocking switch, does not have; so SGP's hours fall short at 16-32 nodes and the AR-SGD / SGP",
        "ratio overshoots there. AR-SGD at 4 nodes is slower in the paper than two swaps of a copy take",
        "here. The line-rate ring model of `docs/sgp.md` (constants from the stated hardware, nothing",
        "fitted) misses the same ratio by 30-50 % and the hours by 2-5x.",
        "",
        f"Reproduce: `python scenarios/sgp/validation.py`, or the fit alone: `{command()}`.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(print(section()))
