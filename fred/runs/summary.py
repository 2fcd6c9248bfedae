"""A run's summary: the fields of its ``summary.json``, computed from its tables and how it ended.

Every count comes from the event table, so the summary and the tables always agree; the
wall-clock keys (:data:`WALL_CLOCK_KEYS`) are the only ones two runs of one scenario may differ in.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import jax
import numpy as np
import pandas as pd

from fred._version import __version__
from fred.numerics.data import loss_floor
from fred.numerics.models import Params
from fred.runs.build import Built, numerics_device
from fred.runs.host import cpu_isa
from fred.runs.memory import worker_memory
from fred.runs.records import params_sha256
from fred.scenario import registry
from fred.scenario.schema import Scenario

if TYPE_CHECKING:
    from fred.runs.controller import Controller

TRAFFIC_KINDS = ("send", "push", "fetch", "allreduce", "allgather", "reduce_scatter")


def summarize(
    scenario: Scenario,
    built: Built,
    controller: Controller,
    tables: dict[str, pd.DataFrame],
    params: Params,
    end_s: float,
    wall_s: float,
) -> dict[str, Any]:
    """The summary of a run that ended at ``end_s`` simulated seconds after ``wall_s`` wall
    seconds (earlier processes of a resumed run included), from its ``tables``, its final
    ``params`` (none: out of memory, or timing only) and how its ``controller`` ended it."""
    metrics, events, updates = tables["metrics"], tables["events"], tables["updates"]
    kinds = _EventKinds(events)
    last = (
        metrics.iloc[-1] if len(metrics) else {"eval_loss": math.nan, "eval_accuracy": math.nan}
    )  # none: out of memory at the first
    return {
        "name": scenario.name,
        "status": controller.status,
        "stop_reason": controller.stop_reason,
        "failure": built.sim.failure,
        "strategy": scenario.strategy.name,
        **_provider(scenario.strategy.name),
        "workers": scenario.cluster.workers,
        "seed": scenario.seed,
        "sim_time_s": float(end_s),
        "updates": int(controller.recorder.update_count),
        "gradients": len(updates),
        "final_eval_loss": _num(last["eval_loss"]),
        "final_eval_accuracy": _num(last["eval_accuracy"]),
        **_data_loss_floor(scenario),
        "bytes_sent": kinds.bytes_of(*TRAFFIC_KINDS),
        "param_bytes": int(built.sim.param_bytes),
        **_push_fetch_counters(kinds),
        **_fault_counters(kinds, built.sim.report),
        **(
            {"bytes_between_sites": kinds.bytes_of("wide_area")} if scenario.network.sites is not None else {}
        ),
        **_compute_utilisation(events, [w.name for w in built.sim.workers], end_s),
        **_memory_per_worker(scenario, built.sim.param_bytes),
        "mean_staleness": _num(updates["staleness"].mean()) if len(updates) else None,
        "max_staleness": int(updates["staleness"].max()) if len(updates) else None,
        **built.sim.report,
        "params_sha256": None if scenario.workload.timing_only or not params else params_sha256(params),
        "scenario_sha256": scenario.digest(),
        "wall_time_s": round(wall_s, 3),
        "eval_wall_s": round(controller.eval_wall_s, 3),
        "fred_version": __version__,
        "backend": numerics_device().platform,
        "jax_version": jax.__version__,
        "cpu_isa": cpu_isa(),
    }


# The summary's keys measured in real time: the only ones that differ between two runs of one scenario.
WALL_CLOCK_KEYS = ("wall_time_s", "eval_wall_s")


def _memory_per_worker(scenario: Scenario, param_bytes: float) -> dict[str, dict[str, float]]:
    """``memory_per_worker_bytes``: the model states a worker holds, by ZeRO stage
    (:func:`fred.runs.memory.worker_memory`), for a strategy that can shard them; no key otherwise."""
    if getattr(scenario.strategy, "sharding", None) is None:
        return {}
    return {"memory_per_worker_bytes": worker_memory(scenario, param_bytes)}


def _data_loss_floor(scenario: Scenario) -> dict[str, float]:
    """``data_loss_floor``, the least expected eval loss any model can reach, where the data tells
    it (``synthetic_tokens``: fred.numerics.data.loss_floor) and the loss is the cross-entropy it
    is the floor of; no key otherwise."""
    if getattr(scenario.model, "loss", None) not in (None, "cross_entropy"):
        return {}
    floor = loss_floor(scenario.data, scenario.seed)
    return {} if floor is None else {"data_loss_floor": floor}


def _provider(name: str) -> dict[str, str | None]:
    """The distribution and version that provided the strategy: a plug-in's, or fred's own."""
    distribution, version = registry.provider(registry.get(name), __version__)
    return {"strategy_distribution": distribution, "strategy_version": version}


def _compute_utilisation(events: pd.DataFrame, workers: list[str], end_s: float) -> dict[str, Any]:
    """Each worker's time in its ``compute`` events over the run's simulated time, and their mean:
    how much of the run its devices spent on gradient steps rather than waiting for the network
    or codecs (None for a run of no simulated time)."""
    if not end_s > 0:
        return {"compute_utilisation": None, "compute_utilisation_per_worker": {w: None for w in workers}}
    computing = events[events["kind"].to_numpy() == "compute"]
    busy_s = (computing["end_s"] - computing["start_s"]).groupby(computing["entity"], sort=False).sum()
    per_worker = {w: float(busy_s.get(w, 0.0)) / end_s for w in workers}
    return {
        "compute_utilisation": float(np.mean(list(per_worker.values()))) if workers else None,
        "compute_utilisation_per_worker": per_worker,
    }


def _push_fetch_counters(kinds: _EventKinds) -> dict[str, float | int]:
    """Parameter-server traffic, counted from the event table so the two always agree."""
    counts = kinds.counts
    return {
        "pushes_sent": counts.get("push", 0),
        "pushes_dropped": counts.get("push_dropped", 0),
        "fetches_sent": counts.get("fetch", 0),
        "fetches_dropped": counts.get("fetch_dropped", 0),
        "bytes_pushed": kinds.bytes_of("push"),
        "bytes_fetched": kinds.bytes_of("fetch"),
    }


def _fault_counters(kinds: _EventKinds, report: dict[str, Any]) -> dict[str, float | int]:
    """What the injected faults did, counted from the event table (and the server's lost updates)."""
    counts = kinds.counts
    return {
        "worker_crashes": counts.get("crash", 0),
        "workers_excluded": counts.get("excluded", 0),
        "worker_rejoins": counts.get("rejoin", 0),
        "messages_lost": counts.get("lost", 0),
        "bytes_lost": kinds.bytes_of("lost"),
        "links_degraded": counts.get("link_degraded", 0),
        "server_crashes": counts.get("server_crash", 0),
        "updates_lost": int(report.get("updates_lost", 0)),
    }


class _EventKinds:
    """The event table's kinds, factorized once: counts per kind, and bytes summed over kinds.

    On the codes, each selection is a numpy operation rather than a pandas one (a boolean
    index, ``isin``, ``value_counts``: a short run's summary is mostly these). The bytes are
    summed by numpy over the selected rows in table order, the order of pandas' ``sum``
    without bottleneck (whose sum takes another): the same float, whatever is installed.
    """

    def __init__(self, events: pd.DataFrame):
        codes, names = pd.factorize(events["kind"])
        self._codes, self._bytes = codes, events["bytes"].to_numpy()
        self._code = {str(name): i for i, name in enumerate(names)}
        self.counts = {name: int(n) for name, n in zip(self._code, np.bincount(codes, minlength=len(names)))}

    def bytes_of(self, *kinds: str) -> float:
        """Bytes of the events of ``kinds`` (the sum of none is 0.0: no selection to make)."""
        codes = [self._code[k] for k in kinds if k in self._code]
        if not codes:
            return 0.0
        return float(
            np.nansum(self._bytes[np.isin(self._codes, codes)])
        )  # NaN skipped, as pandas' sum skips it


def _num(value: Any) -> float | None:
    """``value`` as a float, or None where it is not finite (JSON has no NaN)."""
    value = float(value)
    return value if math.isfinite(value) else None
