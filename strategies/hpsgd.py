"""HPSGD (Zhou et al., Algorithms 2 and 3): local training overlapped with synchronisation.

Two processes per worker share ``{status, counter, replica, acc_grad}``:

    Pt (training), forever:
        [barrier: wait until every worker has finished its previous step]
        if counter == 0: replica <- copy of the global model
        g <- gradient on the next batch at replica;  acc_grad += g
        if status == syncing: replica <- replica - lr * g;  counter += 1
        else:                 status <- syncing; start Ps

    Ps (synchronisation), once per start:
        if a previous round's sum exists: W <- W - lr * sum / n       (Eq. 1; applied as Ps starts)
        take acc_grad (and start a fresh one), all-reduce it over the workers
        keep the sum for the next round; counter <- 0; status <- idle

The global update is always one synchronisation behind its all-reduce. There is no
gamma: Ps runs whenever it can.

``barrier`` (default false): the paper's timeline has workers "start to feed-forward at the
same time" (section 1, Fig. 1), and the authors' code calls ``dist.barrier()`` after every
backward pass. With ``barrier: true`` Pt waits there for every worker (the grey waiting
phase of Fig. 1); Ps never waits for it, and it never waits for Ps. With ``barrier: false``
Pt never waits for anyone. SSGD and Local SGD have no such option: SSGD's all-reduce already
starts every worker's step together, Local SGD's every round, and between its averagings a
per-step barrier would only reorder the turns of processes sharing a GPU, never idle it.

``barrier_waits_for_sync`` (default false, needs ``barrier``): the authors' code as it runs
on gloo, whose barrier first waits for every collective queued before it, so Pt also waits
for its Ps:

    Pt, with barrier_waits_for_sync:
        g <- gradient at replica
        wait for every worker;  syncing <- (status == syncing)
        wait for this worker's Ps to finish
        then lines 5-14 of Algorithm 2 as ``syncing`` says (read before that wait)

A worker then synchronises every other step. The code reads the status after each backward
pass; the processes sharing a GPU finish their steps together (time slicing), where fred's
take whole turns, so the status is read once the last worker has finished: every worker
then takes the same branch, as the code's collectives need.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import simpy
from pydantic import Field, model_validator

from fred.numerics.gradients import GradSum, sum_grads
from fred.numerics.models import Params
from fred.numerics.optim import OptState, make_sum_step, optimizer_for
from fred.scenario.registry import register
from fred.scenario.schema import GradientSteps, Scenario, StrategyConfig, speed_spans
from fred.simulation.engine import Simulation, Worker


class HPSGD(StrategyConfig):
    name: Literal["hpsgd"] = "hpsgd"
    applies_optimizer = True
    lr: float = Field(default=0.1, gt=0)
    barrier: bool = Field(
        default=False,
        description="Pt waits for every worker before each step (the paper: workers start to feed-forward "
        "at the same time); false: Pt never waits",
    )
    barrier_waits_for_sync: bool = Field(
        default=False,
        description="the barrier also waits for the worker's synchronisation in flight, with the status read "
        "before it (the authors' code on gloo, whose barrier waits for earlier collectives); needs barrier",
    )

    @model_validator(mode="after")
    def _sync_wait_needs_the_barrier(self) -> HPSGD:
        if self.barrier_waits_for_sync and not self.barrier:
            raise ValueError("barrier_waits_for_sync: true is a kind of barrier; set barrier: true with it")
        return self

    def model_copies_per_worker(self) -> int:
        return 4  # a replica per worker, its gradient, and the copies it sends and receives

    def gradient_steps(self, scenario: Scenario, updates: int) -> GradientSteps:
        # There is no gamma: Pt steps for as long as Ps all-reduces, so a round is one step, and as many more
        # as fit in the all-reduce. U updates take U + 1 rounds (the update is one synchronisation behind).
        workers = range(scenario.cluster.workers)
        step_s = min(
            step_s for w in workers for _, step_s, _ in speed_spans(scenario, w)
        )  # jitter aside: steps on average
        per_round = 1 + allreduce_s_at_least(scenario) / step_s
        return GradientSteps(
            (updates + 1) * per_round * scenario.cluster.workers,
            "slower steps against the all-reduce (Pt steps while Ps all-reduces)",
        )


def allreduce_s_at_least(scenario: Scenario) -> float:
    """The shortest a ring all-reduce of the workload's message can take, ``2 (p - 1) alpha +
    2 (p - 1) / p  n beta`` over the fastest link the cluster has, contention and the
    reduction's cost aside (a message of unknown size counts as none)."""
    p = scenario.cluster.workers
    network = scenario.network
    links = [(network.latency_s, network.bandwidth_bps * network.efficiency)]
    if scenario.cluster.devices_per_node * scenario.cluster.workers_per_device > 1:
        links.append((network.intra_node.latency_s, network.intra_node.bandwidth_bps))
    alpha, bandwidth = min(a for a, _ in links), max(b for _, b in links)
    return 2 * (p - 1) * alpha + 2 * (p - 1) / p * (scenario.workload.resolved_param_bytes() or 0) / bandwidth


@dataclass
class Shared:
    """What Pt and Ps of one worker share: the paper's four variables, plus versions."""

    status: str = "idle"
    counter: int = 0
    replica: Params | None = None
    replica_opt: OptState | None = None  # the optimizer state copied with it, advanced by its local steps
    replica_version: int = 0  # the global version the replica was copied from
    acc_grad: GradSum | None = None
    acc_steps: int = 0  # gradients in acc_grad (a timing-only run counts them without numbers)
    acc_version: int = 0  # the replica version of the oldest gradient in acc_grad
    rounds: int = 0  # synchronisations this worker has started
    synced: simpy.Event | None = None  # set when this worker's Ps in flight finishes


@dataclass
class Round:
    """One synchronisation of the whole cluster: who read which version, and the sum."""

    reads: list[int]
    total: GradSum | None = None
    members: list[int] | None = None  # who took part (all, unless a crashed worker was left out)


@dataclass
class Barrier:
    """Pt's per-step barrier: who has arrived, and the event that lets them all go."""

    arrived: dict[int, simpy.Event] = field(default_factory=dict)  # worker -> its release, in arrival order


@register(HPSGD, timing_only=True)
def start(sim: Simulation, config: HPSGD):
    n = len(sim.workers)
    opt = optimizer_for(config)
    step = make_sum_step(opt)
    # W and its optimizer state: the same on every worker
    glob = {"params": sim.init_params, "opt": opt.init(sim.init_params), "version": 0, "batch": 1}
    rounds: dict[int, Round] = {}
    gate = Barrier()

    def apply_round(r: int) -> None:
        """Algorithm 3, lines 1-2: W <- W - lr * sum / n, once (every worker's W is identical)."""
        done = rounds.pop(r, None)
        if done is None:
            return
        members = done.members or list(range(n))
        if done.total is not None:  # None in a timing-only run: the same schedule, no numbers
            divisor = len(members) * glob["batch"]  # the sum holds per-example gradients: per step, b of them
            glob["params"], glob["opt"] = step(glob["params"], glob["opt"], done.total.grad, divisor)
        sim.applied([(i, done.reads[i]) for i in members], glob["version"])
        glob["version"] += 1

    def barrier(w: Worker):
        """Wait until every worker peers still wait for has finished its step."""
        gate.arrived[w.index] = sim.env.event()
        release = gate.arrived[w.index]
        open_barrier()
        yield from sim.wait_for(w.name, release)

    def open_barrier() -> None:
        if not gate.arrived:
            return
        owed = [i for i in sim.faults.live(list(range(n))) if i not in gate.arrived]
        if owed:
            sim.faults.blocked(owed, "HPSGD's per-step barrier")
            return
        arrived, gate.arrived = gate.arrived, {}
        for release in arrived.values():
            release.succeed()

    def pt(w: Worker, s: Shared):
        while True:
            if config.barrier and not config.barrier_waits_for_sync:
                yield from barrier(w)
            if s.counter == 0:
                s.replica, s.replica_opt, s.replica_version = glob["params"], glob["opt"], glob["version"]
            g = yield from sim.compute(w, s.replica)
            if config.barrier_waits_for_sync:
                yield from barrier(w)
            syncing = s.status == "syncing"
            if (
                config.barrier_waits_for_sync and s.synced is not None
            ):  # gloo's barrier: earlier collectives too
                yield from sim.wait_for(w.name, s.synced)
            if s.acc_steps == 0:
                s.acc_version = s.replica_version
            s.acc_steps += 1
            if g is not None:
                glob["batch"] = g.count
                s.acc_grad = g if s.acc_grad is None else sum_grads([s.acc_grad, g])
            if syncing:  # Algorithm 2, lines 5-10: train the replica
                if g is not None:
                    s.replica, s.replica_opt = step(s.replica, s.replica_opt, g.grad, g.count)
                if s.status == "syncing":  # not when Ps ended during the barrier: the next step copies W
                    s.counter += 1
            else:  # lines 12-14: only accumulate, and start a synchronisation
                s.status = "syncing"
                # Ps first applies the previous round (Algorithm 3, lines 1-2). Applied here, before
                # this Pt copies W again, every worker syncing at this instant copies the same W:
                # applied in Ps, which starts after this Pt goes on, worker 0 would copy W before it
                # is applied and the others after (SimPy runs a new process before the other Pt's resume).
                if s.rounds > 0:
                    apply_round(s.rounds - 1)
                sim.process(ps(w, s))

    def ps(w: Worker, s: Shared):
        s.synced = sim.env.event() if config.barrier_waits_for_sync else None
        r = s.rounds
        s.rounds += 1
        acc, s.acc_grad, s.acc_steps = s.acc_grad, None, 0  # swap buffers: Pt accumulates afresh meanwhile
        rounds.setdefault(r, Round([0] * n)).reads[w.index] = s.acc_version
        rounds[r].total = yield from sim.allreduce(sim.workers, w, sim.param_bytes, acc)
        rounds[r].members = sim.participants(sim.workers)
        s.counter = 0
        s.status = "idle"
        if s.synced is not None:
            s.synced.succeed()

    if config.barrier:
        sim.faults.on_change(open_barrier)
    for w in sim.workers:
        sim.process(pt(w, Shared()))
    return lambda: glob["params"]
