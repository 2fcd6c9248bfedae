"""D-PSGD (Lian et al. 2017; the SGP paper's baseline): decentralised SGD on an undirected ring.

    every node i, iteration k:
        g <- gradient at x_i;   x_i <- x_i - lr * g
        send x_i to both ring neighbours; receive theirs
        x_i <- (x_{i-1} + x_i + x_{i+1}) / 3      (symmetric, doubly stochastic mixing)

Synchronous, and with symmetric weights the push-sum weights stay 1, so no de-biasing.
It is SGP's loop with this mixing: twice the messages of 1-peer SGP per iteration.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from fred.scenario.registry import register
from fred.scenario.schema import StrategyConfig
from fred.simulation.engine import Simulation
from strategies.sgp import SGP, run_push_sum


class DPSGD(StrategyConfig):
    name: Literal["dpsgd"] = "dpsgd"
    applies_optimizer = True
    lr: float = Field(default=0.1, ge=0)

    def model_copies_per_worker(self) -> int:
        return 4  # a replica per worker, its gradient, and the copies it sends and receives


def ring_mixing(n: int):
    """Each node keeps a third and gives a third to each neighbour (a half each when n = 2)."""
    if n == 1:
        return lambda k, i: [(0, 1.0)]
    if n == 2:
        return lambda k, i: [(i, 0.5), (1 - i, 0.5)]
    return lambda k, i: [(i, 1 / 3), ((i - 1) % n, 1 / 3), ((i + 1) % n, 1 / 3)]


@register(DPSGD, timing_only=True)
def start(sim: Simulation, config: DPSGD):
    as_sgp = SGP(lr=config.lr, reduction=config.reduction, optimizer=config.optimizer, lr_schedule=config.lr_schedule)
    return run_push_sum(sim, as_sgp, debiased=False, shares=ring_mixing(len(sim.workers))).average
