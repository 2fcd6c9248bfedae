"""Pipe-SGD (Li et al., NeurIPS 2018) on the paper's cluster: fred's speed-ups next to its 3.2-5.4x.

    python scenarios/pipe_sgd/validation.py              # the section for docs/validation.md (seconds)
    python scenarios/pipe_sgd/validation.py --row int8   # one row's runs, printed

The paper's models are not in any source we hold (docs/hpsgd-pipe-sgd.md says what was
looked for), so fred cannot predict a speed-up per model. What it can predict without them
is the largest speed-up Pipe-SGD can have on the paper's cluster, over any model: the
speed-up over AR-SGD peaks where the compute thread's time equals the compressed ring's,
and that peak depends on the compression ratio, the number of workers and the codec's cost
per byte against the wire's; on the gradient's size only through the ring's latency. Every number
below is read off simulated runs (timing-only: the schedule without the numbers); the
compute time of the peak is found from a run too, not computed from a formula.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import NamedTuple

import numpy as np

import fred

HERE = Path(__file__).resolve().parent
PAPER_LOW, PAPER_HIGH = 3.2, 5.4  # the seed text: "3.2~5.4x speedups compared to conventional approaches"
NEAR_ZERO_S = 1e-6  # a compute time that leaves only the communication thread's period
GPU_CODEC_S_PER_BYTE = 1e-11  # ~100 GB/s of raw gradient through a GPU kernel (assumed)
CPU_CODEC_S_PER_BYTE = 1e-9  # ~1 GB/s through one CPU core (assumed)


class Variant(NamedTuple):
    key: str
    label: str
    scenario: str  # scenarios/pipe_sgd/paper_<scenario>.yaml
    strategy: dict  # overrides of that file's strategy


VARIANTS = [
    Variant("none", "no compression", "pipe", {}),
    Variant("fp16", "16-bit truncation, free codec", "pipe_fp16", {"codec_s_per_byte": 0.0}),
    Variant("int8", "8-bit quantisation, free codec", "pipe_int8", {"codec_s_per_byte": 0.0}),
    Variant(
        "int8-gpu-ends",
        "8-bit, GPU-class codec at the ends",
        "pipe_int8",
        {"codec_s_per_byte": GPU_CODEC_S_PER_BYTE},
    ),
    Variant(
        "int8-gpu-hops",
        "8-bit, GPU-class codec at every hop",
        "pipe_int8_every_hop",
        {"codec_s_per_byte": GPU_CODEC_S_PER_BYTE},
    ),
    Variant(
        "int8-cpu-ends",
        "8-bit, CPU-class codec at the ends",
        "pipe_int8",
        {"codec_s_per_byte": CPU_CODEC_S_PER_BYTE},
    ),
    Variant(
        "int8-cpu-hops",
        "8-bit, CPU-class codec at every hop",
        "pipe_int8_every_hop",
        {"codec_s_per_byte": CPU_CODEC_S_PER_BYTE},
    ),
]
QUICK = ("none", "int8", "int8-gpu-hops")


class Row(NamedTuple):
    variant: Variant
    compute_s: float  # l_comp at the peak
    pipe_s: float  # seconds per iteration at the peak
    arsgd_s: float
    ps_s: float
    codec_bound: (
        bool  # the codec alone outlasts the ring: the compute thread sets the pace at any compute time
    )

    @property
    def over_arsgd(self) -> float:
        return self.arsgd_s / self.pipe_s

    @property
    def over_ps(self) -> float:
        return self.ps_s / self.pipe_s


def run(
    scenario: str,
    compute_s: float,
    iterations: int,
    strategy: dict | None = None,
    param_bytes: int | None = None,
) -> fred.RunResult:
    workload = {"timing_only": True, **({"param_bytes": param_bytes} if param_bytes else {})}
    return fred.run(
        HERE / f"paper_{scenario}.yaml",
        workload=workload,
        cluster={"compute": {"step_time_s": compute_s}},
        strategy=strategy or {},
        stop={"max_updates": iterations},
    )


def period_s(result: fred.RunResult) -> float:
    """Steady-state seconds per iteration: worker0's gaps between compute starts, second half."""
    events = result.events
    starts = events[(events["entity"] == "worker0") & (events["kind"] == "compute")]["start_s"].to_numpy()
    gaps = np.diff(starts)
    return float(np.median(gaps[len(gaps) // 2 :]))


def codec_per_iteration_s(result: fred.RunResult) -> float:
    """worker0's compute-thread codec time per iteration (decompress + compress), from its events."""
    events = result.events
    mine = events[(events["entity"] == "worker0") & events["kind"].isin(["compress", "decompress"])]
    if mine.empty:
        return 0.0
    per_kind = (mine["end_s"] - mine["start_s"]).groupby(mine["kind"]).median()
    return float(per_kind.sum())


def peak(variant: Variant, iterations: int, param_bytes: int | None = None) -> Row:
    """Pipe-SGD's largest speed-up: at the compute time where the compute thread's period meets
    the communication thread's, both read off a run whose compute is all but free."""
    bare = run(variant.scenario, NEAR_ZERO_S, iterations, variant.strategy, param_bytes)
    compute_s = period_s(bare) - codec_per_iteration_s(bare)
    codec_bound = compute_s <= NEAR_ZERO_S  # then the gain is largest with the least compute
    compute_s = max(compute_s, NEAR_ZERO_S)
    pipe = period_s(run(variant.scenario, compute_s, iterations, variant.strategy, param_bytes))
    arsgd = period_s(run("arsgd", compute_s, iterations, param_bytes=param_bytes))
    ps = period_s(run("ps_sgd", compute_s, iterations, param_bytes=param_bytes))
    return Row(variant, compute_s, pipe, arsgd, ps, codec_bound)


def rows(quick: bool = False) -> list[Row]:
    iterations = 12 if quick else 40
    return [peak(v, iterations) for v in VARIANTS if not quick or v.key in QUICK]


def table(found: list[Row]) -> list[str]:
    lines = [
        "| Pipe-SGD k = 1 | l_comp at the peak (ms) | s / iteration: Pipe-SGD, AR-SGD, PS-SGD "
        + "| fred: largest speed-up over AR-SGD | against the paper's 5.4x | reaches the paper's 3.2x? "
        + "| over PS-SGD | reproduce |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in found:
        error = (r.over_arsgd - PAPER_HIGH) / PAPER_HIGH
        note = " (codec-bound: below 1x at any compute time)" if r.codec_bound and r.over_arsgd < 1 else ""
        lines.append(
            f"| {r.variant.label} | {r.compute_s * 1e3:.1f} | {r.pipe_s:.4f}, {r.arsgd_s:.4f}, {r.ps_s:.4f} "
            "| "
            f"**{r.over_arsgd:.2f}x**{note} | {error:+.0%} | {'yes' if r.over_arsgd >= PAPER_LOW else 'no'} "
            "| "
            f"{r.over_ps:.1f}x | `python scenarios/pipe_sgd/validation.py --row {r.variant.key}` |"
        )
    return lines


def section(quick: bool = False) -> str:
    """The Pipe-SGD section of docs/validation.md; ``quick`` runs three variants, 12 iterations each."""
    found = rows(quick)
    by_key = {r.variant.key: r for r in found}
    best = max(found, key=lambda r: r.over_arsgd)
    lines = [
        "## Pipe-SGD: 3.2-5.4x over conventional approaches on four nodes and 10 GbE",
        "",
        'Li et al. report 3.2-5.4x speed-ups of Pipe-SGD over "conventional approaches" (AR-SGD and a',
        "parameter server on an extra node) in wall-clock time for the same number of iterations, on four",
        "TitanXP nodes over 10 Gbit/s Ethernet. Their models are not in any source we hold, so no row below",
        "is one of their benchmarks: each is the **largest** speed-up Pipe-SGD (k = 1, level 1) can have on",
        "that cluster over any model, found by running it at the compute time where its two threads",
        "take equally long. It depends on the compression, the 4 workers and the codec's cost per byte",
        "against the wire's; on the model's size only through the ring's latency, and not on its compute "
        "time.",
        "",
        *table(found),
        "",
        f"**Largest over AR-SGD: {best.over_arsgd:.2f}x ({best.variant.label}), against the paper's up to "
        f"{PAPER_HIGH}x.**",
    ]
    if "none" in by_key:
        lines.append(
            f"Without compression Pipe-SGD can at best hide all compute behind communication: "
            f"{by_key['none'].over_arsgd:.2f}x, short of the paper's lower end of {PAPER_LOW}x."
        )
    if "int8" in by_key:
        lines.append(
            "8-bit quantisation moves a quarter of the bytes; at the peak an AR-SGD iteration is its "
            "compute "
            f"plus four times that much communication, so {by_key['int8'].over_arsgd:.2f}x is the ceiling "
            f"over AR-SGD. The paper's 5.4x is above it: against a ring at line rate it cannot be reached, "
            f"so it was measured against a slower baseline (the parameter server reaches "
            f"{by_key['int8'].over_ps:.1f}x here) or a slower AR-SGD than a ring at line rate."
        )
    if not quick:
        tenth = peak(VARIANTS[2], 40, param_bytes=10_000_000).over_arsgd
        lines.append(
            f"With a 10 MB gradient instead of 100 MB the free-codec int8 ceiling is {tenth:.2f}x: the "
            "ring's "
            f"0.3 ms of latency is then a tenth of its 3 ms, not a hundredth."
        )
    lines += [
        "",
        "Constants (none fitted; each run is timing-only):",
        "",
        "- 4 workers, 10 Gbit/s Ethernet (1.25e9 B/s, line rate): the paper's cluster as the seed text "
        "states it.",
        "- 50 µs per ring step: a TCP round on switched 10 GbE, assumed; its 6 steps are 0.3 ms of a 30 ms "
        "ring.",
        "- 100 MB gradient: a placeholder; the peak depends on it only through latency (the full run checks "
        "10 MB).",
        "- Compute time: found per row from a run with near-free compute (its period less the codec's time",
        "  on the compute thread); not a paper figure.",
        f"- Codec cost per raw byte: 0 (free), {GPU_CODEC_S_PER_BYTE:g} s (about 100 GB/s, a GPU kernel) and",
        f"  {CPU_CODEC_S_PER_BYTE:g} s (about 1 GB/s, one CPU core): assumptions bracketing where the "
        "paper's codec",
        '  ran, which the text we hold does not say. "Ends" charges compressing g_local and decompressing',
        '  g_sum on the compute thread (Algorithm 1); "every hop" also charges the decompress-add-recompress',
        "  of each of the ring's p - 1 reduce-scatter steps on the communication thread (the paper:",
        '  compression "is invoked repeatedly, complexity O(p)" in Ring-AllReduce).',
        "- PS-SGD: synchronous SGD through one server node on the same 10 GbE link (`paper_ps_sgd.yaml`).",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--row", choices=[v.key for v in VARIANTS], help="run one row and print its runs")
    parser.add_argument("--quick", action="store_true", help="three rows, 12 iterations each")
    args = parser.parse_args(argv)
    if args.row:
        r = peak(next(v for v in VARIANTS if v.key == args.row), 40)
        print(
            f"{r.variant.label}: l_comp {r.compute_s:.6f} s; s/iteration Pipe-SGD {r.pipe_s:.6f}, "
            f"AR-SGD {r.arsgd_s:.6f}, PS-SGD {r.ps_s:.6f}; over AR-SGD {r.over_arsgd:.3f}x, over PS-SGD "
            f"{r.over_ps:.2f}x"
        )
        return
    print(section(args.quick), end="")


if __name__ == "__main__":
    main(sys.argv[1:])
