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

Streaming DiLoCo (Douillard et al., 2025) is three options (all off by default):

    fragments: P       the layers in P strided fragments (strategies/_streaming.py); outer step u is
                       of fragment u mod P, started after inner step H + u H/P: fragment p every H
                       steps, offset by p H/P, so 1/P of the model crosses the links at a time
    overlap_steps: tau the outer all-reduce goes on while the replica takes tau more inner steps;
                       then Delta_p, theta_p <- OuterOpt_p(theta_p, Delta_p) and
    mixing: alpha      theta_i,p <- alpha theta_i,p + (1 - alpha) theta_p   (0: replaced)

with ``delta_i,p = theta_p - theta_i,p`` at the start of the outer step and OuterOpt's state
per fragment. ``P = 1, tau = 0, alpha = 0`` is Algorithm 1 above. ``outer_compression`` rounds
each delta_i before the all-reduce (strategies/_outer_exchange.py).

Eager updates (Kale, Douillard and Donchev, 2025, arXiv 2502.12996, "Eager Updates For Overlapped
Communication and Computation in DiLoCo"; ``eager: true``): the outer all-reduce of step t is
overlapped with the whole next inner phase, and each replica steps at once with its own fresh outer
gradient in place of the others' it does not have yet. The paper's eager outer step, of replica i:

    delta_i(t)   <- theta_i(t-1) - theta_i,inner(t)              (its own theta: replicas' differ)
    start the all-reduce of delta_i(t) (Delta(t) arrives during the next inner phase)
    wait for Delta(t-1) = (1/k) sum_j delta_j(t-1)               (started one outer step earlier)
    Delta~_i(t)  <- (1/k) delta_i(t) + Delta(t-1) - (1/k) delta_i(t-1)
                  = (1/k) (delta_i(t) + sum_{j != i} delta_j(t-1))   (Delta(0) = 0)
    theta_i(t)   <- OuterOpt_i(theta_i(t-1), Delta~_i(t))         (OuterOpt's state per replica)

so every replica's outer gradient enters each replica's theta once: its own at once, the others' one
outer step late. With Streaming's options, "one outer step" is the fragment's previous one (t - P),
and the eager step is merged ``overlap_steps`` inner steps after the outer step starts, with
``mixing`` (tau = 0: at once, the paper's own setting). With m workers a replica the all-reduce sums
every worker's delta: Delta~_i = (m delta_i(t) + total(t-P) - m delta_i(t-P)) / (k m). The run's
parameters are replica 0's theta.

Faults: a replica's all-reduce and the outer one go on without a crashed worker once it is
given up on (``faults.sync_timeout_s``); the outer mean is then over the workers that took
part.
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass, field
from typing import Literal

import jax
import jax.numpy as jnp
import simpy
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
from fred.scenario.schema import GradientSteps, Scenario
from fred.simulation.engine import Simulation, Worker
from strategies._fields import bounded, refuse_out_of_bounds
from strategies._outer_exchange import OuterCompressed, codec_work, outer_allreduce
from strategies._replicas import check_replicas, replica_workers_field
from strategies._streaming import Schedule, fragment_plan, merged, part


class DiLoCo(OuterCompressed):
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
    replica_workers: int = replica_workers_field()
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
    fragments: int = bounded(
        1,
        ge=1,
        fix="use at least 1 fragment (1: the whole model at once, DiLoCo's)",
        description="P: Streaming DiLoCo's fragments, layer j in fragment j mod P, one synchronised every "
        "inner_steps / P inner steps; must divide the model's layers (and inner_steps)",
    )
    overlap_steps: int = bounded(
        0,
        ge=0,
        fix="use 0 or more inner steps (0: each outer all-reduce blocks)",
        description="tau: inner steps a replica takes while an outer all-reduce is under way, below "
        "inner_steps (Streaming DiLoCo's overlap; 0: it waits for it)",
    )
    eager: bool = Field(
        default=False,
        description="eager updates (Kale et al., 2025): each replica takes its outer step at once with "
        "its own outer gradient and the others' of the fragment's previous outer step, whose all-reduce "
        "is overlapped with a whole inner phase (docs/strategies.md#eager-updates)",
    )
    mixing: float = bounded(
        0.0,
        ge=0,
        le=1,
        fix="use a mixing factor in [0, 1] (0: the outer update replaces the fragment, the paper's 0.5 "
        "mixes half)",
        description="alpha: a merged fragment is alpha times the replica's own plus (1 - alpha) times "
        "the outer update (0: replaced)",
    )

    _bounds = refuse_out_of_bounds()

    def check(self, scenario: Scenario) -> None:
        check_replicas(self.replica_workers, scenario.cluster.workers)
        if self.overlap_steps >= self.inner_steps:
            raise ValueError(
                f"strategy.overlap_steps is {self.overlap_steps} but strategy.inner_steps is "
                f"{self.inner_steps}: an outer all-reduce must end before its fragment's next one starts; "
                f"use an overlap_steps below {self.inner_steps}"
            )
        if self.inner_steps % self.fragments:
            raise ValueError(
                f"strategy.inner_steps is {self.inner_steps} but strategy.fragments is {self.fragments}, "
                f"which does not divide it: fragment p is offset by p inner_steps / fragments; use "
                f"inner_steps a multiple of {self.fragments}, or fragments a divisor of {self.inner_steps}"
            )
        if self.eager and scenario.faults.worker_crash:
            raise ValueError(
                "strategy.eager is true but faults.worker_crash crashes workers: an eager step takes each "
                "replica's own share out of the delayed mean, which an all-reduce that went on without a "
                "crashed worker does not hold; use eager: false with worker crashes, or drop them"
            )

    def buckets_gradients(self) -> bool:
        return (
            self.replica_workers > 1
        )  # a replica all-reduces each inner gradient, in buckets when the scenario has them

    def model_copies_per_worker(self) -> int:
        # its replica and gradient, theta, the outer gradient it sends and the sum it receives, the outer
        # momentum; eager: and its outer gradient kept until the fragment's next outer step
        return 5 + (self.outer_momentum > 0) + self.eager

    def schedule(self) -> Schedule:
        return Schedule(self.inner_steps, self.fragments, self.overlap_steps)

    def gradient_steps(self, scenario: Scenario, updates: int) -> GradientSteps:
        # an update is an outer step, of a fragment: one every inner_steps / fragments steps of every worker,
        # after the first inner_steps, and merged overlap_steps later
        steps = self.schedule().merged_after(updates - 1) if updates else 0
        return GradientSteps(steps * scenario.cluster.workers, "a smaller strategy.inner_steps")


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


@op("strategies.diloco:eager_gradient")
@jax.jit
def eager_gradient(own: Params, total: Params, own_before: Params, m: int, n: int) -> Params:
    """``Delta~_i = (m delta_i(t) + total(t-P) - m delta_i(t-P)) / n``: the replica's fresh outer
    gradient and the others' delayed ones (``total``: the all-reduced sum over ``n`` workers, ``m``
    of them the replica's)."""
    return jax.tree.map(lambda a, s, b: (m * a + (s - m * b)) / n, own, total, own_before)


@dataclass
class Replica:
    """One model replica: its workers, its parameters and inner optimizer state (kept across outer steps)."""

    members: list[Worker]
    params: Params
    opt: OptState
    steps: int = 0  # inner steps applied since the run began
    deltas: dict[int, Params | None] = field(default_factory=dict)  # outer step -> its outer gradient
    merged: int = -1  # the last outer step merged into ``params``
    theta: Params | None = None  # eager: the replica's own theta
    outer: list[OptState] = field(default_factory=list)  # eager: its OuterOpt's state of each fragment


@dataclass
class OuterState:
    """theta and OuterOpt's state of each fragment, the same on every worker; ``version`` counts outer
    steps."""

    params: Params
    opt: list[OptState]
    version: int = 0
    replicas: list[Replica] = field(default_factory=list)


@register(DiLoCo, timing_only=True)
def start(sim: Simulation, config: DiLoCo):
    m, schedule, codec = config.replica_workers, config.schedule(), config.outer_codec()
    names, raw_bytes = fragment_plan(sim.init_params, config.fragments, sim.param_bytes)
    inner, outer = optimizer_for(config), outer_optimizer(config)
    inner_step, outer_step = make_sum_step(inner), make_step(outer)
    glob = OuterState(sim.init_params, [outer.init(part(sim.init_params, f)) for f in names])
    glob.replicas = [
        Replica(sim.workers[i : i + m], sim.init_params, inner.init(sim.init_params))
        for i in range(0, len(sim.workers), m)
    ]
    for rep in glob.replicas if config.eager else ():
        rep.theta, rep.outer = sim.init_params, [outer.init(part(sim.init_params, f)) for f in names]

    def inner_gradient(w: Worker, rep: Replica):
        """A gradient of the replica's batch: the worker's own, or all-reduced over the replica's workers."""
        if len(rep.members) == 1:
            return (yield from sim.compute(w, rep.params))
        return (yield from sim.backprop_allreduce(w, rep.params, rep.members))

    def send(w: Worker, rep: Replica, t: int):
        """Outer step ``t``'s outer gradient of the replica for its fragment, rounded by the codec (if
        any; its compress time on the worker), computed once for the replica's workers."""
        p = schedule.fragment(t)
        if t not in rep.deltas:
            delta = None
            if not sim.timing_only:
                theta = rep.theta if config.eager else glob.params
                delta = outer_gradient(part(theta, names[p]), part(rep.params, names[p]))
                delta = delta if codec is None else codec.roundtrip(delta)
            rep.deltas[t] = delta
        yield from codec_work(sim, w, raw_bytes[p], "compress", config)

    def exchange(w: Worker, rep: Replica, t: int):
        p = schedule.fragment(t)
        return outer_allreduce(sim, w, raw_bytes[p], len(names[p]), rep.deltas[t], codec)

    def finish_outer(t: int, total: Params | None) -> None:
        """Delta(t) <- the mean outer gradient; theta(t) <- OuterOpt(theta(t-1), Delta(t)) for the
        fragment. Once: every worker's all-reduce gives the same sum."""
        if glob.version != t:
            return
        members = sim.participants(sim.workers)  # all, unless a crashed worker was left out
        if total is not None:  # None in a timing-only run: the same schedule, no numbers
            p = schedule.fragment(t)
            new, glob.opt[p] = outer_step(
                part(glob.params, names[p]), glob.opt[p], divide(total, len(members))
            )
            glob.params = new if len(names) == 1 else {**glob.params, **new}
        sim.applied([(i, t) for i in members], t)
        glob.version += 1

    def merge(rep: Replica, t: int) -> None:
        """The replica's fragment merged with theta(t) (replaced with ``mixing`` 0); once a replica."""
        if rep.merged >= t:
            return
        rep.merged = t
        del rep.deltas[t]  # the inner optimizer's state stays the replica's
        if not sim.timing_only:
            rep.params = merged(rep.params, glob.params, names[schedule.fragment(t)], config.mixing)

    def eager_merge(rep: Replica, t: int, total: Params | None) -> None:
        """The replica's eager outer step ``t`` (``total``: the all-reduced sum of the fragment's
        previous outer step, None before its first) and its merge; once a replica."""
        if rep.merged >= t:
            return
        rep.merged = t
        own, before = rep.deltas[t], rep.deltas.pop(t - config.fragments, None)
        if sim.timing_only:
            return
        p = schedule.fragment(t)
        if total is None:  # Delta(0) = 0: nothing of the others yet
            total = before = jax.tree.map(jnp.zeros_like, own)
        step = eager_gradient(own, total, before, m, len(sim.workers))
        new, rep.outer[p] = outer_step(part(rep.theta, names[p]), rep.outer[p], step)
        rep.theta = new if len(names) == 1 else {**rep.theta, **new}
        rep.params = merged(rep.params, rep.theta, names[p], config.mixing)

    def eager_done(w: Worker, rep: Replica, t: int, before: simpy.Process | None):
        """Outer step ``t`` of an eager replica: the fragment's previous all-reduce awaited (if any),
        then its step."""
        total = None
        if before is not None:
            total = yield from sim.wait_for(w.name, before)
            yield from codec_work(sim, w, raw_bytes[schedule.fragment(t)], "decompress", config)
        if glob.version == t:
            sim.applied([(i, t) for i in sim.participants(sim.workers)], t)
            glob.version += 1
        eager_merge(rep, t, total)

    def outer_done(w: Worker, rep: Replica, t: int, total: Params | None):
        yield from codec_work(sim, w, raw_bytes[schedule.fragment(t)], "decompress", config)
        finish_outer(t, total)
        merge(rep, t)

    def worker(w: Worker):
        rep = glob.replicas[w.index // m]
        steps, in_flight = 0, deque()  # outer steps started and not merged yet, and their all-reduces
        delayed: dict[
            int, simpy.Process
        ] = {}  # eager: merged outer steps' all-reduces, awaited one outer step on
        while True:
            total = yield from inner_gradient(w, rep)
            if rep.steps == steps:  # the first of the replica's workers back applies the replica's step
                if total is not None:
                    rep.params, rep.opt = inner_step(rep.params, rep.opt, total.grad, total.count)
                rep.steps += 1
            steps += 1
            t = schedule.started_after(steps)
            if t is not None:
                yield from send(w, rep, t)
            if t is not None and not schedule.overlap_steps and not config.eager:  # it blocks: DiLoCo's
                yield from outer_done(w, rep, t, (yield from exchange(w, rep, t)))
            elif t is not None:  # it goes on while the replica trains
                in_flight.append((t, sim.process(exchange(w, rep, t))))
            while in_flight and schedule.merged_after(in_flight[0][0]) == steps:
                t, reduce = in_flight.popleft()
                if config.eager:
                    delayed[t] = reduce
                    yield from eager_done(w, rep, t, delayed.pop(t - config.fragments, None))
                else:
                    yield from outer_done(w, rep, t, (yield from sim.wait_for(w.name, reduce)))

    for w in sim.workers:
        sim.process(worker(w))
    return (lambda: glob.replicas[0].theta) if config.eager else (lambda: glob.params)
