"""Local SGD (HPSGD paper, Algorithm 1): local steps, then average the *parameters*.

    every worker, each round:
        repeat sync_every (the paper's gamma) times:
            g <- gradient on its shard at x_i;   x_i <- x_i - lr * g
        x_i <- (sum_j x_j) / n              (ring all-reduce of the parameters)

One update in the records is one averaging round (all workers contribute, staleness 0).
With ``sync_every: 1`` it is AR-SGD up to float32 rounding: it averages parameters
``(sum_j (x - lr g_j)) / n`` where AR-SGD averages gradients ``x - lr (sum_j g_j) / n``.

With ``outer_compression`` each worker sends its change since the last average, rounded by the
codec, and the average is ``x - (sum_j Q(x - x_j)) / n`` (strategies/_outer_exchange.py): rounding
the parameters themselves would round the model.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from fred.numerics.gradients import divide
from fred.numerics.models import Params
from fred.numerics.optim import make_sum_step, optimizer_for
from fred.scenario.registry import register
from fred.scenario.schema import GradientSteps, Scenario
from fred.simulation.engine import Simulation, Worker
from strategies._outer_exchange import OuterCompressed, change, compressed_allreduce, leaf_count, recentre


class LocalSGD(OuterCompressed):
    name: Literal["local_sgd"] = "local_sgd"
    applies_optimizer = True
    lr: float = Field(default=0.1, gt=0)
    sync_every: int = Field(default=8, ge=1, description="local steps between averaging rounds (gamma)")

    def model_copies_per_worker(self) -> int:
        return 4  # a replica per worker, its gradient, and the copies it sends and receives

    def gradient_steps(self, scenario: Scenario, updates: int) -> GradientSteps:
        # an update is an averaging round: sync_every local steps of every worker
        return GradientSteps(
            updates * self.sync_every * scenario.cluster.workers, "a smaller strategy.sync_every"
        )


@register(LocalSGD, timing_only=True)
def start(sim: Simulation, config: LocalSGD):
    opt, codec = optimizer_for(config), config.outer_codec()
    step = make_sum_step(opt)
    averaged = {0: sim.init_params}  # round -> the averaged parameters every worker holds
    tensors = leaf_count(sim.init_params)

    def average(round_: int, total: Params | None, n: int) -> Params | None:
        if total is None:  # None: timing only
            return None
        return divide(total, n) if codec is None else recentre(averaged[round_], total, n)

    def sent(round_: int, params: Params | None) -> Params | None:
        """What a worker all-reduces: its parameters, or its change since the last average, rounded."""
        if params is None or codec is None:
            return params
        return codec.roundtrip(change(averaged[round_], params))

    def finish_round(round_: int, total: Params) -> Params:
        if round_ + 1 not in averaged:  # every replica gets the same average: compute it once
            members = sim.participants(sim.workers)  # all, unless a crashed worker was left out
            averaged[round_ + 1] = average(round_, total, len(members))
            averaged.pop(round_ - 1, None)
            sim.applied([(i, round_) for i in members], round_)
        return averaged[round_ + 1]

    def worker(w: Worker):
        params, round_ = sim.init_params, 0
        opt_state = opt.init(params)  # the worker's own: kept across rounds, never averaged
        while True:
            for _ in range(config.sync_every):
                g = yield from sim.compute(w, params)
                if g is not None:  # None in a timing-only run: the same schedule, no numbers
                    params, opt_state = step(params, opt_state, g.grad, g.count)
            sending = sent(round_, None if sim.timing_only else params)
            total = yield from compressed_allreduce(sim, w, sim.param_bytes, tensors, sending, config)
            params = finish_round(round_, total)
            round_ += 1

    for w in sim.workers:
        sim.process(worker(w))
    return lambda: averaged[max(averaged)]
