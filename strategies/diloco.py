"""DiLoCo (Douillard et al., 2023): replicas train H inner steps apart, then one outer Nesterov step
on their mean change.

The paper's Algorithm 1 (a paper "worker" is a replica here: ``replica_workers`` workers doing
synchronous data parallelism among themselves):

    Require: initial model theta(0); k replicas; data shards D_1 .. D_k;
             optimizers InnerOpt (AdamW in the paper) and OuterOpt (Nesterov momentum)
    for outer step t = 1 .. T:
        for replica i = 1 .. k:                              (in parallel)
            theta_i(t) <- theta(t-1)
            for inner step h = 1 .. H:                       (inner_steps)
                x ~ D_i                                      (a batch of each of its workers)
                L <- f(x, theta_i(t))                        (gradient all-reduced inside the replica)
                theta_i(t) <- InnerOpt(theta_i(t), grad L)
            delta_i(t) <- theta(t-1) - theta_i(t)            (the outer gradient)
        Delta(t) <- (1/k) sum_i delta_i(t)                   (all-reduce over every worker)
        theta(t) <- OuterOpt(theta(t-1), Delta(t))           (SGD, outer_lr, Nesterov outer_momentum)

Replica ``i`` is workers ``i*m .. i*m + m - 1`` (``m = replica_workers``, so with several
devices a node, a replica's inner all-reduces stay inside it). InnerOpt is the scenario's
``optimizer`` at ``lr`` (plain SGD by default; the paper's is ``adamw``); each replica keeps
its own inner state across outer steps, as the paper does, and every worker of a replica
holds the same replica. OuterOpt is ``optax.sgd(outer_lr, momentum=outer_momentum,
nesterov=True)`` on theta, the same on every worker (computed once and shared). The outer
all-reduce sums every *worker's* delta of its replica, each replica's m times, and divides by
the workers that took part: the mean over replicas. One update in the records is one outer
step (every worker contributes, having read theta(t-1): staleness 0).

Faults: a replica's all-reduce and the outer one go on without a crashed worker once it is
given up on (``faults.sync_timeout_s``); the outer mean is then over the workers that took
part. Streaming DiLoCo (fragments synchronised at staggered steps, overlapped with training)
is not modelled.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Literal

import jax
import jax.numpy as jnp
from pydantic import Field

from fred.numerics.gradients import divide
from fred.numerics.models import Params
from fred.numerics.optim import (
    GradientTransformation,
    OptState,
    build,
    make_step,
    make_sum_step,
    optimizer_for,
)
from fred.numerics.tape import op
from fred.scenario.registry import register
from fred.scenario.schema import GradientSteps, Scenario, StrategyConfig
from fred.simulation.engine import Simulation, Worker
from strategies._fields import bounded, refuse_out_of_bounds


class DiLoCo(StrategyConfig):
    name: Literal["diloco"] = "diloco"
    applies_optimizer = True
    lr: float = Field(default=0.1, gt=0, description="the inner optimizer's learning rate")
    inner_steps: int = bounded(
        8,
        ge=1,
        fix="use at least 1 inner step per outer step (the paper: 500)",
        description="H: inner steps of every replica between outer steps (the paper: 500, in runs of 88,000 "
        "steps; 8 is local_sgd's sync_every, so that by default the two differ only in the outer step)",
    )
    replica_workers: int = Field(
        default=1,
        ge=1,
        description="workers a model replica, synchronous data parallel inside it; must divide "
        "cluster.workers (cluster.workers / replica_workers replicas)",
    )
    outer_lr: float = bounded(
        0.7,
        gt=0,
        fix="use an outer learning rate above 0 (the paper: 0.7; 1 with outer_momentum 0 is parameter "
        "averaging)",
        description="the outer SGD's learning rate (the paper's 0.7)",
    )
    outer_momentum: float = bounded(
        0.9,
        ge=0,
        lt=1,
        fix="use a momentum in [0, 1) (the paper: 0.9; 0: plain outer SGD)",
        description="the outer SGD's Nesterov momentum (the paper's 0.9); 0: plain outer SGD",
    )

    _bounds = refuse_out_of_bounds()

    def check(self, scenario: Scenario) -> None:
        n = scenario.cluster.workers
        if n % self.replica_workers:
            divisors = ", ".join(str(d) for d in range(1, n + 1) if n % d == 0)
            raise ValueError(
                f"strategy.replica_workers is {self.replica_workers} but cluster.workers is {n}, which it "
                f"does not divide: replicas are replica_workers workers each; use a divisor of {n}: "
                f"{divisors}"
            )

    def buckets_gradients(self) -> bool:
        return (
            self.replica_workers > 1
        )  # a replica all-reduces each inner gradient, in buckets when the scenario has them

    def model_copies_per_worker(self) -> int:
        # its replica and gradient, theta, the outer gradient it sends and the sum it receives, the outer
        # momentum
        return 5 + (self.outer_momentum > 0)

    def gradient_steps(self, scenario: Scenario, updates: int) -> GradientSteps:
        # an update is an outer step: inner_steps steps of every worker
        return GradientSteps(
            updates * self.inner_steps * scenario.cluster.workers, "a smaller strategy.inner_steps"
        )


def outer_optimizer(config: DiLoCo) -> GradientTransformation:
    """OuterOpt: ``optax.sgd(outer_lr, momentum, nesterov=True)``; plain SGD without momentum."""
    options = {"momentum": config.outer_momentum, "nesterov": True} if config.outer_momentum > 0 else {}
    return build("sgd", config.outer_lr, json.dumps(options, sort_keys=True, separators=(",", ":")))


@op("strategies.diloco:outer_gradient")
@jax.jit
def outer_gradient(theta: Params, replica: Params) -> Params:
    """``delta_i = theta(t-1) - theta_i(t)``: how far the replica moved, as a gradient (a descent direction's
    negative)."""
    return jax.tree.map(jnp.subtract, theta, replica)


@dataclass
class Replica:
    """One model replica: its workers, its parameters and inner optimizer state (kept across outer steps)."""

    members: list[Worker]
    params: Params
    opt: OptState
    steps: int = 0  # inner steps applied since the run began
    delta: Params | None = None  # its outer gradient for the outer step in ``delta_of``
    delta_of: int = -1


@dataclass
class OuterState:
    """theta and OuterOpt's state, the same on every worker; ``version`` counts outer steps."""

    params: Params
    opt: OptState
    version: int = 0
    replicas: list[Replica] = field(default_factory=list)


@register(DiLoCo, timing_only=True)
def start(sim: Simulation, config: DiLoCo):
    m, h = config.replica_workers, config.inner_steps
    inner, outer = optimizer_for(config), outer_optimizer(config)
    inner_step, outer_step = make_sum_step(inner), make_step(outer)
    glob = OuterState(sim.init_params, outer.init(sim.init_params))
    glob.replicas = [
        Replica(sim.workers[i : i + m], sim.init_params, inner.init(sim.init_params))
        for i in range(0, len(sim.workers), m)
    ]

    def inner_gradient(w: Worker, rep: Replica):
        """A gradient of the replica's batch: the worker's own, or all-reduced over the replica's workers."""
        if len(rep.members) == 1:
            return (yield from sim.compute(w, rep.params))
        return (yield from sim.backprop_allreduce(w, rep.params, rep.members))

    def finish_outer(t: int, total: Params | None) -> None:
        """Delta(t) <- the mean outer gradient; theta(t) <- OuterOpt(theta(t-1), Delta(t)); every replica
        restarts from theta(t). Once: every worker's all-reduce gives the same sum."""
        if glob.version != t:
            return
        members = sim.participants(sim.workers)  # all, unless a crashed worker was left out
        if total is not None:  # None in a timing-only run: the same schedule, no numbers
            glob.params, glob.opt = outer_step(glob.params, glob.opt, divide(total, len(members)))
        for rep in glob.replicas:
            rep.params, rep.delta = glob.params, None  # the inner optimizer's state stays the replica's
        sim.applied([(i, t) for i in members], t)
        glob.version += 1

    def worker(w: Worker):
        rep = glob.replicas[w.index // m]
        steps, t = 0, 0
        while True:
            for _ in range(h):
                total = yield from inner_gradient(w, rep)
                if rep.steps == steps:  # the first of the replica's workers back applies the replica's step
                    if total is not None:
                        rep.params, rep.opt = inner_step(rep.params, rep.opt, total.grad, total.count)
                    rep.steps += 1
                steps += 1
            if rep.delta_of != t:  # computed once for the replica's workers
                rep.delta = None if sim.timing_only else outer_gradient(glob.params, rep.params)
                rep.delta_of = t
            total = yield from sim.allreduce(sim.workers, w, sim.param_bytes, rep.delta)
            finish_outer(t, total)
            t += 1

    for w in sim.workers:
        sim.process(worker(w))
    return lambda: glob.params
