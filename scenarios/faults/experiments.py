"""Every strategy under every fault kind, one at a time; prints docs/failures-results.md.

    python scenarios/faults/experiments.py          # ~10 minutes on 2 cores

Each strategy runs the cluster of ``base.yaml`` for 6 simulated seconds, once without
faults and once per fault below. The table gives the run's status, its final evaluation
loss, and the extra simulated seconds it needed to first reach the loss its fault-free
run reached at 3 s (``never`` when it did not within the 6 s).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import fred
from fred.scenario import registry
from fred.scenario.loading import ScenarioError, read_yaml

HERE = Path(__file__).resolve().parent
CRASH = {"worker": 3, "at_s": 1.0}
FAULTS: dict[str, dict[str, Any]] = {
    "crash, timeout 0.2 s": {"worker_crash": [CRASH], "sync_timeout_s": 0.2},
    "crash, no timeout": {"worker_crash": [CRASH]},
    "crash, rejoin at 2 s": {"worker_crash": [{**CRASH, "rejoin_at_s": 2.0}], "sync_timeout_s": 0.2},
    "link ÷20 for 2 s": {
        "link_degrade": [{"entity": "worker0", "at_s": 1.0, "duration_s": 2.0, "bandwidth_factor": 0.05}]
    },
    "5% loss, resend 20 ms": {"message_loss": {"probability": 0.05, "retransmit_timeout_s": 0.02}},
    "server crash at 2 s": {
        "server_crash": {"checkpoint_every_s": 0.5, "crashes": [{"at_s": 2.0, "restart_s": 0.5}]}
    },
}
STRATEGIES = [n for n in registry.names() if n != "sgd"] + ["ssgd_ps"]
REFERENCE_S = 3.0


VARIANTS = {
    "ssgd_ps": {"name": "ssgd", "aggregation": "ps"},
    "bfasgd": {"name": "bfasgd", "c_fetch": 0.03},  # the defaults never drop: that would be FASGD
}


def strategy(name: str) -> dict[str, Any]:
    """Each strategy's defaults (B-FASGD with the fetch dropping of scenarios/fasgd/bfasgd_16.yaml)."""
    return VARIANTS.get(name, {"name": name})


def outcome(name: str, faults: dict[str, Any], target: float | None, clean_s: float | None) -> str:
    data = {**read_yaml(HERE / "base.yaml"), "strategy": strategy(name), "faults": faults}
    try:
        r = fred.run(data)
    except ScenarioError:
        return "n/a"
    s = r.summary
    if s["status"] == "failed":
        return f"failed at {s['sim_time_s']:.2f} s"
    hit = r.time_to(target) if target is not None else None
    extra = f"{hit[0] - clean_s:+.2f} s" if hit and clean_s is not None else "never"
    return f"{s['final_eval_loss']:.3f} ({extra})"


def main() -> None:
    lines = [
        "# Failure behaviour: results",
        "",
        "Produced by `python scenarios/faults/experiments.py` (8 workers, 6 simulated seconds, seed 0).",
        "Do not edit by hand; see [failures.md](failures.md) for what each strategy does.",
        "",
        "Each cell: final evaluation loss (extra simulated seconds to reach the loss the fault-free run",
        f"reached at {REFERENCE_S:.0f} s), `failed at t` when the strategy cannot go on, `n/a` when the",
        "fault does not apply to the strategy (no server, or no rejoin modelled).",
        "",
        "| strategy | no fault | " + " | ".join(FAULTS) + " |",
        "|---" * (2 + len(FAULTS)) + "|",
    ]
    for name in STRATEGIES:
        clean = fred.run({**read_yaml(HERE / "base.yaml"), "strategy": strategy(name)})
        metrics = clean.metrics
        target = float(metrics.loc[metrics["sim_time_s"] <= REFERENCE_S, "eval_loss"].iloc[-1])
        hit = clean.time_to(target)
        clean_s = hit[0] if hit else None
        cells = [outcome(name, faults, target, clean_s) for faults in FAULTS.values()]
        lines.append(f"| {name} | {clean.summary['final_eval_loss']:.3f} | " + " | ".join(cells) + " |")
        print(lines[-1], flush=True)
    out = HERE.parents[1] / "docs" / "failures-results.md"
    out.write_text("\n".join(lines + [""]))


if __name__ == "__main__":
    sys.exit(main())
