"""SGD: one worker, the reference every distributed strategy is measured against.

loop:
    g <- gradient of the loss on the next batch, at theta
    theta <- theta - lr * g
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from fred.numerics.optim import make_sum_step, optimizer_for
from fred.scenario.registry import register
from fred.scenario.schema import GradientSteps, Scenario, StrategyConfig
from fred.simulation.engine import Simulation, Worker


class SGD(StrategyConfig):
    name: Literal["sgd"] = "sgd"
    applies_optimizer = True
    lr: float = Field(default=0.1, gt=0)

    def gradient_steps(self, scenario: Scenario, updates: int) -> GradientSteps:
        return GradientSteps(updates)  # one gradient, one update

    def check(self, scenario: Scenario) -> None:
        if scenario.cluster.workers != 1:
            raise ValueError(
                f"strategy 'sgd' runs on one worker; set cluster.workers: 1 (got {scenario.cluster.workers})"
            )


@register(SGD)
def start(sim: Simulation, config: SGD):
    opt = optimizer_for(config)
    step = make_sum_step(opt)
    model = {"params": sim.init_params, "opt": opt.init(sim.init_params)}

    def worker(w: Worker):
        version = 0
        while True:
            g = yield from sim.compute(w, model["params"])
            model["params"], model["opt"] = step(model["params"], model["opt"], g.grad, g.count)
            sim.applied([(w.index, version)], version)
            version += 1

    sim.process(worker(sim.workers[0]))
    return lambda: model["params"]
