"""Asynchronous Local-SGD (Liu et al., 2024): replicas push their outer gradient to a server as each
finishes its inner steps; the server applies it at once with Delayed Nesterov momentum.

Liu et al., "Asynchronous Local-SGD Training for Language Modeling" (arXiv 2401.09135): Algorithm 2
(task scheduling; a paper "worker" is a replica here) with Algorithm 3 (Delayed Nesterov, DN) as its
``sync`` and Eq. 6 (dynamic local updates, DyLU) for each replica's steps:

    every replica w, forever:                                (in parallel, each at its own speed)
        theta_w <- theta, the server's model as it fetched it (version j)
        w.steps <- floor(v(w) / max_w' v(w') H)   with DyLU (v: steps a second; Eq. 6), else H
        repeat w.steps times:  theta_w <- InnerOpt(theta_w, grad f(x ~ D_w, theta_w))
        send the pseudo-gradient g <- theta(read) - theta_w  (theta <- sync(theta, w.update))

    Algorithm 3 Delayed Nesterov Update
    Require: initial model theta_0; momentum decay beta in (0, 1);
             momentum activation c in [0, 1/N] (default 0); buffer size N
    t = 0;  m_0 = 0 (momentum);  Delta = 0 (aggregated gradient)
    while not finished:
        receive the pseudo-gradient g_t                      (the sync step of Algorithm 2)
        Delta <- Delta + g_t
        if (t + 1) % N == 0:
            m_{t+1} <- beta m_t + Delta / N
            theta_{t+1} <- theta_t - eps ((1 - cN + c) beta m_{t+1} + g_t / N)
            Delta = 0
        else:
            m_{t+1} <- m_t                                   (delay the momentum update)
            theta_{t+1} <- theta_t - eps (c beta m_{t+1} + g_t / N)
        t <- t + 1

With ``c = 0`` the model moves over N arrivals by ``-eps (Delta / N + beta m)``: one Nesterov step
on the mean of the N pseudo-gradients, spread over them (plain SGD on each, the momentum term at the
N-th), so a stale pseudo-gradient does not compound the momentum; ``c = 1/N`` spreads the momentum
term evenly. ``N = 1`` is Nesterov SGD at every arrival (``optax.sgd(eps, beta, nesterov=True)``).
With ``beta = 0`` and ``eps = 1`` every arrival adds the replica's change, ``theta <- theta -
(theta_read - theta_w)``, so with ``H = 1`` and an SGD InnerOpt it is ASGD (Dean et al.), the same
schedule: ``theta <- theta - lr grad f(theta_read)``.

Replica ``i`` is workers ``i*m .. i*m + m - 1`` (``m = replica_workers``, synchronous data parallel
inside it, as in DiLoCo). Its speed is that of its slowest worker as the scenario's compute model
times it (speed factors, stragglers, speed changes; not jitter), taken as the server applies its
push (at the start for the first round): the paper's speeds known a priori. Each of its workers
pushes and fetches ``1/m`` of the model (the replica's shards); the replica takes the server's
model as its own update left it. InnerOpt is the scenario's ``optimizer`` at ``lr``, its state kept
across rounds. One update in the records is one pseudo-gradient applied, contributed by the
replica's workers with the version they read: its staleness is the updates applied since. Left out:
Algorithm 2's grace period (the server merging pushes that arrive close together).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import jax
import jax.numpy as jnp
import simpy
from pydantic import Field

from fred.numerics.models import Params
from fred.numerics.optim import OptState, make_sum_step, optimizer_for
from fred.numerics.tape import op
from fred.scenario.registry import register
from fred.scenario.schema import GradientSteps, Scenario, StrategyConfig
from fred.simulation.engine import Simulation, Worker
from fred.simulation.server import ParameterServer
from strategies._fields import bounded, refuse_out_of_bounds
from strategies._replicas import check_replicas, replica_workers_field
from strategies.diloco import outer_gradient


class AsyncLocalSGD(StrategyConfig):
    name: Literal["async_local_sgd"] = "async_local_sgd"
    applies_optimizer = True
    lr: float = Field(default=0.1, gt=0, description="the inner optimizer's learning rate")
    inner_steps: int = bounded(
        8,
        ge=1,
        fix="use at least 1 inner step per push (the paper: 50)",
        description="H: inner steps of the fastest replica between its pushes (every replica's without "
        "dynamic_local_updates)",
    )
    replica_workers: int = replica_workers_field()
    outer_lr: float = bounded(
        0.7,
        gt=0,
        fix="use an outer learning rate above 0 (the paper: 0.7; 1 with outer_momentum 0 adds each "
        "replica's change as it comes)",
        description="eps: the server's learning rate",
    )
    outer_momentum: float = bounded(
        0.9,
        ge=0,
        lt=1,
        fix="use a momentum in [0, 1) (the paper: 0.9; 0: plain SGD on each pseudo-gradient)",
        description="beta: the server's Nesterov momentum; 0: plain SGD on each pseudo-gradient",
    )
    momentum_every: int | None = bounded(
        None,
        ge=1,
        fix="use at least 1 (1: Nesterov at every arrival; the paper's default: the number of replicas)",
        description="N: Delayed Nesterov's period, the server updates between two momentum steps (1: "
        "Nesterov at every arrival); default: the number of replicas, the paper's",
    )
    momentum_activation: float = bounded(
        0.0,
        ge=0,
        fix="use a momentum activation in [0, 1/momentum_every] (the paper's default: 0)",
        description="c in [0, 1/N]: the share of the momentum term applied at each arrival between momentum "
        "steps (0, the paper's default: plain SGD between them)",
    )
    dynamic_local_updates: bool = Field(
        default=True,
        description="DyLU: a replica takes floor(inner_steps x its speed / the fastest replica's) inner "
        "steps a round (at least 1), so that replicas of different speeds push about as often",
    )

    _bounds = refuse_out_of_bounds()

    def check(self, scenario: Scenario) -> None:
        n = scenario.cluster.workers
        check_replicas(self.replica_workers, n)
        self.check_activation(n // self.replica_workers)

    def check_activation(self, replicas: int) -> None:
        n = self.period(replicas)
        if self.momentum_activation > 1 / n:
            raise ValueError(
                f"strategy.momentum_activation is {self.momentum_activation} but Delayed Nesterov's buffer "
                f"is N = {n} pseudo-gradients (strategy.momentum_every, by default the replicas), and c "
                f"must be in [0, 1/N]; use a momentum_activation of at most {1 / n:.6g}"
            )

    def period(self, replicas: int) -> int:
        """N: the configured momentum_every, or the number of replicas (the paper's default)."""
        return self.momentum_every if self.momentum_every is not None else replicas

    def buckets_gradients(self) -> bool:
        return self.replica_workers > 1  # a replica all-reduces each inner gradient

    def model_copies_per_worker(self) -> int:
        # its replica and gradient, the model it read, the pseudo-gradient; the server's momentum and buffer
        return 6

    def gradient_steps(self, scenario: Scenario, updates: int) -> GradientSteps:
        # an update is one replica's push: at most inner_steps steps of each of its workers
        return GradientSteps(
            updates * self.inner_steps * self.replica_workers, "a smaller strategy.inner_steps"
        )


def local_steps(inner_steps: int, step_s: float, fastest_step_s: float) -> int:
    """DyLU: ``floor(H v / v_fastest)`` inner steps for a replica of steps ``step_s`` long, at least 1."""
    return max(1, int(inner_steps * fastest_step_s / step_s))


@op("strategies.async_local_sgd:delayed_step")
@jax.jit
def delayed_step(
    theta: Params, momentum: Params, buffer: Params, g: Params, lr: float, beta: float, c: float, n: float
) -> tuple[Params, Params]:
    """DN between momentum steps: ``Delta <- Delta + g``, ``theta <- theta - eps (c beta m + g / N)``."""
    step = jax.tree.map(lambda p, x, v: p - lr * (c * beta * v + x / n), theta, g, momentum)
    return step, jax.tree.map(jnp.add, buffer, g)


@op("strategies.async_local_sgd:momentum_step")
@jax.jit
def momentum_step(
    theta: Params, momentum: Params, buffer: Params, g: Params, lr: float, beta: float, c: float, n: float
) -> tuple[Params, Params, Params]:
    """DN's momentum step: ``m <- beta m + (Delta + g) / N``, ``theta <- theta - eps ((1 - cN + c) beta m
    + g / N)``, ``Delta <- 0``."""
    m = jax.tree.map(lambda v, d, x: beta * v + (d + x) / n, momentum, buffer, g)
    share = 1 - c * n + c
    step = jax.tree.map(lambda p, x, v: p - lr * (share * beta * v + x / n), theta, g, m)
    return step, m, jax.tree.map(jnp.zeros_like, buffer)


@dataclass
class Replica:
    """One model replica: its workers, parameters, inner optimizer state and the model it read."""

    members: list[Worker]
    params: Params
    opt: OptState
    read: Params  # the server's model it started the round from
    version: int = 0  # that model's version
    steps: int = 0  # inner steps applied since the run began
    round_steps: int = 0  # H_i: its inner steps this round, set as its last push is applied
    shards: int = 0  # its workers' pushes of this round that have reached the server
    done: simpy.Event | None = None  # triggered once the server has applied the round's push


@dataclass
class Server:
    """theta, DN's momentum ``m`` and buffer ``Delta``, and the replicas (``t``, the arrivals so far, is
    the parameter server's version)."""

    params: Params
    momentum: Params
    buffer: Params
    replicas: list[Replica] = field(default_factory=list)


@register(AsyncLocalSGD, timing_only=True)
def start(sim: Simulation, config: AsyncLocalSGD):
    m = config.replica_workers
    inner = optimizer_for(config)
    inner_step = make_sum_step(inner)
    server = ParameterServer(sim, sim.init_params)
    zeros = None if sim.timing_only else jax.tree.map(jnp.zeros_like, sim.init_params)
    glob = Server(sim.init_params, zeros, zeros)
    glob.replicas = [
        Replica(sim.workers[i : i + m], sim.init_params, inner.init(sim.init_params), sim.init_params)
        for i in range(0, len(sim.workers), m)
    ]
    n_period, lr, beta = config.period(len(glob.replicas)), config.outer_lr, config.outer_momentum
    c = config.momentum_activation

    def round_steps(rep: Replica) -> int:
        """The replica's inner steps this round: H, or DyLU's share of it at the replicas' speeds now."""
        if not config.dynamic_local_updates:
            return config.inner_steps
        now, model = sim.now, sim.compute_model

        def step_s(r: Replica) -> float:  # a synchronous replica steps at its slowest worker's pace
            return max(model.expected_step_s(w.index, now) for w in r.members)

        return local_steps(config.inner_steps, step_s(rep), min(step_s(r) for r in glob.replicas))

    def apply(rep: Replica) -> None:
        """The server's step with the replica's pseudo-gradient (Algorithm 3), then it reads theta."""
        t = server.version  # the arrivals before this one
        if not sim.timing_only:
            g = outer_gradient(rep.read, rep.params)  # how far the replica moved
            state = (glob.params, glob.momentum, glob.buffer, g, lr, beta, c, float(n_period))
            if (t + 1) % n_period:
                glob.params, glob.buffer = delayed_step(*state)
            else:
                glob.params, glob.momentum, glob.buffer = momentum_step(*state)
            rep.params = rep.read = glob.params
        sim.applied([(w.index, rep.version) for w in rep.members], server.version)
        server.version += 1
        rep.version, rep.round_steps = server.version, round_steps(rep)

    def inner_gradient(w: Worker, rep: Replica):
        if len(rep.members) == 1:
            return (yield from sim.compute(w, rep.params))
        return (yield from sim.backprop_allreduce(w, rep.params, rep.members))

    def push(w: Worker, rep: Replica):
        """The worker's shard of the pseudo-gradient to the server; the last shard in makes the update."""
        if rep.done is None:
            rep.done = sim.env.event()
        done = rep.done
        yield from server.push(w, sim.param_bytes / m)
        rep.shards += 1
        if rep.shards == len(rep.members):
            rep.shards, rep.done = 0, None
            apply(rep)
            done.succeed()
        elif not done.triggered:
            yield from sim.wait_for(w.name, done)
        yield from server.fetch(w, sim.param_bytes / m)

    def worker(w: Worker):
        rep = glob.replicas[w.index // m]
        steps = 0
        while True:
            for _ in range(rep.round_steps):
                total = yield from inner_gradient(w, rep)
                if rep.steps == steps:  # the first of the replica's workers back applies the replica's step
                    if total is not None:
                        rep.params, rep.opt = inner_step(rep.params, rep.opt, total.grad, total.count)
                    rep.steps += 1
                steps += 1
            yield from push(w, rep)

    for rep in glob.replicas:
        rep.round_steps = round_steps(rep)
    for w in sim.workers:
        sim.process(worker(w))
    return lambda: glob.params
