"""ASGD: asynchronous SGD on a parameter server (Dean et al.; the FASGD paper's baseline).

    worker, forever:
        g <- gradient at the parameters it last fetched (version j)
        push g;  server: theta <- theta - lr * g   (server at version i: staleness i - j)
        fetch theta and its version

It is SASGD's server loop and rule with one gradient per update and no staleness
scaling, so it runs on both clocks (``clock: logical`` is the original FRED dispatcher), and
without numbers (``workload.timing_only``: its schedule never reads them).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from fred.numerics.optim import optimizer_for
from fred.scenario.registry import register
from fred.scenario.schema import GradientSteps, Scenario
from fred.simulation.engine import Simulation
from strategies._parameter_server import ParameterServerConfig, run_parameter_server
from strategies.sasgd import sasgd_rule


class ASGD(ParameterServerConfig):
    name: Literal["asgd"] = "asgd"
    lr: float = Field(default=0.1, gt=0)

    def gradient_steps(self, scenario: Scenario, updates: int) -> GradientSteps:
        return GradientSteps(updates)  # the server applies each gradient as it comes


@register(ASGD, timing_only=True)
def start(sim: Simulation, config: ASGD):
    return run_parameter_server(
        sim, sasgd_rule(optimizer_for(config), staleness_aware=False), c=1, clock=config.clock
    )
