"""ASGD: asynchronous SGD on a parameter server (Dean et al.; the FASGD paper's baseline).

    worker, forever:
        g <- gradient at the parameters it last fetched (version j)
        push g;  server: theta <- theta - lr * g   (server at version i: staleness i - j)
        fetch theta and its version
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from fred.engine import Simulation, Worker
from fred.optim import make_sum_step, sgd
from fred.scenario import StrategyConfig
from fred.server import ParameterServer
from strategies.registry import register


class ASGD(StrategyConfig):
    name: Literal["asgd"] = "asgd"
    lr: float = Field(default=0.1, gt=0)


@register(ASGD)
def start(sim: Simulation, config: ASGD):
    opt = sgd(config.lr)
    step = make_sum_step(opt)
    server = ParameterServer(sim, sim.init_params)
    opt_state = {"state": opt.init(server.params)}

    def apply(w: Worker, g, version_read: int) -> None:
        server.params, opt_state["state"] = step(server.params, opt_state["state"], g.grad, g.count)
        sim.applied([(w.index, version_read)], server.version)
        server.version += 1

    def worker(w: Worker):
        params, version = server.params, server.version  # every worker starts from the seed's init
        while True:
            g = yield from sim.compute(w, params)
            yield from server.push(w)
            apply(w, g, version)
            params, version = yield from server.fetch(w)

    for w in sim.workers:
        sim.process(worker(w))
    return lambda: server.params
