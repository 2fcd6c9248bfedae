"""PyTorch DDP's measured scaling predicted: two constants fitted on two entries, the rest predicted.

    python scenarios/ddp/validation.py        # prints the section of docs/validation.md (a minute or two)

The table is PyTorch's own DDP benchmark (``benchmarks/distributed/ddp/README.md``): ResNet-50
at batch 32 per V100 on 1-64 GPUs of 8 DGX-1 machines, median seconds per iteration with DDP's
default 25 MB buckets, and the throughput lost with 1 MB buckets. Each entry is written to
``measured.csv`` (a 1 MB entry as the 25 MB median over one minus its loss); ``fred fit`` fits
the step-time spread and a bucket's compute cost on the 64-GPU entry and the 16-GPU 1 MB entry
only. A later run of the same benchmark (``later/``, ResNet-50 and ResNet-101 on 2-16 GPUs) is
held back: it is predicted with the constants fitted here, never fitted.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import NamedTuple

from fred.simulation import nccl
from fred.tools.fit import FitResult, Predictor, fit, read_measurements

HERE = Path(__file__).resolve().parent
ONE_GPU_S = 0.097  # the table's 1-GPU entry, without DDP: the step's compute
MEDIAN_S = {
    2: 0.104,
    4: 0.105,
    8: 0.108,
    16: 0.109,
    24: 0.111,
    32: 0.110,
    40: 0.113,
    48: 0.112,
    56: 0.115,
    64: 0.113,
}
LOSS_1MB = {
    2: 0.008,
    8: 0.035,
    16: 0.054,
    32: 0.055,
    48: 0.071,
    64: 0.064,
}  # throughput lost with 1 MB buckets (p75)
JUDGED_LOSS = (8, 16, 32, 64)  # the 1 MB losses the prediction is held to (within 3 points)
FITTED_ON = ["resnet50_64.yaml", "resnet50_16_1mb.yaml"]
CONSTANTS = "cluster.jitter.sigma,cluster.compute.bucket_overhead_s"
READINGS = {
    "cluster.jitter.sigma": "the spread of one GPU's step time from step to step (lognormal): a synchronous "
    "step "
    "waits for the slowest of n, so the median step grows with n as the largest of n draws does",
    "cluster.compute.bucket_overhead_s": "a bucket's cost on the compute stream each step: launching its "
    "all-reduce "
    "and copying its gradients into the flat buffer and back, beside NCCL's own latency",
}
# The later run (held back): 1-GPU times without DDP and with it, medians with 25 MB buckets, and p75 with 1
# MB.
LATER = {
    "resnet50": {
        "one_gpu_s": 0.097,
        "ddp_one_gpu_s": 0.100,
        "median_s": {2: 0.103, 4: 0.103, 8: 0.104, 16: 0.104},
        "p75_1mb_s": {2: 0.104, 4: 0.105, 8: 0.107, 16: 0.108},
    },
    "resnet101": {
        "one_gpu_s": 0.162,
        "ddp_one_gpu_s": 0.171,
        "median_s": {2: 0.176, 4: 0.176, 8: 0.179, 16: 0.179},
        "p75_1mb_s": {2: 0.179, 4: 0.180, 8: 0.184, 16: 0.187},
    },
}
# Another table, on other machines (held back): OneFlow's DLPerf, PyTorch 1.6 DDP, ResNet-50 v1.5 at
# batch 128 a V100, DALI, FP32, one 100 Gbit/s EDR NIC a node; images per second (median of 5 runs).
DLPERF_IMAGES_PER_S = {1: 350.66, 4: 1306.49, 8: 2707.42, 16: 5193.09, 32: 10032.72}
DLPERF_BATCH = 128
ITERATIONS, QUICK_ITERATIONS, WARMUP = 200, 40, 5


def dlperf_s(n: int) -> float:
    """DLPerf's seconds per iteration on ``n`` GPUs: the batch of each over its share of the images a
    second."""
    return DLPERF_BATCH * n / DLPERF_IMAGES_PER_S[n]


def write_measurements() -> tuple[Path, Path]:
    """``measured.csv`` (the table) and ``later/measured.csv`` (the held-back run), seconds per iteration."""
    lines = ["scenario,measured_s,source"]
    for n, median_s in MEDIAN_S.items():
        lines.append(f"resnet50_{n}.yaml,{median_s},p50 with 25 MB buckets")
        if n in LOSS_1MB:
            lines.append(
                f"resnet50_{n}_1mb.yaml,{median_s / (1 - LOSS_1MB[n]):.6g},"
                f"p50 with 25 MB buckets over 1 - {LOSS_1MB[n]:.3f} (1 MB buckets' loss)"
            )
    table = HERE / "measured.csv"
    table.write_text("\n".join(lines) + "\n")
    lines = ["scenario,measured_s,source"]
    for model, run in LATER.items():
        for n in run["median_s"]:
            lines.append(f"{model}_{n}.yaml,{run['median_s'][n]},p50 with 25 MB buckets")
            lines.append(f"{model}_{n}_1mb.yaml,{run['p75_1mb_s'][n]},p75 with 1 MB buckets")
    later = HERE / "later" / "measured.csv"
    later.write_text("\n".join(lines) + "\n")
    lines = ["scenario,measured_s,source"]
    for n in DLPERF_IMAGES_PER_S:
        if n > 1:
            lines.append(
                f"resnet50_{n}.yaml,{dlperf_s(n):.6g},{DLPERF_BATCH} x {n} / {DLPERF_IMAGES_PER_S[n]} "
                "images/s"
            )
    (HERE / "dlperf" / "measured.csv").write_text("\n".join(lines) + "\n")
    return table, later


def holdout() -> str:
    """Every row of the table but the two the constants are fitted on."""
    rows = [line.split(",")[0] for line in (HERE / "measured.csv").read_text().splitlines()[1:]]
    return ",".join(r for r in rows if r not in FITTED_ON)


def command() -> str:
    return (
        f"fred fit scenarios/ddp/measured.csv --fit {CONSTANTS} --holdout {holdout()} "
        f"--iterations {ITERATIONS} --warmup {WARMUP}"
    )


class Prediction(NamedTuple):
    fit: FitResult
    later: dict[str, float]  # the later run's rows, predicted with the fitted constants
    dlperf: dict[str, float]  # DLPerf's rows, likewise
    no_spread: dict[str, float]  # the table's rows with the fitted bucket cost and no spread
    with_share: dict[str, float]  # the table's rows with a collective share of 0.15 as well


def _predicted(csv: Path, paths: list[str], values: tuple[float, ...], iterations: int) -> dict[str, float]:
    """Every row of ``csv`` run with ``values`` at ``paths``: simulated seconds per iteration by label."""
    rows = read_measurements(csv)
    predictor = Predictor(rows, paths, iterations, WARMUP)
    return {row.label: predictor.seconds(row, values) for row in rows}


def predict(quick: bool = False) -> Prediction:
    """The fit and its predictions; ``quick`` times fewer iterations (the spread averages less)."""
    iterations = QUICK_ITERATIONS if quick else ITERATIONS
    table, later = write_measurements()
    result = fit(table, CONSTANTS, holdout(), iterations=iterations, warmup=WARMUP)
    paths, values = list(result.values), tuple(result.values.values())
    sigma, overhead = (
        result.values["cluster.jitter.sigma"],
        result.values["cluster.compute.bucket_overhead_s"],
    )
    share = "cluster.compute.collective_share"
    return Prediction(
        result,
        _predicted(later, paths, values, iterations),
        _predicted(HERE / "dlperf" / "measured.csv", paths, values, iterations),
        _predicted(
            table, ["cluster.jitter.sigma", "cluster.compute.bucket_overhead_s"], (0.0, overhead), iterations
        ),
        _predicted(table, [*paths, share], (sigma, overhead, 0.15), iterations),
    )


def node_busbw_bps(n: int) -> float:
    """The NVLink bus bandwidth of the GPUs a run of ``n`` uses on one DGX-1 (from nvidia-smi topo -m):
    GPUs 0-1 share one NVLink; GPUs 0-3 have four each among them; all eight have six each."""
    return {2: 25e9, 4: 100e9}.get(min(n, 8), 150e9)


def picks(n: int) -> str:
    """What NCCL's model picks for a 25 MiB and a 1 MiB bucket on ``n`` GPUs, and their times."""
    fabric = nccl.Fabric(n, max(n // 8, 1), node_busbw_bps(n), 50e9)
    chosen = [nccl.choose(size, fabric) for size in (25 * 2**20, 2**20)]
    return " | ".join(f"{c.algorithm}/{c.protocol}, {c.time_s * 1e3:.2f} ms" for c in chosen)


def _over_ms(seconds: float, one_gpu_s: float = ONE_GPU_S) -> float:
    return (seconds - one_gpu_s) * 1e3


def _within(measured_ms: float, predicted_ms: float) -> bool:
    """The tolerance on t_n - t_1: 25 % of the measured overhead or 2 ms, whichever is larger."""
    return abs(predicted_ms - measured_ms) <= max(0.25 * abs(measured_ms), 2.0)


def _loss(seconds_25: float, seconds_1: float) -> float:
    """Throughput lost with 1 MB buckets: 1 - t(25 MB) / t(1 MB)."""
    return 1 - seconds_25 / seconds_1


def section(quick: bool = False) -> str:
    """The Markdown section of docs/validation.md."""
    p = predict(quick)
    result = p.fit
    by_label = {row.label: (row, s) for row, s in zip(result.rows, result.predicted_s)}
    sigma, overhead = (
        result.values["cluster.jitter.sigma"],
        result.values["cluster.compute.bucket_overhead_s"],
    )
    lines = [
        "## PyTorch DDP: ResNet-50 on 1-64 V100, 25 MB and 1 MB buckets",
        "",
        "PyTorch's own DDP benchmark (`benchmarks/distributed/ddp/README.md` in the PyTorch repository):",
        "ResNet-50 at batch 32 per GPU, 8 DGX-1 machines of 8 V100 (`nvidia-smi topo -m`: the hybrid cube",
        "mesh, each GPU joined to four others by one or two NVLinks, six in all; 4 Mellanox NICs a machine,",
        '"4 x 100Gb InfiniBand"), PyTorch 1.4, CUDA 10.0, NCCL, one process per GPU. Scenarios:',
        "`scenarios/ddp/`: AR-SGD with `workload.bucket_bytes` (DDP's buckets, cut from ResNet-50's layers",
        "in backward order, each all-reduced once the backward pass has made it, one after another on one",
        "stream) and `network.allreduce: nccl` (each bucket gets the algorithm and protocol NCCL's tuning",
        "model picks for its size, and that model's time: `docs/network.md`).",
        "",
        "Not fitted: the step's 0.097 s (the table's 1-GPU entry, without DDP); DDP's own cost a step, 3 ms",
        "(`host_overhead_s`: the later run's 1-GPU entries, 0.100 s with DDP and 0.097 s without); the",
        "node's bus bandwidth, 6 NVLinks x 25 GB/s = 150 GB/s (2 GPUs: GPUs 0 and 1, one NVLink, 25 GB/s;",
        "4 GPUs: 4 NVLinks each, 100 GB/s); the machine's NICs, 4 x 12.5 GB/s = 50 GB/s; NCCL's latencies",
        "and protocol factors, from its source. Fitted on the 64-GPU entry and the 16-GPU 1 MB entry only",
        "(two constants, two entries):",
        "",
        "| constant | fitted | physical reading |",
        "|---|---|---|",
    ]
    for path, value in result.values.items():
        lines.append(f"| `{path}` | {value:.4g} | {READINGS[path]} |")
    lines += [
        "",
        f"The spread is {sigma:.1%} of a step ({sigma * ONE_GPU_S * 1e3:.1f} ms); the bucket cost "
        f"{overhead * 1e6:.0f} µs.",
        "",
        "What NCCL's model picks for a bucket, and its time (ResNet-50's 25 MB buckets hold 17-30 MB):",
        "",
        "| GPUs | 25 MiB | 1 MiB |",
        "|---|---|---|",
        *[f"| {n} | {picks(n)} |" for n in (2, 4, 8, 16, 64)],
        "",
        "Median seconds per iteration with 25 MB buckets; the check is on the overhead over one GPU,",
        "`t_n - t_1`, within 25 % or 2 ms, whichever is larger:",
        "",
        "| GPUs | measured s | fred s | measured t_n - t_1 | fred t_n - t_1 | error | within | row |",
        "|---|---|---|---|---|---|---|---|",
    ]
    misses = []
    for n, median_s in MEDIAN_S.items():
        row, predicted = by_label[f"resnet50_{n}.yaml"]
        measured_ms, fred_ms = _over_ms(median_s), _over_ms(predicted)
        ok = _within(measured_ms, fred_ms)
        if row.held_out and not ok:
            misses.append(f"{n} GPUs")
        lines.append(
            f"| {n} | {median_s:.3f} | {predicted:.4f} | {measured_ms:.0f} ms | {fred_ms:.1f} ms | "
            f"{fred_ms - measured_ms:+.1f} ms | {'yes' if ok else 'no'} | "
            f"{'fitted' if not row.held_out else 'predicted'} |"
        )
    lines += [
        "",
        "Throughput lost with 1 MB buckets (the README's p75 comparison; fred's from its mean times), held "
        "to",
        f"3 points at {', '.join(str(n) for n in JUDGED_LOSS)} GPUs:",
        "",
        "| GPUs | measured loss | fred loss | difference | row |",
        "|---|---|---|---|---|",
    ]
    for n, loss in LOSS_1MB.items():
        row, t1 = by_label[f"resnet50_{n}_1mb.yaml"]
        t25 = by_label[f"resnet50_{n}.yaml"][1]
        ours = _loss(t25, t1)
        points = (ours - loss) * 100
        if n in JUDGED_LOSS and abs(points) > 3 and row.held_out:
            misses.append(f"the 1 MB loss at {n} GPUs")
        lines.append(
            f"| {n} | {loss:.1%} | {ours:.1%} | {points:+.1f} points | "
            f"{'fitted' if not row.held_out else 'predicted'} |"
        )
    lows = min(LOSS_1MB.values()), max(LOSS_1MB.values())
    lines += [
        "",
        "Every predicted entry is within its tolerance."
        if not misses
        else f"Outside the tolerance: {', '.join(misses)}.",
        f"The measured 1 MB loss grows with n, from {lows[0]:.1%} at 2 GPUs to {lows[1]:.1%} at 48; fred's "
        "is",
        "about the same at every n: a fixed cost per bucket times the 1 MB run's extra buckets. A bucket "
        "that",
        "costs more the more ranks its all-reduce waits for is what the table shows and the model lacks;",
        "fitted at 16 GPUs, the cost overshoots at 2 and falls short at 48-64.",
        "",
        "**What the table needs.** Without the step-time spread (the fitted bucket cost kept), fred's "
        "overhead",
        "is the same few milliseconds at every size: the all-reduces hide behind the backward pass but the "
        "last",
        "bucket's, and NCCL's time for 102 MB is at most a few ms here. The growth from 7 ms at 2 GPUs to",
        "16-18 ms at 40-64 comes from waiting for the slowest of n. Interference between NCCL's kernels and "
        "the",
        "backward pass (`cluster.compute.collective_share`, built and tested, off here) changes little: the",
        "collectives are in flight a few ms a step.",
        "",
        "| GPUs | measured t_n - t_1 | fred | no spread | with collective_share 0.15 |",
        "|---|---|---|---|---|",
    ]
    for n, median_s in MEDIAN_S.items():
        label = f"resnet50_{n}.yaml"
        lines.append(
            f"| {n} | {_over_ms(median_s):.0f} ms | {_over_ms(by_label[label][1]):.1f} ms | "
            f"{_over_ms(p.no_spread[label]):.1f} ms | {_over_ms(p.with_share[label]):.1f} ms |"
        )
    lines += [
        "",
        "**Held back: a later run of the same benchmark** (the README's example output at a later commit: "
        "the",
        "same machines, ResNet-50 and ResNet-101, 2-16 GPUs), predicted with the constants above; its 1-GPU",
        "entries set each model's step and DDP cost (ResNet-101: 0.162 s, and 9 ms more with DDP).",
        "",
        "| model | GPUs | measured t_n - t_1 | fred | within | 1 MB: measured p75 | fred | error |",
        "|---|---|---|---|---|---|---|---|",
    ]
    later_misses = 0
    for model, run in LATER.items():
        for n, median_s in run["median_s"].items():
            measured_ms = _over_ms(median_s, run["one_gpu_s"])
            fred_ms = _over_ms(p.later[f"{model}_{n}.yaml"], run["one_gpu_s"])
            ok = _within(measured_ms, fred_ms)
            later_misses += not ok
            p75, ours = run["p75_1mb_s"][n], p.later[f"{model}_{n}_1mb.yaml"]
            lines.append(
                f"| {model} | {n} | {measured_ms:.0f} ms | {fred_ms:.1f} ms | {'yes' if ok else 'no'} | "
                f"{p75:.3f} s | {ours:.4f} s | {(ours - p75) / p75:+.1%} |"
            )
    lines += [
        "",
        f"{later_misses} of 8 held-back overheads {'misses' if later_misses == 1 else 'miss'} the tolerance."
        if later_misses
        else "Every held-back overhead is within the tolerance.",
        "The later run's overhead hardly grows with n (ResNet-50: 6 ms at 2 GPUs, 7 ms at 16), where the "
        "first",
        "run's grows by 5 ms over the same GPUs: the step-time spread fitted on the first run is that run's,",
        "not the machines'. Its 1-GPU entries show none (p50 = p95 = 0.097 s), so the spread belongs to the",
        "multi-GPU runs: the processes' host threads, NCCL's proxies, the network, something the 1-GPU runs "
        "do",
        "not have. fred has no mechanism that predicts it from the hardware; the table is met with it "
        "fitted.",
        "",
        "**Held back: another table, on other machines.** OneFlow's DLPerf benchmark",
        "(`PyTorch/resnet50v1.5/README.md` in Oneflow-Inc/DLPerf): PyTorch 1.6's DDP, NCCL 2.7.3, ResNet-50 "
        "v1.5",
        "at batch 128 a V100-SXM2-16GB in DGX-1's NVLink mesh, FP32 with DALI, nodes joined by one 100 "
        "Gbit/s",
        "EDR InfiniBand NIC each (12.5 GB/s, a quarter of the first table's). The 1-GPU entry is DDP on one",
        f"process ({dlperf_s(1):.4f} s a step, DDP's cost in it); scenarios: `scenarios/ddp/dlperf/`.",
        "",
        "| GPUs | measured s | fred s | measured t_n - t_1 | fred t_n - t_1 | within |",
        "|---|---|---|---|---|---|",
    ]
    dlperf_misses, dlperf_within = 0, []
    for n in list(DLPERF_IMAGES_PER_S)[1:]:
        measured_ms, fred_s = _over_ms(dlperf_s(n), dlperf_s(1)), p.dlperf[f"resnet50_{n}.yaml"]
        fred_ms = _over_ms(fred_s, dlperf_s(1))
        ok = _within(measured_ms, fred_ms)
        dlperf_misses += not ok
        dlperf_within += [str(n)] if ok else []
        lines.append(
            f"| {n} | {dlperf_s(n):.4f} | {fred_s:.4f} | {measured_ms:.0f} ms | {fred_ms:.1f} ms | "
            f"{'yes' if ok else 'no'} |"
        )
    lines += [
        "",
        f"{dlperf_misses} of 4 {'misses' if dlperf_misses == 1 else 'miss'} the tolerance."
        if dlperf_misses
        else "All 4 are within the tolerance.",
        f"DLPerf's 8 GPUs are faster than its 4 ({_over_ms(dlperf_s(8), dlperf_s(1)):.0f} ms over one GPU "
        "against "
        f"{_over_ms(dlperf_s(4), dlperf_s(1)):.0f} ms), which",
        "no model in which more GPUs wait for more peers gives. Within the tolerance at "
        f"{', '.join(dlperf_within) or 'none of them'} GPUs:",
        "the spread fitted on the DGX-1 table, scaled with the step (a lognormal spread is a share of it),",
        "carries over there.",
        "",
        f"Reproduce: `python scenarios/ddp/validation.py`, or the fit alone: `{command()}`.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(print(section()))
