"""The grouped-hybrid paper's claims (seed 002) checked on fred: SSGD, ASGD and the hybrid, each tuned.

    python scenarios/hybrid/validation.py           # prints the section of docs/validation.md
    python scenarios/hybrid/validation.py --rerun   # recomputes every run instead of reading the cache

The paper ran 9 workers, 2 of them slowed by a 0.2 s sleep per iteration, and claims that
the hybrid (synchronous in groups of like-speed workers, asynchronous between groups)
converges faster than SSGD and ends more accurate than ASGD, not worse than SSGD. Here the
setting of ``scenarios/hybrid/`` (digits, an MLP) runs for ``FULL.horizon_s`` simulated
seconds. Each method's learning rate is picked from ``FULL.lrs`` by its final held-out loss
on ``TUNING_SEED``, a seed the comparison does not use; the comparison runs ``FULL.seeds``
and is repeated at the paper's common learning rate. The hybrid runs with both group updates
(``mean`` and ``sum``), as the paper does not say which it used.

A second part runs the SGP paper's gossip baselines, D-PSGD and AD-PSGD, in both orders
(``order: average_then_step``, Lian et al.'s, and ``step_then_average``) next to SGP on 8
nodes, each tuned the same way.

Raw results are kept in ``validation_runs.json`` keyed by the digest of each resolved
scenario (every field, defaults included), so a run whose scenario changed is never read
from it; a change of fred's code that moves results needs ``--rerun``.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from statistics import mean, stdev
from typing import Any, NamedTuple

import fred
from fred.runs.api import resolve

HERE = Path(__file__).resolve().parent
CACHE = HERE / "validation_runs.json"
# The exact reduction's leaves are single examples (exact_tile: 1), as when these runs were recorded:
# tiles of 8 rows sum the same gradients by another tree (other last bits, the same algorithms).
PER_EXAMPLE = 1
GOSSIP: dict[str, Any] = {  # 8 gossiping nodes on the same digits MLP, no slowed worker
    "name": "gossip-order",
    "model": {"kind": "mlp", "hidden": [64], "activation": "relu"},
    "data": {"source": {"kind": "digits"}, "batch_size": 32, "sharding": "iid"},
    "cluster": {
        "workers": 8,
        "compute": {"step_time_s": 0.01},
        "jitter": {"kind": "lognormal", "sigma": 0.05},
    },
    "network": {"latency_s": 5.0e-5, "bandwidth_bps": 1.25e9},
}
METHODS: dict[str, tuple[str | dict[str, Any], dict[str, Any]]] = {  # name: (scenario file or data, strategy)
    "ssgd": ("ssgd.yaml", {}),
    "asgd": ("asgd.yaml", {}),
    "hybrid_mean": ("grouped_hybrid.yaml", {"group_update": "mean"}),
    "hybrid_sum": ("grouped_hybrid.yaml", {"group_update": "sum"}),
    "sgp": (GOSSIP, {"name": "sgp"}),
    "dpsgd_average": (GOSSIP, {"name": "dpsgd", "order": "average_then_step"}),
    "dpsgd_step": (GOSSIP, {"name": "dpsgd", "order": "step_then_average"}),
    "adpsgd_average": (GOSSIP, {"name": "adpsgd", "order": "average_then_step"}),
    "adpsgd_step": (GOSSIP, {"name": "adpsgd", "order": "step_then_average"}),
}
LABELS = {
    "ssgd": "SSGD",
    "asgd": "ASGD",
    "hybrid_mean": "hybrid, mean",
    "hybrid_sum": "hybrid, sum",
    "sgp": "SGP",
    "dpsgd_average": "D-PSGD, average then step",
    "dpsgd_step": "D-PSGD, step then average",
    "adpsgd_average": "AD-PSGD, average then step",
    "adpsgd_step": "AD-PSGD, step then average",
}
HYBRID_PART = ["ssgd", "asgd", "hybrid_mean", "hybrid_sum"]
GOSSIP_PART = ["sgp", "dpsgd_average", "dpsgd_step", "adpsgd_average", "adpsgd_step"]
HYBRIDS = ["hybrid_mean", "hybrid_sum"]
PAPER_LR = 0.01
TUNING_SEED = 100


class Setting(NamedTuple):
    lrs: tuple[float, ...]
    seeds: tuple[int, ...]
    horizon_s: float
    eval_every_s: float
    target_loss: float


FULL = Setting(
    lrs=(0.01, 0.03, 0.1, 0.3, 1.0, 3.0), seeds=(0, 1, 2), horizon_s=60.0, eval_every_s=1.0, target_loss=0.5
)
QUICK = Setting(lrs=(0.03, 0.3), seeds=(0, 1, 2), horizon_s=2.0, eval_every_s=1.0, target_loss=2.2)
GOSSIP_FULL = Setting(
    lrs=(0.1, 0.3, 1.0, 3.0), seeds=(0, 1, 2), horizon_s=3.0, eval_every_s=0.05, target_loss=0.2
)
GOSSIP_QUICK = Setting(lrs=(0.3,), seeds=(0, 1, 2), horizon_s=0.1, eval_every_s=0.05, target_loss=2.2)


# ----------------------------------------------------------------------------- runs
class Runs:
    """Runs by resolved scenario, from the cache file when allowed; ``save`` keeps the ones used."""

    def __init__(self, use_cache: bool, keep: bool) -> None:
        self.keep = keep
        self.cached: dict[str, Any] = {}
        if use_cache and CACHE.exists():
            self.cached = json.loads(CACHE.read_text())["runs"]
        self.used: dict[str, Any] = {}
        self.computed = 0

    def get(self, method: str, lr: float, seed: int, setting: Setting) -> dict[str, Any]:
        base, strategy = METHODS[method]
        scenario = resolve(
            HERE / base if isinstance(base, str) else base,
            seed=seed,
            strategy={"lr": lr, "exact_tile": PER_EXAMPLE, **strategy},
            stop={"max_sim_time_s": setting.horizon_s},
            eval={"every_s": setting.eval_every_s},
        )
        key = scenario.digest()
        if key not in self.used:
            self.used[key] = self.cached.get(key) or self._run(scenario, f"{method} lr={lr} seed={seed}")
        return self.used[key]

    def _run(self, scenario: Any, label: str) -> dict[str, Any]:
        self.computed += 1
        result = fred.run(scenario)
        s = result.summary

        def number(x: float) -> float | None:
            return None if x is None or not math.isfinite(x) else float(x)

        return {
            "label": label,
            "final_eval_loss": number(s["final_eval_loss"]),
            "final_eval_accuracy": number(s["final_eval_accuracy"]),
            "updates": s["updates"],
            "mean_staleness": number(s["mean_staleness"]),
            "groups": s.get("groups"),
            "curve": [
                [round(float(t), 6), None if number(loss) is None else round(float(loss), 6)]
                for t, loss in zip(result.metrics["sim_time_s"], result.metrics["eval_loss"])
            ],
        }

    def save(self) -> None:
        if self.keep:
            CACHE.write_text(
                json.dumps({"runs": dict(sorted(self.used.items()))}, indent=1, sort_keys=True) + "\n"
            )


def time_to(run: dict[str, Any], loss: float) -> float:
    """Simulated seconds to the first evaluation at or below ``loss``; inf if never."""
    return next((t for t, value in run["curve"] if value is not None and value <= loss), math.inf)


def loss_or_inf(run: dict[str, Any]) -> float:
    return math.inf if run["final_eval_loss"] is None else run["final_eval_loss"]


def tune(runs: Runs, method: str, setting: Setting) -> tuple[float, dict[float, float]]:
    """The grid's learning rate of least final held-out loss on the tuning seed (the smaller on a tie)."""
    if len(setting.lrs) == 1:  # nothing to choose: not run
        return setting.lrs[0], {setting.lrs[0]: math.nan}
    scores = {lr: loss_or_inf(runs.get(method, lr, TUNING_SEED, setting)) for lr in setting.lrs}
    return min(setting.lrs, key=lambda lr: (scores[lr], lr)), scores


# ----------------------------------------------------------------------------- statistics
class Stat:
    """One quantity over the seeds; a run that never got there is inf."""

    def __init__(self, values: list[float]) -> None:
        self.values = values

    @property
    def finite(self) -> list[float]:
        return [v for v in self.values if math.isfinite(v)]

    def mean(self) -> float:
        return mean(self.values) if len(self.finite) == len(self.values) else math.inf

    def sd(self) -> float:
        return stdev(self.values) if len(self.finite) == len(self.values) and len(self.values) > 1 else 0.0

    def show(self, digits: int = 3) -> str:
        if len(self.finite) < len(self.values):
            missed = len(self.values) - len(self.finite)
            return f"not reached in {missed} of {len(self.values)}"
        return f"{self.mean():.{digits}f} ± {self.sd():.{digits}f}"


def compare(a: Stat, b: Stat, lower_is_better: bool) -> int:
    """+1 if a is better than b by more than two standard errors of the difference, -1 if worse, 0 if neither.
    A seed that never reached the target counts as worse than any that did."""
    if not a.finite and not b.finite:
        return 0
    if len(a.finite) < len(a.values) or len(b.finite) < len(b.values):
        missed_a, missed_b = len(a.values) - len(a.finite), len(b.values) - len(b.finite)
        return 0 if missed_a == missed_b else (1 if missed_a < missed_b else -1)
    diff = (b.mean() - a.mean()) if lower_is_better else (a.mean() - b.mean())
    se = math.sqrt(a.sd() ** 2 / len(a.values) + b.sd() ** 2 / len(b.values))
    if abs(diff) <= 2 * se or diff == 0:
        return 0
    return 1 if diff > 0 else -1


# ----------------------------------------------------------------------------- the section
def comparison(runs: Runs, lrs: dict[str, float], setting: Setting) -> dict[str, dict[str, Stat]]:
    out = {}
    for method, lr in lrs.items():
        rows = [runs.get(method, lr, seed, setting) for seed in setting.seeds]
        out[method] = {
            "loss": Stat([loss_or_inf(r) for r in rows]),
            "accuracy": Stat(
                [r["final_eval_accuracy"] if r["final_eval_accuracy"] is not None else 0.0 for r in rows]
            ),
            "time": Stat([time_to(r, setting.target_loss) for r in rows]),
            "updates": Stat([float(r["updates"]) for r in rows]),
            "staleness": Stat([r["mean_staleness"] or 0.0 for r in rows]),
        }
    return out


def table(stats: dict[str, dict[str, Stat]], lrs: dict[str, float], setting: Setting) -> list[str]:
    time_digits = 1 if setting.eval_every_s >= 0.1 else 2
    lines = [
        f"| method | lr | s to loss {setting.target_loss} | final loss | final accuracy | updates | mean "
        "staleness |",
        "|---|---|---|---|---|---|---|",
    ]
    for method, s in stats.items():
        lines.append(
            f"| {LABELS[method]} | {lrs[method]:g} | {s['time'].show(time_digits)} | {s['loss'].show()} | "
            f"{s['accuracy'].show()} | {s['updates'].show(0)} | {s['staleness'].show(2)} |"
        )
    return lines


def versus(a: Stat, b: Stat, other: str, unit: str = "", digits: int = 3) -> str:
    """'(a against other's b: +x.x %)', the signed difference relative to b when both are numbers."""

    def show(stat: Stat) -> str:
        return stat.show(digits) + (unit if math.isfinite(stat.mean()) else "")

    text = f"{show(a)} against {other}'s {show(b)}"
    if math.isfinite(a.mean()) and math.isfinite(b.mean()) and b.mean():
        text += f": {(a.mean() - b.mean()) / b.mean() * 100:+.1f} %"
    return f"({text})"


def verdicts(stats: dict[str, dict[str, Stat]], setting: Setting) -> list[str]:
    lines = []
    for hybrid in HYBRIDS:
        h, ssgd, asgd = stats[hybrid], stats["ssgd"], stats["asgd"]
        # Time to the target loss when every seed of both reached it; else the loss at the horizon.
        reached = all(len(x["time"].finite) == len(x["time"].values) for x in (h, ssgd))
        key = "time" if reached else "loss"
        speed = compare(h[key], ssgd[key], lower_is_better=True)
        acc_asgd = compare(h["accuracy"], asgd["accuracy"], lower_is_better=False)
        acc_ssgd = compare(h["accuracy"], ssgd["accuracy"], lower_is_better=False)
        name = LABELS[hybrid]
        within = "**not reproduced on this problem**: no difference beyond noise"
        evidence = (
            versus(h["time"], ssgd["time"], "SSGD", " s", digits=1)
            if reached
            else f"(final loss {versus(h['loss'], ssgd['loss'], 'SSGD')[1:-1]}; not every seed reached "
            f"loss {setting.target_loss})"
        )
        lines.append(
            f"- {name}, faster than SSGD (to loss {setting.target_loss}): "
            + {1: "**reproduced**", 0: within, -1: "**not reproduced on this problem**: SSGD is faster"}[
                speed
            ]
            + f" {evidence}."
        )
        lines.append(
            f"- {name}, more accurate than ASGD at the end: "
            + {
                1: "**reproduced**",
                0: within,
                -1: "**not reproduced on this problem**: ASGD is more accurate",
            }[acc_asgd]
            + " "
            + versus(h["accuracy"], asgd["accuracy"], "ASGD")
            + "."
        )
        lines.append(
            f"- {name}, not less accurate than SSGD at the end: "
            + (
                "**reproduced**"
                if acc_ssgd >= 0
                else "**not reproduced on this problem**: SSGD is more accurate"
            )
            + " "
            + versus(h["accuracy"], ssgd["accuracy"], "SSGD")
            + "."
        )
    return lines


def tuned_rates(runs: Runs, methods: list[str], setting: Setting) -> tuple[dict[str, float], list[str]]:
    """Each method's tuned learning rate, and the grid's table of final held-out losses on the tuning seed."""
    lines = [
        "| method | " + " | ".join(f"lr {lr:g}" for lr in setting.lrs) + " | picked |",
        "|---|" + "---|" * (len(setting.lrs) + 1),
    ]
    tuned = {}
    for method in methods:
        tuned[method], grid = tune(runs, method, setting)
        cells = [
            (f"**{grid[lr]:.3f}**" if lr == tuned[method] else f"{grid[lr]:.3f}")
            if math.isfinite(grid[lr])
            else "not run"
            if math.isnan(grid[lr])
            else "diverged"
            for lr in setting.lrs
        ]
        edge = (
            " (grid edge)"
            if len(setting.lrs) > 1 and tuned[method] in (setting.lrs[0], setting.lrs[-1])
            else ""
        )
        lines.append(f"| {LABELS[method]} | " + " | ".join(cells) + f" | {tuned[method]:g}{edge} |")
    return tuned, lines


def hybrid_part(runs: Runs, setting: Setting) -> list[str]:
    tuned, grid = tuned_rates(runs, HYBRID_PART, setting)
    losses = {m: tune(runs, m, setting)[1] for m in HYBRID_PART}  # the grid's runs again, from memory
    at_tuned = comparison(runs, tuned, setting)
    paper = {method: PAPER_LR for method in HYBRID_PART}
    at_paper = comparison(runs, paper, setting)
    seeds = ", ".join(str(s) for s in setting.seeds)
    return [
        "## Grouped hybrid: faster than SSGD, more accurate than ASGD (seed 002)",
        "",
        "The paper's claims, with 9 workers of which 2 sleep 0.2 s per iteration (its Fig. 7):",
        "the hybrid (synchronous in groups of 3 like-speed workers, asynchronous between groups)",
        "converges faster than SSGD, ends more accurate than ASGD, and not less accurate than SSGD.",
        "The paper gives curves, not numbers, and trains a CNN on CIFAR-100 with lr 0.01 for every",
        "method. Here: `scenarios/hybrid/` (the bundled digits, an MLP, 0.1 s per step, lognormal",
        f"jitter σ = 0.05), {setting.horizon_s:g} simulated seconds, held-out loss every "
        f"{setting.eval_every_s:g} s.",
        "The paper does not say whether a group pushes the mean or the sum of its members' gradients:",
        "both are run (`group_update: mean | sum`). Nothing is fitted.",
        "",
        f"Learning rates: each method's is the one of least final held-out loss on seed {TUNING_SEED}",
        f"(not used below) from {', '.join(f'{lr:g}' for lr in setting.lrs)}:",
        "",
        *grid,
        "",
        f"Each method at its learning rate, mean ± sd over seeds {seeds}:",
        "",
        *table(at_tuned, tuned, setting),
        "",
        "Verdicts, each method at its tuned learning rate (better means by more than two standard",
        "errors of the difference of the means; speed is the time to the loss when every seed reached",
        "it, the loss at the end otherwise):",
        "",
        *verdicts(at_tuned, setting),
        "",
        f"At the paper's common learning rate {PAPER_LR:g}, seeds {seeds}:",
        "",
        *table(at_paper, paper, setting),
        "",
        *verdicts(at_paper, setting),
        "",
        *reading(runs, setting, at_tuned, at_paper, tuned, losses),
    ]


def gossip_part(runs: Runs, setting: Setting) -> list[str]:
    tuned, grid = tuned_rates(runs, GOSSIP_PART, setting)
    at_tuned = comparison(runs, tuned, setting)
    seeds = ", ".join(str(s) for s in setting.seeds)
    lines = [
        "### D-PSGD and AD-PSGD: average then step, or step then average",
        "",
        "Lian et al.'s D-PSGD is `x <- W x - lr g(x)` and their AD-PSGD averages with a neighbour and",
        "then applies the gradient taken before; the other order (`order: step_then_average`) steps",
        "first and so also mixes the gradients. Not a claim of the seed papers: the SGP paper's",
        "baselines, run both ways next to SGP on 8 nodes of the same digits MLP (batch 32, 0.01 s",
        f"per step, no slowed worker), {setting.horizon_s:g} simulated seconds, each method's learning rate",
        f"tuned on seed {TUNING_SEED} from {', '.join(f'{lr:g}' for lr in setting.lrs)} (updates are node "
        "steps):",
        "",
        *grid,
        "",
        f"Mean ± sd over seeds {seeds}:",
        "",
        *table(at_tuned, tuned, setting),
        "",
    ]
    for name in ("dpsgd", "adpsgd"):
        paper, other = at_tuned[f"{name}_average"], at_tuned[f"{name}_step"]
        label = "D-PSGD" if name == "dpsgd" else "AD-PSGD"
        for key, what, lower in (
            ("time", f"to loss {setting.target_loss}", True),
            ("loss", "final loss", True),
        ):
            word = {
                1: "the papers' order is better",
                0: "no difference beyond noise",
                -1: "the papers' order is worse",
            }[compare(paper[key], other[key], lower_is_better=lower)]
            unit, digits = (" s", 2) if key == "time" else ("", 3)
            lines.append(
                f"- {label}, {what}: {word} "
                + versus(paper[key], other[key], "step then average", unit, digits)
                + "."
            )
    top = setting.lrs[-1]
    losses = {m: tune(runs, m, setting)[1] for m in GOSSIP_PART}  # the grid's runs again, from memory
    lines += [
        "",
        "Why: stepping first sends x - lr g, so every node's step is the mix of its own and its neighbours'",
        "gradients, an average over more examples, while the mean over nodes moves the same in both orders.",
        f"On the tuning seed at lr {top:g} D-PSGD ends at loss {losses['dpsgd_step'][top]:.3f} stepping "
        "first and",
        f"{losses['dpsgd_average'][top]:.3f} in the papers' order, AD-PSGD at "
        f"{losses['adpsgd_step'][top]:.3f} and",
        f"{losses['adpsgd_average'][top]:.3f}.",
    ]
    return lines


def section(quick: bool = False, rerun: bool = False) -> str:
    """The Markdown section of docs/validation.md. ``quick``: short horizons and small grids,
    computed afresh and never cached (a test's check that every number is computed)."""
    runs = Runs(use_cache=not quick and not rerun, keep=not quick)
    lines = (
        hybrid_part(runs, QUICK if quick else FULL)
        + [""]
        + gossip_part(runs, GOSSIP_QUICK if quick else GOSSIP_FULL)
    )
    runs.save()
    lines += [
        "",
        (
            f"Reproduce: `python scenarios/hybrid/validation.py --rerun` ({len(runs.used)} runs; without "
            "`--rerun` "
            "they are read from `scenarios/hybrid/validation_runs.json`, keyed by each resolved scenario). "
            "Every run "
            "sums per-example gradients (`strategy.exact_tile: 1`)."
        ),
        "",
    ]
    return "\n".join(lines)


def reading(
    runs: Runs,
    setting: Setting,
    at_tuned: dict[str, dict[str, Stat]],
    at_paper: dict[str, dict[str, Stat]],
    tuned: dict[str, float],
    grid: dict[str, dict[float, float]],
) -> list[str]:
    """Why, in numbers: what sets the order on this problem."""
    updates = {m: at_tuned[m]["updates"].mean() for m in HYBRID_PART}
    staleness = {m: at_tuned[m]["staleness"].mean() for m in HYBRID_PART}
    fastest = min(HYBRID_PART, key=lambda m: (at_tuned[m]["time"].mean(), m))
    speed = (
        f"Why. Speed: in {setting.horizon_s:g} s SSGD makes {updates['ssgd']:.0f} updates, each waiting for "
        "the "
        f"slowed workers, the hybrid {updates['hybrid_mean']:.0f} and ASGD {updates['asgd']:.0f}. At their "
        "tuned "
        f"rates {LABELS[fastest]} reaches loss {setting.target_loss} first "
        f"({at_tuned[fastest]['time'].show(1)} s); "
        "the paper compares the hybrid's speed with SSGD's only."
    )
    accuracy = (
        f"Accuracy: ASGD's gradients are {staleness['asgd']:.1f} updates old on average, the hybrid's "
        f"{staleness['hybrid_mean']:.1f}."
    )
    lines = [speed, accuracy]
    chance = 0.9 * math.log(10)  # ten classes: ln 10 is a uniform guess's loss

    def trains_up_to(method: str) -> float | None:
        return max((lr for lr in setting.lrs if grid[method][lr] < chance), default=None)

    asgd_max, hybrid_max = trains_up_to("asgd"), trains_up_to("hybrid_sum")
    if asgd_max is not None and hybrid_max is not None and asgd_max < hybrid_max:
        lines[-1] += (
            f" On the tuning seed ASGD ends better than chance (loss below 0.9 ln 10) up to lr {asgd_max:g},"
            f" the hybrid with the sum, whose step per example is ASGD's, up to {hybrid_max:g}: the staler"
            " gradients stand a smaller learning rate."
        )
    same = (
        compare(at_tuned["hybrid_mean"]["accuracy"], at_tuned["asgd"]["accuracy"], lower_is_better=False) == 0
    )
    if same:
        lines[-1] += " At its own best rate, though, ASGD ends as accurate as the hybrid."
    k = 3
    mean_lr, sum_lr = tuned["hybrid_mean"], tuned["hybrid_sum"]
    if math.isclose(mean_lr, k * sum_lr):
        gap = max(
            abs(a - b)
            for a, b in zip(at_tuned["hybrid_mean"]["loss"].values, at_tuned["hybrid_sum"]["loss"].values)
        )
        lines += [
            "",
            f"Mean or sum: a group of {k} summing its gradients at lr {sum_lr:g} takes the steps of the mean "
            "at lr",
            f"{mean_lr:g}, and tuning picked exactly those (final losses within {gap:.1e} of each other, "
            "seed by seed:",
            "rounding), so with tuned learning rates the choice does not matter. At one learning rate it "
            "does:",
        ]
    else:
        lines += [
            "",
            f"Mean or sum: tuned, the mean took lr {mean_lr:g} and the sum {sum_lr:g}. At one learning rate:",
        ]
    lines[-1] += (
        f" at {PAPER_LR:g} the sum ends at loss {at_paper['hybrid_sum']['loss'].show()}, the mean at "
        f"{at_paper['hybrid_mean']['loss'].show()}, ASGD at {at_paper['asgd']['loss'].show()}."
    )
    return ["\n".join(lines)]


def main(argv: list[str]) -> int:
    unknown = [a for a in argv if a != "--rerun"]
    if unknown:
        print(f"unknown argument {unknown[0]!r}; the only option is --rerun", file=sys.stderr)
        return 2
    print(section(rerun="--rerun" in argv))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
