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

    def check(self, scenario: Scenario) -> None:
        if self.compression is not None and self.aggregation == "ps":
            raise ValueError(
                f"strategy.compression: {self.compression.kind} compresses the all-reduce; with aggregation: "
                "ps drop compression, or set aggregation: allreduce"
            )
        super().check(scenario)

    def fault_support(self) -> frozenset[str]:
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
    return run_allreduce_sgd(sim, opt, make_sum_step(opt), config.compression, config.codec_s_per_byte)
