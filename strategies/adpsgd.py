"""AD-PSGD (Lian et al. 2018; the SGP paper's baseline): asynchronous pairwise averaging.

    every node i, forever, at its own pace:
        g <- gradient at x_i as read when the step began
        pick a random neighbour j; atomically: x_i, x_j <- (x_i + x_j) / 2
        x_i <- x_i - lr * g                      (x_i may have been averaged meanwhile)

That is Lian et al. (2018)'s order (``order: average_then_step``, the default): the
gradient is taken at the model read before the average and applied to the averaged one.
``order: step_then_average`` applies it first and then averages, so the neighbour gets
half of this node's step. The exchange's timing is the same; the update is recorded when
the step is applied (after the exchange by default), so its staleness counts the average.

The exchange locks both nodes (lower index first, so two exchanges never deadlock) and
moves one parameter copy each way. A node's version counts its gradient steps and the
averages it took part in, so an update's staleness is how many times the node's model
changed while the gradient was computed.

Faults: a node never picks a neighbour it has given up on (``faults.sync_timeout_s``
after its crash). A node that picks a crashed neighbour before then waits until it is
given up on and skips that exchange, as does one whose neighbour dies mid-exchange.
The global model is the average over the nodes still running.
"""

from __future__ import annotations

from typing import Literal

import jax
import simpy
from pydantic import Field

from fred.numerics import rng
from fred.numerics.gradients import divide, tree_sum
from fred.numerics.models import Params
from fred.numerics.optim import make_sum_step, optimizer_for
from fred.numerics.tape import op
from fred.scenario.registry import register
from fred.scenario.schema import GradientSteps, Scenario, StrategyConfig
from fred.simulation.engine import Simulation, Worker


class ADPSGD(StrategyConfig):
    name: Literal["adpsgd"] = "adpsgd"
    applies_optimizer = True
    lr: float = Field(default=0.1, ge=0)
    topology: Literal["ring", "complete"] = "ring"
    order: Literal["average_then_step", "step_then_average"] = Field(
        default="average_then_step",
        description="average_then_step: average with the neighbour, then apply the "
        "gradient taken before (Lian et al. 2018); step_then_average: apply it, then average",
    )

    def model_copies_per_worker(self) -> int:
        return 4  # a replica per worker, its gradient, and the copies it sends and receives

    def gradient_steps(self, scenario: Scenario, updates: int) -> GradientSteps:
        return GradientSteps(updates)  # a node's gradient applied to its own model is an update


@op("strategies.adpsgd:pair_average")
@jax.jit
def pair_average(a: Params, b: Params) -> Params:
    return jax.tree.map(lambda x, y: (x + y) * 0.5, a, b)


@register(ADPSGD)
def start(sim: Simulation, config: ADPSGD):
    n = len(sim.workers)
    opt = optimizer_for(config)
    step = make_sum_step(opt)
    models = [sim.init_params] * n
    opt_states = [opt.init(sim.init_params)] * n  # each node's own: an exchange averages models, not these
    versions = [0] * n
    locks = [simpy.Resource(sim.env, capacity=1) for _ in range(n)]

    def neighbours(i: int) -> list[int]:
        if config.topology == "complete":
            return sim.faults.live([j for j in range(n) if j != i])
        return sim.faults.live(sorted({(i - 1) % n, (i + 1) % n} - {i}))

    def exchange(w: Worker, j: int):
        i = w.index
        while j in sim.faults.down and not sim.faults.excluded(j):  # it does not answer
            sim.faults.blocked([j], "AD-PSGD's pairwise exchange")
            yield from sim.wait_for(w.name, sim.faults.wakeup())  # type: ignore[arg-type]
        if j in sim.faults.down:
            return
        first, second = sorted((i, j))
        with locks[first].request() as a:
            yield from sim.wait_for(w.name, a)
            with locks[second].request() as b:
                yield from sim.wait_for(w.name, b)
                if j in sim.faults.down:  # it died while the locks were awaited: nobody answers
                    return
                there = sim.process(sim.send(w.name, sim.workers[j].name, sim.param_bytes))
                back = sim.process(sim.send(sim.workers[j].name, w.name, sim.param_bytes))
                yield sim.env.all_of([there, back])
                if j in sim.faults.down:  # it died mid-exchange: no average
                    return
                models[i] = models[j] = pair_average(models[i], models[j])
                versions[i] += 1
                versions[j] += 1

    def node(w: Worker):
        choose = rng.stream(sim.seed, "adpsgd", w.index)

        def apply(g, read: int) -> None:
            models[w.index], opt_states[w.index] = step(models[w.index], opt_states[w.index], g.grad, g.count)
            sim.applied([(w.index, read)], versions[w.index])
            versions[w.index] += 1

        while True:
            read = versions[w.index]
            g = yield from sim.compute(w, models[w.index])
            if config.order == "step_then_average":
                apply(g, read)
            peers = neighbours(w.index)
            if peers:
                yield from exchange(w, peers[int(choose.integers(len(peers)))])
            if config.order == "average_then_step":
                apply(g, read)

    for w in sim.workers:
        sim.process(node(w))

    def average() -> Params:
        running = [m for i, m in enumerate(models) if i not in sim.faults.down] or models
        return divide(tree_sum(running), len(running)) if len(running) > 1 else running[0]

    return average
