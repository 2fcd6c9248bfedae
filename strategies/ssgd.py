"""SSGD: synchronous data-parallel SGD (the papers' SSGD, PSGD and AR-SGD baselines).

    every worker, each round t:
        g_i <- gradient on its shard of global batch t, at theta_t
        aggregate: g = sum_i g_i / (n * b)      (parameter server, or ring all-reduce)
        theta_{t+1} <- theta_t - lr * g         (the same update on every replica)

Gradient *sums* are aggregated by the global batch's pairwise tree (docs/determinism.md),
so with iid sharding n workers of any batch b give bit for bit the parameters of SGD with
batch n*b. ``aggregation: ps`` runs the parameter-server loop with SASGD's plain average;
``aggregation: allreduce`` (the default) is ``arsgd``'s loop, which ``compression: {kind: topk}``
or ``{kind: powersgd}`` compresses with error feedback (:mod:`strategies._compressed_allreduce`).

``sharding: zero1 | zero2 | zero3`` (ZeRO, Rajbhandari et al. 2020) shards the optimizer
state (stage 1), the gradients too (2) and the parameters too (3) over the workers: gradient
buckets are reduce-scattered, and the parameters all-gathered after the update (1, 2) or layer
by layer before each pass (3). fred keeps full values and times shards: the numbers are SSGD's,
bit for bit; sharding changes the time, the bytes and the memory per worker
(:func:`fred.runs.memory.worker_memory`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from fred.numerics.optim import make_sum_step, optimizer_for
from fred.scenario.registry import register
from fred.scenario.schema import GradientSteps, Scenario
from fred.simulation.engine import Simulation
from strategies._compressed_allreduce import CompressedAllReduce, run_allreduce_sgd
from strategies._parameter_server import PS_FAULTS, run_parameter_server
from strategies.sasgd import sasgd_rule


class SSGD(CompressedAllReduce):
    name: Literal["ssgd"] = "ssgd"
    applies_optimizer = True
    lr: float = Field(default=0.1, gt=0)
    aggregation: Literal["ps", "allreduce"] = "allreduce"
    sharding: Literal["none", "zero1", "zero2", "zero3"] = Field(
        default="none",
        description="ZeRO: shard the optimizer state (zero1), and the gradients (zero2), and the parameters "
        "(zero3) over the workers; the same numbers, other collectives and less memory per worker "
        "(docs/strategies.md#sharded-data-parallelism-zero)",
    )

    def check(self, scenario: Scenario) -> None:
        if self.compression is not None and self.aggregation == "ps":
            raise ValueError(
                f"strategy.compression: {self.compression.kind} compresses the all-reduce; with aggregation: "
                "ps drop compression, or set aggregation: allreduce"
            )
        if self.sharding != "none":
            check_sharding(self, scenario)
        super().check(scenario)

    def fault_support(self) -> frozenset[str]:
        if self.sharding != "none":
            return frozenset()  # a crashed worker's shards are lost: no rejoin modelled
        return PS_FAULTS if self.aggregation == "ps" else super().fault_support()

    def buckets_gradients(self) -> bool:
        return self.aggregation == "allreduce" and super().buckets_gradients()

    def gradient_steps(self, scenario: Scenario, updates: int) -> GradientSteps:
        return GradientSteps(updates * scenario.cluster.workers)  # a round: every worker's gradient


@register(SSGD, timing_only=True)
def start(sim: Simulation, config: SSGD):
    opt = optimizer_for(config)
    if config.aggregation == "ps":  # the server waits for all n gradients and applies their plain average
        return run_parameter_server(sim, sasgd_rule(opt, staleness_aware=False), c=len(sim.workers))
    return run_allreduce_sgd(
        sim, opt, make_sum_step(opt), config.compression, config.codec_s_per_byte, config.sharding
    )


def check_sharding(config: SSGD, scenario: Scenario) -> None:
    """What ZeRO's sharding is not modelled with, refused with the fix."""
    where = f"strategy.sharding: {config.sharding}"
    if config.aggregation == "ps":
        raise ValueError(
            f"{where} shards the all-reduce's state over the workers; with aggregation: ps drop sharding "
            "(sharding: none), or set aggregation: allreduce"
        )
    if config.compression is not None:
        raise ValueError(
            f"{where} reduce-scatters whole gradients; strategy.compression: {config.compression.kind} "
            "compresses them: drop one of the two"
        )
    if scenario.faults.worker_crash:
        raise ValueError(
            f"{where}: a crashed worker takes its shards with it, which fred does not model; drop "
            "faults.worker_crash or sharding (sharding: none)"
        )
    if config.sharding != "zero3":
        return
    compute = scenario.cluster.compute
    for field, value, allowed in (
        ("cluster.workers_per_device", scenario.cluster.workers_per_device, 1),
        ("cluster.compute.collective_share", compute.collective_share, 0),
        ("cluster.compute.bucket_overhead_s", compute.bucket_overhead_s, 0),
    ):
        if value != allowed:
            raise ValueError(
                f"{field} {value:g}: {where} times each layer's passes between its parameters' "
                f"all-gathers, without {field}; give {field}: {allowed}, or sharding: zero1 or zero2"
            )
