"""ASGD: asynchronous SGD on a parameter server (Dean et al.; the FASGD paper's baseline).

    worker, forever:
        g <- gradient at the parameters it last fetched (version j)
        push g;  server: theta <- theta - lr * g   (server at version i: staleness i - j)
        fetch theta and its version

This is SASGD's server loop with one gradient per update and no staleness scaling,
so it runs on both clocks (``clock: logical`` is the original FRED dispatcher), and
without numbers (``workload.timing_only``: its schedule never reads them).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from fred.numerics.optim import optimizer_for
from fred.scenario.registry import register
from fred.scenario.schema import GradientSteps, Scenario, StrategyConfig
from fred.simulation.engine import Simulation
from strategies.sasgd import PS_FAULTS, run_parameter_server, sasgd_rule


class ASGD(StrategyConfig):
    name: Literal["asgd"] = "asgd"
    applies_optimizer = True
    lr: float = Field(default=0.1, gt=0)
    clock: Literal["simulated", "logical"] = "simulated"

    def fault_support(self) -> frozenset[str]:
        return PS_FAULTS

    def gradient_steps(self, scenario: Scenario, updates: int) -> GradientSteps:
        return GradientSteps(updates)  # the server applies each gradient as it comes


@register(ASGD, timing_only=True)
def start(sim: Simulation, config: ASGD):
    return run_parameter_server(sim, sasgd_rule(optimizer_for(config), staleness_aware=False), c=1, clock=config.clock)
