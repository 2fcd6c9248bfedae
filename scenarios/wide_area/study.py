"""Which algorithm trains fastest across sites? Writes docs/wide-area.md and its figure.

    python scenarios/wide_area/study.py            # the study (about an hour on 2 cores; runs are kept in
    runs/)
    python scenarios/wide_area/study.py --quick    # a smoke test of the whole pipeline (a minute)

Two and four sites of 8 workers (scenarios/wide_area/sites.yaml: 1 Gbit/s and 30 ms between
sites), a small transformer on a synthetic language of known loss floor. Each method's learning
rate is tuned on seed 0 with two sites (the lowest final held-out loss of a small grid); the
tuned rate is then run on seeds 1-3, with two and with four sites, and reported as mean ± sd.
Runs are content-addressed in runs/wide_area (``fred sweep``'s cache): a rerun computes only
what is missing.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import NamedTuple

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
DOC, FIGURE = ROOT / "docs" / "wide-area.md", ROOT / "docs" / "img" / "wide-area.png"
RUNS = ROOT / "runs" / "wide_area"
TUNE_SEED, SEEDS = 0, (1, 2, 3)
SITES = {2: [1, 1], 4: [1, 1, 1, 1]}  # sites -> nodes a site (one node of 8 workers)
SGD_RATES, ADAM_RATES = (0.2, 0.5, 1.0), (0.001, 0.003, 0.01)
TARGET_ABOVE = 0.25  # "reached": a held-out loss within this many nats of the run's floor
COMPARABLE = 0.05  # nats: a gap in final held-out loss this small counts as comparable


class Method(NamedTuple):
    label: str
    file: str
    rates: tuple[float, ...]
    inner_steps: int = 1  # gradient steps of a worker per update (DiLoCo: H)


METHODS = [
    Method("AR-SGD, flat ring", "arsgd.yaml", SGD_RATES),
    Method("AR-SGD, hierarchical", "arsgd_hierarchical.yaml", SGD_RATES),
    Method("PowerSGD (rank 4)", "powersgd.yaml", SGD_RATES),
    Method("top-k (1 %)", "topk.yaml", SGD_RATES),
    Method("SGP", "sgp.yaml", SGD_RATES),
    Method("Local SGD (50)", "local_sgd.yaml", SGD_RATES),
    Method("DiLoCo, H = 50", "diloco_h50.yaml", ADAM_RATES, 50),
    Method("DiLoCo, H = 500", "diloco_h500.yaml", ADAM_RATES, 500),
]


def _sweep(method: Method, grid: dict, sets: list[str], jobs: int, say) -> list:
    from fred.runs.api import load_run
    from fred.tools.sweep import sweep

    table, _ = sweep(HERE / method.file, grid, RUNS, jobs=jobs, sets=sets, progress=say)
    return [load_run(path) for path in table["run_dir"]]


def _sets(sites: int, quick: bool) -> list[str]:
    sets = [f"network.sites.nodes={SITES[sites]}", f"cluster.workers={8 * sites}"]
    return sets + (["stop.max_sim_time_s=6", "eval.every_s=2"] if quick else [])


def _above_floor(run) -> float:
    """A run's final held-out loss above its own language's floor."""
    return run.summary["final_eval_loss"] - run.summary["data_loss_floor"]


def tune(method: Method, jobs: int, quick: bool, say) -> float:
    """The rate of the lowest final held-out loss on the tuning seed, two sites (ties: the smaller)."""
    rates = method.rates[:1] if quick else method.rates
    runs = _sweep(method, {"strategy.lr": list(rates), "seed": [TUNE_SEED]}, _sets(2, quick), jobs, say)
    losses = [r.summary["final_eval_loss"] for r in runs]
    return rates[int(np.nanargmin(np.array(losses, dtype=float)))]


def curves(runs: list) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Mean held-out loss above each run's floor over the runs on a common time grid, and the
    gigabytes between sites each had sent by then (from their ``wide_area`` events)."""
    end_s = min(r.summary["sim_time_s"] for r in runs)
    grid = np.linspace(0.0, end_s, 101)
    losses, sent = [], []
    for r in runs:
        m = r.metrics
        losses.append(np.interp(grid, m["sim_time_s"], m["eval_loss"] - r.summary["data_loss_floor"]))
        wan = r.events[r.events["kind"] == "wide_area"]
        times, cumulative = wan["start_s"].to_numpy(), np.cumsum(wan["bytes"].to_numpy())
        sent.append(np.interp(grid, times, cumulative, left=0.0) / 1e9 if len(times) else np.zeros_like(grid))
    return grid, np.mean(losses, axis=0), np.std(losses, axis=0), np.mean(sent, axis=0)


class Row(NamedTuple):
    method: Method
    sites: int
    rate: float
    final: list[float]
    gigabytes: list[float]
    updates: list[int]
    reach_s: list[float]


class Matched(NamedTuple):
    """DiLoCo against synchronous training on as many steps (the same compute): the paper's claim."""

    inner_steps: int
    diloco: Row
    synchronous: list  # hierarchical AR-SGD's runs stopped after inner_steps updates
    along: list[
        tuple[int, float, float]
    ]  # (steps, DiLoCo's loss above the floor, synchronous's), at outer steps


def compute_matched(rows: list[Row], jobs: int, quick: bool, say) -> list[Matched]:
    """For each H, hierarchical AR-SGD (every step synchronous, at its tuned rate) run for as many
    steps as DiLoCo's workers took in the study at two sites, however long that takes."""
    by = {(r.method.label, r.sites): r for r in rows}
    sync = by[("AR-SGD, hierarchical", 2)]
    matched = []
    for h in (50, 500):
        diloco = by[(f"DiLoCo, H = {h}", 2)]
        steps = max(int(round(np.mean(diloco.updates))) * h, 1)
        sets = _sets(2, False) + [
            f"stop.max_updates={steps}",
            "stop.max_sim_time_s=1.0e9",
            "eval.every_s=null",
            f"eval.every_updates={min(h, 50)}",
        ]
        seeds = SEEDS[:1] if quick else SEEDS
        runs = _sweep(sync.method, {"strategy.lr": [sync.rate], "seed": list(seeds)}, sets, jobs, say)
        dilocos = _sweep(
            diloco.method, {"strategy.lr": [diloco.rate], "seed": list(seeds)}, _sets(2, quick), jobs, say
        )
        matched.append(Matched(steps, diloco, runs, _along(dilocos, runs, h)))
    return matched


def _along(dilocos: list, synchronous: list, h: int) -> list[tuple[int, float, float]]:
    """At each of DiLoCo's outer steps (k H inner steps), its held-out loss above the floor and
    synchronous training's after as many steps, means over the seeds."""
    points = []
    for k in range(1, min(int(d.summary["updates"]) for d in dilocos) + 1):
        ours, theirs = [], []
        for d, s in zip(dilocos, synchronous):
            floor = d.summary["data_loss_floor"]
            after = d.metrics[d.metrics["updates"] >= k]  # the first evaluation after outer step k
            ours.append(float(after["eval_loss"].iloc[0]) - floor if len(after) else math.nan)
            exact = s.metrics[s.metrics["updates"] == k * h]
            theirs.append(float(exact["eval_loss"].iloc[0]) - floor if len(exact) else math.nan)
        points.append((k * h, float(np.nanmean(ours)), float(np.nanmean(theirs))))
    return points


def powersgd_share(rank: int = 4) -> float:
    """The share of this model's gradient bytes PowerSGD sends at ``rank`` (its P, Q and vectors)."""
    import fred
    from fred.numerics.codecs import powersgd_bytes

    sizes = powersgd_bytes(rank, fred.run(HERE / "powersgd.yaml", stop={"max_updates": 1}).params)
    return (sizes.p + sizes.q + sizes.vectors) / (
        sizes.matrices + sizes.vectors
    )  # the vectors go as they are


def run_study(jobs: int, quick: bool, say) -> tuple[list[Row], dict, list[float]]:
    rows, drawn = [], {}
    floors: list[float] = []
    for method in METHODS:
        rate = tune(method, jobs, quick, say)
        for sites in SITES:
            seeds = SEEDS[:1] if quick else SEEDS
            runs = _sweep(
                method, {"strategy.lr": [rate], "seed": list(seeds)}, _sets(sites, quick), jobs, say
            )
            own = [r.summary["data_loss_floor"] for r in runs]
            reach = [hit[0] if (hit := r.time_to(f + TARGET_ABOVE)) else math.nan for r, f in zip(runs, own)]
            rows.append(
                Row(
                    method,
                    sites,
                    rate,
                    [_above_floor(r) for r in runs],
                    [r.summary["bytes_between_sites"] / 1e9 for r in runs],
                    [r.summary["updates"] for r in runs],
                    reach,
                )
            )
            drawn[(method.label, sites)] = curves(runs)
            floors += own
    return rows, drawn, sorted(set(floors))


def figure(drawn: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 8), sharey=True)
    colours = plt.get_cmap("tab10")
    for row, sites in enumerate(SITES):
        for k, method in enumerate(METHODS):
            grid, mean, sd, sent = drawn[(method.label, sites)]
            style = {"color": colours(k), "label": method.label, "lw": 1.6}
            axes[row, 0].plot(grid, mean, **style)
            axes[row, 0].fill_between(
                grid, np.maximum(mean - sd, 1e-3), mean + sd, color=colours(k), alpha=0.15, lw=0
            )
            axes[row, 1].plot(np.maximum(sent, 0.3), mean, **style)
        for ax in axes[row]:
            ax.set_yscale("log")
            ax.grid(alpha=0.3, which="both")
        axes[row, 0].set_ylabel(f"{sites} sites of 8 workers\nheld-out loss above the floor (nats a token)")
        axes[row, 1].set_xscale("log")
        axes[row, 1].set_xlim(left=0.3)
    axes[1, 0].set_xlabel("simulated seconds")
    axes[1, 1].set_xlabel("gigabytes sent between sites (log)")
    axes[0, 0].set_title("loss against simulated time (mean ± sd of 3 seeds)")
    axes[0, 1].set_title("loss against bytes between sites")
    axes[0, 1].legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _mean_sd(values: list[float], digits: int = 3) -> str:
    data = np.array(values, dtype=float)
    if np.isnan(data).all():
        return "not reached"
    missed = int(np.isnan(data).sum())
    data = data[~np.isnan(data)]
    text = (
        f"{data.mean():.{digits}f} ± {data.std():.{digits}f}"
        if len(data) > 1
        else f"{data.mean():.{digits}f}"
    )
    return text + (f" ({missed} of {len(values)} not reached)" if missed else "")


def page(rows: list[Row], floors: list[float], quick: bool, matched: list[Matched], share: float) -> str:
    lines = [
        "# Training across sites: which algorithm is fastest?",
        "",
        "Produced by `python scenarios/wide_area/study.py`; do not edit by hand.",
        "",
        "Two and four sites of 8 workers (one node of 8 GPUs a site, NVLink inside), joined by wide-area",
        "links of 1 Gbit/s with 30 ms between sites, shared TCP-like (`sharing: rtt`). The numbers are a",
        "one-layer GPT-style decoder's (width 32) learning a synthetic language: a random sparse Markov "
        "chain",
        "over 64 tokens, drawn anew by each seed, whose loss floor, the best any model can do, is known "
        "exactly",
        f"({min(floors):.3f} to {max(floors):.3f} nats a token over the seeds). Losses are reported above "
        "each run's",
        "own floor. The clock is as if each worker trained a 100M-parameter model: 400 MB of float32 "
        "gradient,",
        "0.1 s a step, 300 simulated seconds a run. Scenarios: `scenarios/wide_area/`.",
        "",
        "Each method's learning rate was tuned on seed 0 with two sites (the lowest final held-out loss of",
        f"{', '.join(str(r) for r in SGD_RATES)} for SGD, {', '.join(str(r) for r in ADAM_RATES)} for "
        "DiLoCo's inner",
        "AdamW); the table reports seeds 1-3 at that rate, mean ± sd.",
        "",
        "![Loss against simulated time and against bytes between sites](img/wide-area.png)",
        "",
        "| method | sites | rate | final held-out loss above the floor | updates | GB between sites | "
        f"seconds to floor + {TARGET_ABOVE} |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row.method.label} | {row.sites} | {row.rate:g} | {_mean_sd(row.final)} | "
            f"{np.mean(row.updates):.0f} | {_mean_sd(row.gigabytes, 1)} | {_mean_sd(row.reach_s, 1)} |"
        )
    lines += [
        "",
        "**DiLoCo's claim, on the same compute.** DiLoCo's paper finds its loss comparable to fully",
        "synchronous training over the same number of steps, with H times less communication. Hierarchical",
        "AR-SGD (every step synchronous, its tuned rate) run for as many steps as DiLoCo's workers took in",
        "300 s at two sites, however long that takes on these links:",
        "",
        "| H | steps a worker | DiLoCo, above the floor | synchronous, above the floor | DiLoCo GB between "
        "sites | "
        "synchronous GB | "
        "synchronous simulated s |",
        "|---|---|---|---|---|---|---|",
    ]
    for m in matched:
        sync_loss = [_above_floor(r) for r in m.synchronous]
        sync_gb = [r.summary["bytes_between_sites"] / 1e9 for r in m.synchronous]
        sync_s = [r.summary["sim_time_s"] for r in m.synchronous]
        lines.append(
            f"| {m.diloco.method.inner_steps} | {m.inner_steps} | {_mean_sd(m.diloco.final)} | "
            f"{_mean_sd(sync_loss)} | {_mean_sd(m.diloco.gigabytes, 1)} | {_mean_sd(sync_gb, 1)} | "
            f"{np.mean(sync_s):,.0f} |"
        )
    lines += [
        "",
        "Along the way, at each of DiLoCo's outer steps (held-out loss above the floor, means over the "
        "seeds):",
        "",
        "| H | steps a worker | DiLoCo | synchronous |",
        "|---|---|---|---|",
    ]
    for m in matched:
        lines += [
            f"| {m.diloco.method.inner_steps} | {steps} | {ours:.3f} | {theirs:.3f} |"
            for steps, ours, theirs in m.along[:: max(len(m.along) // 6, 1)]
        ]
    return "\n".join(lines + [""] + discussion(rows, quick, matched, share))


def discussion(rows: list[Row], quick: bool, matched: list[Matched], share: float) -> list[str]:
    """What the tables show, computed from them."""
    by = {(r.method.label, r.sites): r for r in rows}
    lines = ["## What it shows", ""]
    for sites in SITES:
        ranked = sorted(
            (np.nanmean(np.array(r.final, dtype=float)), r.method.label) for r in rows if r.sites == sites
        )
        lines.append(
            f"- **{sites} sites**: lowest final loss above the floor {ranked[0][1]} ({ranked[0][0]:.3f}), "
            "then "
            f"{ranked[1][1]} ({ranked[1][0]:.3f}); highest {ranked[-1][1]} ({ranked[-1][0]:.3f})."
        )
    flat, hier = by[("AR-SGD, flat ring", 2)], by[("AR-SGD, hierarchical", 2)]
    lines.append(
        f"- **The wide-area links set the pace of every synchronous method**: the flat ring makes "
        f"{np.mean(flat.updates):.0f} updates in 300 s at two sites, the hierarchical one "
        f"{np.mean(hier.updates):.0f} (it crosses the sites once each way, where the flat ring "
        "crosses at every hop between them)."
    )
    for h in (50, 500):
        d = by[(f"DiLoCo, H = {h}", 2)]
        lines.append(
            f"- **DiLoCo, H = {h}** at two sites: {np.mean(d.updates):.0f} outer steps "
            f"({np.mean(d.updates) * h:.0f} inner steps a worker), final loss {_mean_sd(d.final)} above the "
            "floor, "
            f"{_mean_sd(d.gigabytes, 1)} GB between sites against the flat ring's "
            f"{_mean_sd(flat.gigabytes, 1)} GB."
        )
    for m in matched:
        gap = np.nanmean(np.array(m.diloco.final, dtype=float)) - np.nanmean(
            np.array([_above_floor(r) for r in m.synchronous], dtype=float)
        )
        verdict = "comparable" if abs(gap) <= COMPARABLE else ("worse" if gap > 0 else "better")
        early = [(steps, ours - theirs) for steps, ours, theirs in m.along if ours - theirs > COMPARABLE]
        synchronous_gb = np.mean([r.summary["bytes_between_sites"] for r in m.synchronous]) / 1e9
        lines.append(
            f"- **On the same {m.inner_steps} steps**, DiLoCo with H = {m.diloco.method.inner_steps} ends "
            f"{gap:+.3f} nats from synchronous training ({verdict}; within {COMPARABLE} counts as comparable)"
            + (
                f", sending {synchronous_gb / np.mean(m.diloco.gigabytes):.0f}x fewer bytes between sites"
                if np.mean(m.diloco.gigabytes) > 0
                else ""
            )
            + (
                f"; it is behind by more than {COMPARABLE} up to {early[-1][0]} steps "
                f"({early[0][1]:+.3f} nats after {early[0][0]})."
                if early
                else "; it is within that at every outer step before, too."
            )
        )
    edge = sorted({r.method.label for r in rows if r.rate in (min(r.method.rates), max(r.method.rates))})
    if edge:
        lines.append(
            f"- **Tuned at the edge of its grid**: {', '.join(edge)}; a rate beyond the grid may do better."
        )
    lines.append(
        f"- **PowerSGD's rank 4 sends {share:.0%} of this model's gradient**: its matrices are 32 to 128 "
        "wide, so rank 4 is a mild compression here; a 100M-parameter model's 768-wide matrices would "
        "send about 1 %, so PowerSGD's clock in this study is pessimistic. Top-k's 1 % is a share of "
        "every tensor whatever its shape."
    )
    if quick:
        lines += ["", "(A quick run: one rate, one seed, 6 simulated seconds; not the study.)"]
    return lines + [""]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="a smoke test: one rate, one seed, 6 simulated seconds"
    )
    parser.add_argument("--jobs", type=int, default=2, help="runs at once (default 2)")
    args = parser.parse_args()
    say = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    rows, drawn, floors = run_study(args.jobs, args.quick, say)
    matched = compute_matched(rows, args.jobs, args.quick, say)
    figure(drawn, FIGURE if not args.quick else RUNS / "wide-area-quick.png")
    text = page(rows, floors, args.quick, matched, powersgd_share())
    (DOC if not args.quick else RUNS / "wide-area-quick.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
