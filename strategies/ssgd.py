"""SSGD: synchronous data-parallel SGD (the papers' SSGD, PSGD and AR-SGD baselines).

    every worker, each round t:
        g_i <- gradient on its shard of global batch t, at theta_t
        aggregate: g = sum_i g_i / (n * b)      (parameter server, or ring all-reduce)
        theta_{t+1} <- theta_t - lr * g         (the same update on every replica)

Gradient *sums* are aggregated by the fixed pairwise tree, so with iid sharding
n workers of batch b give bit for bit the parameters of SGD with batch n*b.
"""

from __future__ import annotations

from typing import Literal

import simpy
from pydantic import Field

from fred.engine import Simulation, Worker
from fred.numerics import mean_grad, sum_grads
from fred.optim import make_step, sgd
from fred.scenario import StrategyConfig
from fred.server import ParameterServer
from strategies.registry import register


class SSGD(StrategyConfig):
    name: Literal["ssgd"] = "ssgd"
    lr: float = Field(default=0.1, gt=0)
    aggregation: Literal["ps", "allreduce"] = "allreduce"


@register(SSGD)
def start(sim: Simulation, config: SSGD):
    opt = sgd(config.lr)
    step = make_step(opt)
    if config.aggregation == "ps":
        return _on_parameter_server(sim, opt, step)
    return _on_allreduce(sim, opt, step)


def _on_parameter_server(sim: Simulation, opt, step):
    server = ParameterServer(sim, sim.init_params)
    state = {"opt": opt.init(server.params), "round_done": sim.env.event()}
    inbox = simpy.Store(sim.env)
    n = len(sim.workers)

    def aggregator():
        while True:
            got = []
            for _ in range(n):
                got.append((yield inbox.get()))
            got.sort(key=lambda item: item[0])
            total = sum_grads([g for _, g in got])
            server.params, state["opt"] = step(server.params, state["opt"], mean_grad(total))
            sim.applied([(i, server.version) for i, _ in got], server.version)
            server.version += 1
            done, state["round_done"] = state["round_done"], sim.env.event()
            done.succeed()

    def worker(w: Worker):
        params = server.params
        while True:
            g = yield from sim.compute(w, params)
            yield from server.push(w)
            round_done = state["round_done"]
            yield inbox.put((w.index, g))
            yield from sim.wait_for(w.name, round_done)
            params, _ = yield from server.fetch(w)

    sim.process(aggregator())
    for w in sim.workers:
        sim.process(worker(w))
    return lambda: server.params


def _on_allreduce(sim: Simulation, opt, step):
    rounds = {0: (sim.init_params, opt.init(sim.init_params))}  # version -> replica state, shared

    def next_round(version: int, total) -> None:
        # Every replica applies the identical update; compute it once, share the result.
        if version + 1 not in rounds:
            params, opt_state = rounds.pop(version)
            rounds[version + 1] = step(params, opt_state, mean_grad(total))
            sim.applied([(i, version) for i in range(len(sim.workers))], version)

    def worker(w: Worker):
        version = 0
        while True:
            g = yield from sim.compute(w, rounds[version][0])
            total = yield from sim.allreduce(sim.workers, w, sim.param_bytes, g)
            next_round(version, total)
            version += 1

    for w in sim.workers:
        sim.process(worker(w))
    return lambda: rounds[max(rounds)][0]
