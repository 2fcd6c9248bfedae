"""SASGD: n-softsync, staleness-aware asynchronous SGD on a parameter server (Zhang et al.).

    every worker, forever:
        [clock: logical -> wait until the dispatcher picks this worker]
        g <- gradient at the parameters it last fetched (version j)
        push g; wait until the server has applied the batch that holds it
        fetch theta and its version
    server: collect c = floor(n / n_soft) gradients, then, in worker order,
        theta <- theta - lr * sum_k g_k / (c * (tau_k + 1))     (1/c if staleness_aware is off)
        version += 1

``n_soft = n`` (the default, c = 1) is staleness-aware ASGD; ``n_soft = 1`` waits for
every worker, which with staleness-awareness off is SSGD on a parameter server. The
loop is :func:`strategies._parameter_server.run_parameter_server`; this module gives its
update :func:`sasgd_rule`, which ``asgd`` and ``ssgd`` (``aggregation: ps``) use too.
"""

from __future__ import annotations

import functools
from typing import Any, Literal

import jax
import jax.numpy as jnp
from pydantic import Field

from fred.numerics.gradients import GradSum, mean_grad, sum_grads, tree_sum
from fred.numerics.models import Params
from fred.numerics.optim import GradientTransformation, make_step, make_sum_step, optimizer_for
from fred.numerics.tape import op
from fred.scenario.registry import register
from fred.scenario.schema import GradientSteps, Scenario
from fred.simulation.engine import Simulation
from strategies._parameter_server import ParameterServerConfig, Rule, run_parameter_server


class SASGD(ParameterServerConfig):
    name: Literal["sasgd"] = "sasgd"
    lr: float = Field(default=0.04, gt=0)
    n_soft: int | None = Field(
        default=None, ge=1, description="softsync degree; default: the number of workers"
    )
    staleness_aware: bool = True

    def check(self, scenario: Scenario) -> None:
        workers = scenario.cluster.workers
        if self.n_soft is not None and self.n_soft > workers:
            raise ValueError(
                f"strategy.n_soft is {self.n_soft} but there are {workers} workers; use 1..{workers}"
            )

    def gradients_per_update(self, workers: int) -> int:
        """The server's batch ``c = floor(n / n_soft)``."""
        return max(workers // (self.n_soft or workers), 1)

    def gradient_steps(self, scenario: Scenario, updates: int) -> GradientSteps:
        c = self.gradients_per_update(scenario.cluster.workers)
        return GradientSteps(updates * c, "a larger strategy.n_soft" if c > 1 else "")


def staleness_scales(c: int, staleness: list[int], aware: bool) -> jax.Array:
    """``1 / (c (tau + 1))`` per gradient, or ``1 / c`` when not staleness-aware."""
    return jnp.asarray([1.0 / (c * (tau + 1)) if aware else 1.0 / c for tau in staleness], jnp.float32)


@op("strategies.sasgd:scaled_sum")
@jax.jit
def scaled_sum(grads: list[Params], scales: jax.Array) -> Params:
    """``sum_k scales[k] * grads[k]`` by the fixed pairwise tree."""
    return tree_sum([jax.tree.map(lambda g, k=k: g * scales[k], grad) for k, grad in enumerate(grads)])


@functools.cache
def sasgd_rule(opt: GradientTransformation, staleness_aware: bool) -> Rule:
    """The server's update for a batch of c gradients; c is the batch's own size, the configured
    c except after a crash, when the server applies what the live workers sent (a mean over
    them, as the plain average is). ``opt`` turns the (staleness-scaled) average into the step;
    its state is the server's."""
    step, sum_step = make_step(opt), make_sum_step(opt)

    def apply(params: Params, state: Any, grads: list[GradSum], staleness: list[int]) -> tuple[Params, Any]:
        if not staleness_aware:  # one plain average: the same bits as SSGD's aggregation
            total = sum_grads(grads)
            return sum_step(params, state, total.grad, total.count)
        means = [mean_grad(g) for g in grads]
        return step(params, state, scaled_sum(means, staleness_scales(len(grads), staleness, True)))

    return Rule(opt.init, apply)


@register(SASGD, timing_only=True)
def start(sim: Simulation, config: SASGD):
    c = config.gradients_per_update(len(sim.workers))
    return run_parameter_server(
        sim, sasgd_rule(optimizer_for(config), config.staleness_aware), c, config.clock
    )
