"""AR-SGD: synchronous SGD over ring all-reduce (the Pipe-SGD and SGP papers' baseline).

The same algorithm as ``ssgd`` with ``aggregation: allreduce``, under the papers' name:

    every worker, each iteration t:
        g_i <- gradient on its shard at theta_t
        g   <- ring all-reduce of the g_i, divided by n b
        theta_{t+1} <- theta_t - lr * g

``compression: {kind: topk, ratio}`` or ``{kind: powersgd, rank}`` compresses the all-reduce with
error feedback (top-k's sparse payloads are all-gathered): see ``strategies/ssgd.py``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from fred.numerics.optim import make_sum_step, optimizer_for
from fred.scenario.registry import register
from fred.scenario.schema import GradientSteps, Scenario, StrategyConfig
from fred.simulation.engine import Simulation
from strategies.ssgd import (Compression, allreduce_faults, check_compression, codec_field, compression_by_kind,
                             compression_field, run_allreduce_sgd)


class ARSGD(StrategyConfig):
    name: Literal["arsgd"] = "arsgd"
    applies_optimizer = True
    lr: float = Field(default=0.1, gt=0)
    compression: Compression | None = compression_field()
    codec_s_per_byte: float = codec_field()

    _compression_kind = field_validator("compression", mode="before")(compression_by_kind)

    def check(self, scenario: Scenario) -> None:
        check_compression(self.compression, scenario)

    def fault_support(self) -> frozenset[str]:
        return allreduce_faults(self.compression)

    def buckets_gradients(self) -> bool:
        return self.compression is None

    def model_copies_per_worker(self) -> int:
        return 2 if self.compression is None else 3  # and the error memory

    def gradient_steps(self, scenario: Scenario, updates: int) -> GradientSteps:
        return GradientSteps(updates * scenario.cluster.workers)  # an iteration: every worker's gradient


@register(ARSGD, timing_only=True)
def start(sim: Simulation, config: ARSGD):
    opt = optimizer_for(config)
    return run_allreduce_sgd(sim, opt, make_sum_step(opt), config.compression, config.codec_s_per_byte)
