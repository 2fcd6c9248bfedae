"""AR-SGD: synchronous SGD over ring all-reduce (the Pipe-SGD and SGP papers' baseline).

The same algorithm as ``ssgd`` with ``aggregation: allreduce``, under the papers' name:

    every worker, each iteration t:
        g_i <- gradient on its shard at theta_t
        g   <- ring all-reduce of the g_i, divided by n b
        theta_{t+1} <- theta_t - lr * g
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from fred.numerics.optim import make_sum_step, optimizer_for
from fred.scenario.registry import register
from fred.scenario.schema import GradientSteps, Scenario, StrategyConfig
from fred.simulation.engine import Simulation
from strategies.ssgd import ALLREDUCE_FAULTS, run_allreduce_sgd


class ARSGD(StrategyConfig):
    name: Literal["arsgd"] = "arsgd"
    applies_optimizer = True
    lr: float = Field(default=0.1, gt=0)

    def fault_support(self) -> frozenset[str]:
        return ALLREDUCE_FAULTS

    def buckets_gradients(self) -> bool:
        return True

    def gradient_steps(self, scenario: Scenario, updates: int) -> GradientSteps:
        return GradientSteps(updates * scenario.cluster.workers)  # an iteration: every worker's gradient


@register(ARSGD, timing_only=True)
def start(sim: Simulation, config: ARSGD):
    opt = optimizer_for(config)
    return run_allreduce_sgd(sim, opt, make_sum_step(opt))
