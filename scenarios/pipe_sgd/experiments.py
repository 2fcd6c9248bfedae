"""AR-SGD vs Pipe-SGD variants on a communication-bound and a compute-bound setting.

    python scenarios/pipe_sgd/experiments.py     # under a minute on 2 cores

Prints docs/pipe-sgd-results.md: simulated seconds per iteration (steady state),
speed-up over AR-SGD, the paper's model max(l_up + l_comp, l_comm) and its scaling
efficiency, bytes on the wire, and the loss after 300 iterations.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

import fred
from fred.numerics.codecs import QUANTIZERS
from fred.simulation.network import ring_allreduce_time_s

HERE = Path(__file__).resolve().parent
CASES = [
    "arsgd",
    "pipe_k1",
    "pipe_k1_fp16",
    "pipe_k1_int8",
    "pipe_k1_level2",
    "compute_bound_arsgd",
    "compute_bound_pipe_k1",
]


def period_s(r: fred.RunResult) -> float:
    starts = r.events[(r.events["entity"] == "worker0") & (r.events["kind"] == "compute")][
        "start_s"
    ].to_numpy()
    return float(np.median(np.diff(starts)[-50:]))


def model_s(r: fred.RunResult) -> tuple[float, float]:
    """The paper's steady-state iteration time and scaling efficiency for this scenario."""
    s = r.scenario
    strategy, n = s.strategy, s.cluster.workers
    l_comp = s.cluster.compute.step_time_s
    if strategy.name == "arsgd":
        l_comm = ring_allreduce_time_s(n, r.summary["param_bytes"], s.network)
        return l_comp + l_comm, l_comp / (l_comp + l_comm)
    raw = r.summary["param_bytes"]
    codec = strategy.codec_s_per_byte * raw if strategy.compression is not None else 0.0
    wire = (
        float(raw)
        if strategy.compression is None
        else QUANTIZERS[strategy.compression.kind]().wire_bytes(raw, len(r.params))
    )
    segments = strategy.segments if strategy.pipeline_level == 2 else 1
    l_comm = ring_allreduce_time_s(n, wire, s.network, segments=segments)
    l_busy = strategy.update_s + codec + l_comp + codec
    return max(l_busy, l_comm), l_busy / max(l_busy, l_comm)


def main() -> None:
    lines = [
        "# Pipe-SGD experiments: results",
        "",
        "Produced by `python scenarios/pipe_sgd/experiments.py` (300 iterations, 4 workers, seed 0).",
        "Do not edit by hand; see [hpsgd-pipe-sgd.md](hpsgd-pipe-sgd.md) for the discussion.",
        "",
        "| scenario | s / iteration | speed-up vs AR-SGD | model max(l_up+l_comp, l_comm) | scaling "
        "efficiency | MB sent | final loss |",
        "|---|---|---|---|---|---|---|",
    ]
    base = {}
    for case in CASES:
        r = fred.run(HERE / f"{case}.yaml")
        period = period_s(r)
        key = "compute_bound" if case.startswith("compute_bound") else "comm"
        base.setdefault(key, period)
        model, efficiency = model_s(r)
        lines.append(
            f"| {case} | {period:.4f} | {base[key] / period:.2f}x | {model:.4f} | {efficiency:.2f} "
            f"| {r.summary['bytes_sent'] / 1e6:,.0f} | {r.summary['final_eval_loss']:.3f} |"
        )
    out = HERE.parents[1] / "docs" / "pipe-sgd-results.md"
    out.write_text("\n".join(lines + [""]))
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
