"""SGP: Stochastic Gradient Push (Assran et al., after Nedic and Olshevsky).

    every node i, iteration k = 0, 1, ...:
        z_i <- x_i / w_i
        g   <- gradient on the next batch at z_i
        x_i <- x_i - lr * g
        send (p_ji x_i, p_ji w_i) to each out-neighbour j;  keep (p_ii x_i, p_ii w_i)
        receive the in-neighbours' shares of iteration k (tau-overlap: of k - tau)
        x_i <- own share + received x shares;  w_i <- own share + received w shares

The mixing matrix P(k) is column-stochastic, so push-sum keeps sum_i x_i and
sum_i w_i = n. Topologies: ``directed_exponential`` (node i sends to
i + 2^(k mod e), e = floor(log2(n - 1)) + 1 hops: log2 n for a power of two;
1 or 2 peers per iteration, weights split evenly),
``ring`` (i -> i + 1), ``complete`` (uniform 1/n: AR-SGD's average), or an
explicit list of matrices used in turn. The loop is :mod:`strategies._push_sum`'s,
which ``osgp`` (messages consumed up to tau iterations late) and ``dpsgd`` run too; it
routes around crashed nodes (its docstring says how).
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from pydantic import Field, field_validator

from fred.scenario.registry import register
from fred.scenario.schema import GradientSteps, Scenario, StrategyConfig
from fred.simulation.engine import Simulation
from strategies._push_sum import Matrix, run_push_sum


class SGP(StrategyConfig):
    name: Literal["sgp"] = "sgp"
    applies_optimizer = True
    lr: float = Field(default=0.1, ge=0)
    topology: Literal["directed_exponential", "ring", "complete"] | list[Matrix] = "directed_exponential"
    peers: Literal[1, 2] = Field(default=1, description="out-neighbours per iteration (directed_exponential)")
    init_spread: float = Field(default=0.0, ge=0, description="per-node noise added to the start (tests)")

    def model_copies_per_worker(self) -> int:
        return 4  # a replica per worker, its gradient, and the copies it sends and receives

    def gradient_steps(self, scenario: Scenario, updates: int) -> GradientSteps:
        return GradientSteps(updates)  # a node's step (its gradient and its mix) is an update

    @field_validator("topology")
    @classmethod
    def _column_stochastic(cls, value: Any) -> Any:
        if isinstance(value, str):
            return value
        if not value:
            raise ValueError("give at least one mixing matrix (they are used in turn), or a named topology")
        for k, matrix in enumerate(value):
            m = np.asarray(matrix, dtype=float)
            if m.ndim != 2 or m.shape[0] != m.shape[1]:
                raise ValueError(f"matrix {k} must be square, got shape {m.shape}")
            if (m < 0).any():
                raise ValueError(f"matrix {k} has negative weights; mixing weights are >= 0")
            sums = m.sum(axis=0)
            bad = np.flatnonzero(np.abs(sums - 1) > 1e-12)
            if bad.size:
                raise ValueError(
                    f"matrix {k} is not column-stochastic: column {bad[0]} sums to {float(sums[bad[0]])!r}; "
                    "every column must sum to 1 within 1e-12"
                )
            empty = np.flatnonzero(m.sum(axis=1) == 0)
            if empty.size:
                raise ValueError(
                    f"matrix {k} has row {empty[0]} all zero: node {empty[0]} would receive no share, "
                    "its push-sum weight would be 0 and z = x / w undefined; give it a self weight or an "
                    "in-neighbour"
                )
        return value

    def check(self, scenario: Scenario) -> None:
        n = scenario.cluster.workers
        if not isinstance(self.topology, str) and any(len(m) != n for m in self.topology):
            raise ValueError(f"strategy.topology matrices must be {n} x {n}, one row and column per worker")


@register(SGP, timing_only=True)
def start(sim: Simulation, config: SGP):
    return run_push_sum(sim, config).average  # its shares: mixing(config, n)
