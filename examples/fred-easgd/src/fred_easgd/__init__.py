"""EASGD: asynchronous Elastic Averaging SGD (Zhang, Choromanska and LeCun 2015, Algorithm 1).

    worker i, forever (alpha = lr * rho):
        x <- x_i
        if tau divides t_i:
            read the center x~ from the server
            delta <- alpha * (x - x~);   x_i <- x_i - delta;   server: x~ <- x~ + delta
        x_i <- x_i - lr * gradient at x;   t_i <- t_i + 1

One update in the records is one elastic exchange: the center moved by one worker's
difference, with staleness the center's moves between that worker's read and its own.
The center is what is evaluated. A fred strategy plug-in, found through the
``fred.strategies`` entry point of the ``fred-easgd`` distribution.
"""

from __future__ import annotations

import functools
from typing import Literal

import jax.numpy as jnp
from pydantic import Field

from fred.numerics.models import Params
from fred.scenario.registry import register
from fred.scenario.schema import GradientSteps, Scenario, StrategyConfig
from fred.simulation.engine import Simulation, Worker
from fred.simulation.server import ParameterServer
from strategies.sasgd import scaled_sum  # sum_k scales[k] * trees[k], a recorded op replay can rerun

BETA = 0.9  # the paper's default total moving rate beta = p * alpha


class EASGD(StrategyConfig):
    strategy_api = "1.1"  # written for fred's strategy contract 1.1
    name: Literal["easgd"] = "easgd"
    lr: float = Field(default=0.1, gt=0, description="eta: the workers' learning rate")
    rho: float | None = Field(
        default=None,
        gt=0,
        description="rho: the elastic force, alpha = lr * rho; default alpha = 0.9 / workers",
    )
    tau: int = Field(
        default=4, ge=1, description="communication period: local steps between elastic exchanges"
    )

    def moving_rate(self, workers: int) -> float:
        """alpha = eta * rho, or beta / p with beta = 0.9 when rho is not given."""
        return self.lr * self.rho if self.rho is not None else BETA / workers

    def check(self, scenario: Scenario) -> None:
        alpha = self.moving_rate(scenario.cluster.workers)
        if not alpha < 1:  # alpha >= 1 pulls a worker past the center: the exchange diverges
            raise ValueError(
                f"strategy: alpha = lr * rho = {alpha:g} must be below 1; use rho < {1 / self.lr:g}"
            )

    def has_server(self) -> bool:
        return True  # the center lives on a parameter server, whose link faults may name

    def model_copies_per_worker(self) -> int:
        return 4  # its replica, its gradient, the center it read and the difference it sends

    def gradient_steps(self, scenario: Scenario, updates: int) -> GradientSteps:
        return GradientSteps(
            updates * self.tau, "a smaller strategy.tau"
        )  # an exchange every tau steps of a worker


@functools.cache  # one array per set of weights: the tape keeps each constant once
def weights(*values: float) -> jnp.ndarray:
    return jnp.asarray(values, jnp.float32)


@register(EASGD)
def start(sim: Simulation, config: EASGD):
    eta, alpha = config.lr, config.moving_rate(len(sim.workers))
    server = ParameterServer(sim, sim.init_params)  # holds the center variable x~
    pull, apart, together = weights(alpha, -alpha), weights(1.0, -1.0), weights(1.0, 1.0)

    def elastic_exchange(w: Worker, x: Params):
        """a) and b) of Algorithm 1: returns x_i after the pull toward the center it read."""
        center, version_read = yield from server.fetch(w)
        delta = scaled_sum([x, center], pull)  # alpha (x - x~)
        yield from server.push(w)  # the difference travels to the server, parameter-sized
        server.params = scaled_sum([server.params, delta], together)  # x~ <- x~ + delta
        sim.applied([(w.index, version_read)], server.version)
        server.version += 1
        return scaled_sum([x, delta], apart)  # x_i <- x_i - delta

    def worker(w: Worker):
        x_i, t = sim.init_params, 0  # x_i = x~ at the start
        while True:
            x = x_i
            if t % config.tau == 0:
                x_i = yield from elastic_exchange(w, x)
            g = yield from sim.compute(w, x)  # the gradient at x, before the pull (Algorithm 1)
            x_i = scaled_sum([x_i, g.grad], weights(1.0, -eta / g.count))  # x_i - eta * mean gradient
            t += 1

    for w in sim.workers:
        sim.process(worker(w))
    return lambda: server.params
