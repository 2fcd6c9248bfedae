"""SSGD: synchronous data-parallel SGD (the papers' SSGD, PSGD and AR-SGD baselines).

    every worker, each round t:
        g_i <- gradient on its shard of global batch t, at theta_t
        aggregate: g = sum_i g_i / (n * b)      (parameter server, or ring all-reduce)
        theta_{t+1} <- theta_t - lr * g         (the same update on every replica)

Gradient *sums* are aggregated by the global batch's pairwise tree (docs/determinism.md),
so with iid sharding n workers of any batch b give bit for bit the parameters of SGD with
batch n*b.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from fred.numerics.optim import make_sum_step, optimizer_for
from fred.scenario.registry import register
from fred.scenario.schema import GradientSteps, Scenario, StrategyConfig
from fred.simulation.engine import Simulation, Worker
from strategies.sasgd import PS_FAULTS, run_parameter_server, sasgd_rule

ALLREDUCE_FAULTS = frozenset({"rejoin"})


class SSGD(StrategyConfig):
    name: Literal["ssgd"] = "ssgd"
    applies_optimizer = True
    lr: float = Field(default=0.1, gt=0)
    aggregation: Literal["ps", "allreduce"] = "allreduce"

    def fault_support(self) -> frozenset[str]:
        return PS_FAULTS if self.aggregation == "ps" else ALLREDUCE_FAULTS

    def buckets_gradients(self) -> bool:
        return self.aggregation == "allreduce"

    def gradient_steps(self, scenario: Scenario, updates: int) -> GradientSteps:
        return GradientSteps(updates * scenario.cluster.workers)  # a round: every worker's gradient


@register(SSGD, timing_only=True)
def start(sim: Simulation, config: SSGD):
    if config.aggregation == "ps":
        return _on_parameter_server(sim, config)
    opt = optimizer_for(config)
    return run_allreduce_sgd(sim, opt, make_sum_step(opt))


def _on_parameter_server(sim: Simulation, config: SSGD):
    # The server waits for all n gradients and applies their plain average: n-softsync
    # with n_soft = 1 and no staleness scaling, so the server loop is SASGD's.
    n = len(sim.workers)
    return run_parameter_server(sim, sasgd_rule(optimizer_for(config), staleness_aware=False), c=n)


def run_allreduce_sgd(sim: Simulation, opt, step):
    """Replicas that all-reduce every gradient and apply the same update (shared with arsgd).

    Faults: the all-reduce goes on without a crashed worker once it is given up on
    (``faults.sync_timeout_s``), averaging over the gradients that took part. A rejoining
    worker takes the current replica: in lock-step training there is no other to resume.
    """
    rounds = {0: (sim.init_params, opt.init(sim.init_params))}  # version -> replica state, shared
    waiting: list = []  # rejoined workers' events: the replica they start from is being all-reduced

    def next_round(version: int, total) -> None:
        # Every replica applies the identical update; compute it once, share the result.
        if version + 1 not in rounds:
            params, opt_state = rounds.pop(version)
            if total is not None:  # None in a timing-only run: no numbers, the same schedule
                params, opt_state = step(params, opt_state, total.grad, total.count)
            rounds[version + 1] = (params, opt_state)
            sim.applied([(i, version) for i in sim.participants(sim.workers)], version)
            for event in waiting:
                event.succeed()
            waiting.clear()

    def worker(w: Worker, version: int = 0):
        while True:
            total = yield from sim.backprop_allreduce(w, rounds[version][0], sim.workers)
            next_round(version, total)
            version += 1

    def rejoin(w: Worker):
        # It joins the first all-reduce not yet started; while the one before is in flight,
        # the replica that all-reduce makes is the one to start from (the current one was
        # dropped as the others moved on).
        version = sim.next_collective(sim.workers, w)
        while version not in rounds:
            waiting.append(sim.env.event())
            yield from sim.wait_for(w.name, waiting[-1])
        yield from worker(w, version)

    sim.faults.on_rejoin(lambda w, _: sim.process(rejoin(w), w))
    for w in sim.workers:
        sim.process(worker(w))
    return lambda: rounds[max(rounds)][0]
