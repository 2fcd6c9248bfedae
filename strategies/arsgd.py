"""AR-SGD: synchronous SGD over ring all-reduce (the Pipe-SGD and SGP papers' baseline).

    every worker, each iteration t:
        g_i <- gradient on its shard at theta_t
        g   <- ring all-reduce of the g_i, divided by n b
        theta_{t+1} <- theta_t - lr * g

It is ``ssgd`` with ``aggregation: allreduce``, under the papers' name.
``compression: {kind: topk, ratio}`` or ``{kind: powersgd, rank}`` compresses the all-reduce with
error feedback (top-k's sparse payloads are all-gathered): see :mod:`strategies._compressed_allreduce`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from fred.numerics.optim import make_sum_step, optimizer_for
from fred.scenario.registry import register
from fred.scenario.schema import GradientSteps, Scenario
from fred.simulation.engine import Simulation
from strategies._compressed_allreduce import CompressedAllReduce, run_allreduce_sgd


class ARSGD(CompressedAllReduce):
    name: Literal["arsgd"] = "arsgd"
    applies_optimizer = True
    lr: float = Field(default=0.1, gt=0)

    def gradient_steps(self, scenario: Scenario, updates: int) -> GradientSteps:
        return GradientSteps(updates * scenario.cluster.workers)  # an iteration: every worker's gradient


@register(ARSGD, timing_only=True)
def start(sim: Simulation, config: ARSGD):
    opt = optimizer_for(config)
    return run_allreduce_sgd(sim, opt, make_sum_step(opt), config.compression, config.codec_s_per_byte)
