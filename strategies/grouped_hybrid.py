"""Grouped sync/async hybrid (Lu): synchronous inside groups of like-speed workers,
asynchronous between groups.

    1. probe: every worker runs for probe_s (or probe_iterations); count its iterations
    2. sort workers by speed (probe seconds per iteration); cut them into groups of
       group_size (or into `groups` groups)
    3. in a group, each round: gradients at the parameters each member last fetched,
       summed by ring all-reduce (the group waits for its slowest member)
    4. the group's leader pushes the group's update; the server applies it at once
       (staleness: updates since the members' fetch); every member fetches afresh
       group_update: mean:  theta <- theta - lr * (g_1 + ... + g_k) / k
                     sum:   theta <- theta - lr * (g_1 + ... + g_k)
       (g_m: member m's mean gradient over its batch; mean is one large-batch step of the
       group's k b examples, sum gives each example the weight it has in ASGD)
    regroup_every_s: re-measure each worker's seconds per step over the last window and
    regroup, for speeds that drift

The probe is timed compute only by default (``keep_probe_updates: false``): it measures
speed without consuming training data or moving the model, so runs with and without it
train on the same batches. With ``keep_probe_updates: true`` the probe is ASGD against the
server and its updates stay. One group of all workers is SSGD on a parameter server
(``group_update: mean``) and groups of one are ASGD (either), bit for bit (tested).

The paper does not say whether a group's gradients are summed or averaged before the push
(only that each group's update "contain[s] the computation results of multiple nodes"). At
one learning rate the two differ by the group size k in step length, which alone can decide
a comparison with ASGD, so both are offered; ``mean`` is the default.

Faults: a group's all-reduce and the regrouping barrier go on without a crashed worker
once it is given up on (``faults.sync_timeout_s``); the group's leader is its first
member still running. A leader that crashes while pushing loses that group update.
Regrouping leaves crashed workers out: the live ones fill the groups.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import simpy
from pydantic import Field, model_validator

from fred.numerics.gradients import GradSum
from fred.numerics.optim import optimizer_for
from fred.scenario.registry import register
from fred.scenario.schema import MAX_STEPS, GradientSteps, Scenario, StrategyConfig, worker_steps
from fred.simulation.engine import Contribution, Simulation, Worker
from fred.simulation.server import ParameterServer
from strategies.sasgd import sasgd_rule


class GroupedHybrid(StrategyConfig):
    name: Literal["grouped_hybrid"] = "grouped_hybrid"
    applies_optimizer = True
    lr: float = Field(default=0.01, gt=0)
    probe_s: float | None = Field(default=None, ge=0, description="probe length in simulated seconds")
    probe_iterations: int | None = Field(
        default=None, ge=0, description="or: probe until the fastest worker has done this many (default 10)"
    )
    keep_probe_updates: bool = False
    group_size: int | None = Field(default=None, ge=1, description="workers per group (default 3)")
    groups: int | None = Field(default=None, ge=1, description="or: the number of groups")
    regroup_every_s: float | None = Field(default=None, gt=0)
    group_update: Literal["mean", "sum"] = Field(
        default="mean",
        description="mean: one step on the group's average gradient (SSGD's, for a group of all); "
        "sum: one step on the sum of the members' mean gradients (k times as long; the paper does not say "
        "which)",
    )

    def has_server(self) -> bool:
        return True  # the group leaders push to it and fetch from it; it does not model a crash

    @model_validator(mode="after")
    def _one_each(self) -> "GroupedHybrid":
        if self.probe_s is not None and self.probe_iterations is not None:
            raise ValueError("give probe_s or probe_iterations, not both")
        if self.group_size is not None and self.groups is not None:
            raise ValueError("give group_size or groups, not both")
        return self

    def check(self, scenario: Scenario) -> None:
        n = scenario.cluster.workers
        if self.groups is not None and self.groups > n:
            raise ValueError(f"strategy.groups is {self.groups} but there are {n} workers; use 1..{n}")
        if (
            self.group_size is not None and self.group_size > n
        ):  # a typo, not a wish: it would be one group of all
            raise ValueError(
                f"strategy.group_size is {self.group_size} but there are {n} workers; "
                f"use 1..{n} ({n}: one group of all, SSGD on a parameter server)"
            )
        # The probe makes no updates (unless kept), so max_updates does not end it: 1e300 s ran for ever.
        if self.probe_s is not None:
            until_s = min(self.probe_s, scenario.stop.max_sim_time_s or math.inf)
            steps = worker_steps(scenario, until_s)
            if steps > MAX_STEPS:
                raise ValueError(
                    f"strategy.probe_s is {self.probe_s} s: the probe alone is {steps:.3g} steps of {n} "
                    "workers; "
                    f"at most {MAX_STEPS:,} (probe_s <= {until_s * MAX_STEPS / steps:.3g}), or give "
                    "probe_iterations"
                )
        if self.probe_iterations is not None and n * self.probe_iterations > MAX_STEPS:
            raise ValueError(
                f"strategy.probe_iterations is {self.probe_iterations}: up to "
                f"{n * self.probe_iterations:.3g} steps "
                f"of {n} workers; at most {MAX_STEPS:,} (probe_iterations <= {MAX_STEPS // n:,})"
            )

    def probe_limit(self) -> int | None:
        return self.probe_iterations if self.probe_iterations is not None or self.probe_s is not None else 10

    def gradient_steps(self, scenario: Scenario, updates: int) -> GradientSteps:
        # the probe's steps first (they make no update unless kept), then a group's update is one step of each
        # member: at least the smallest group's size
        n = scenario.cluster.workers
        if self.probe_s is not None:
            probe = worker_steps(scenario, min(self.probe_s, scenario.stop.max_sim_time_s or math.inf))
        else:
            probe = n * (self.probe_limit() or 0)
        size = self.group_size or 3
        smallest = max(n // self.groups, 1) if self.groups is not None else min(size, n % size or size)
        return GradientSteps(
            probe + updates * smallest, "a shorter probe (strategy.probe_s or probe_iterations)"
        )


def make_groups(
    step_s: list[float], config: GroupedHybrid, workers: list[int] | None = None
) -> list[list[int]]:
    """``workers`` (default: all) sorted by measured seconds per step, fastest first (ties by
    index), cut into groups; with fewer workers than ``config.groups``, fewer groups."""
    order = sorted(range(len(step_s)) if workers is None else workers, key=lambda w: (step_s[w], w))
    if config.groups is not None:
        return [sorted(int(w) for w in part) for part in np.array_split(order, config.groups) if len(part)]
    size = config.group_size or 3
    return [sorted(order[i : i + size]) for i in range(0, len(order), size)]


@dataclass
class Plan:
    """The current grouping, each group's round bookkeeping, and the next regrouping."""

    groups: list[list[int]] = field(default_factory=list)
    of: dict[int, int] = field(default_factory=dict)  # worker -> its group's index
    counts: list[int] = field(default_factory=list)  # iterations since the last (re)grouping
    busy_s: list[float] = field(default_factory=list)  # compute seconds over those iterations
    reads: dict[int, dict[int, int]] = field(default_factory=dict)  # group -> member -> version it read
    applied: dict[int, simpy.Event] = field(default_factory=dict)  # group -> its current update
    next_regroup_s: float = float("inf")
    pending: set[int] = field(default_factory=set)  # groups that stop at the barrier
    barrier: list[tuple[int, simpy.Event]] = field(default_factory=list)  # (worker, its release)
    regroupings: int = -1


@register(GroupedHybrid)
def start(sim: Simulation, config: GroupedHybrid):
    n = len(sim.workers)
    rule = sasgd_rule(optimizer_for(config), staleness_aware=False)
    server = ParameterServer(sim, sim.init_params)
    state = {"rule": rule.init(server.params)}
    plan = Plan(counts=[0] * n, busy_s=[0.0] * n)

    def apply(contributions: list[Contribution], grad: GradSum) -> None:
        if config.group_update == "sum" and len(contributions) > 1:
            # the members' batches are of one size b, so the sum of their means is the total over b
            per, left = divmod(grad.count, len(contributions))
            grad = GradSum(grad.grad, grad.loss, per if not left else grad.count / len(contributions))  # type: ignore[arg-type]
        server.params, state["rule"] = rule.apply(server.params, state["rule"], [grad], [0])
        sim.applied(contributions, server.version)
        server.version += 1

    def regroup() -> None:
        # Seconds per step, not iteration counts: inside a group everyone runs at the group's
        # pace, so counts after the first grouping would not tell a slow worker from its mates.
        step_s = [
            b / c if c else (0.0 if not any(plan.counts) else float("inf"))
            for b, c in zip(plan.busy_s, plan.counts)
        ]
        # A crashed worker never comes back here (no rejoin): grouped, it would leave a hole in
        # its group, whose all-reduce goes on without it only after sync_timeout_s, every round.
        plan.groups = make_groups(step_s, config, [w for w in range(n) if w not in sim.faults.down])
        plan.of = {w: g for g, members in enumerate(plan.groups) for w in members}
        plan.reads = {g: {} for g in range(len(plan.groups))}
        plan.applied = {g: sim.env.event() for g in range(len(plan.groups))}
        plan.counts, plan.busy_s = [0] * n, [0.0] * n
        plan.regroupings += 1
        sim.report["groups"] = plan.groups
        sim.report["regroupings"] = plan.regroupings
        if config.regroup_every_s is not None:
            plan.next_regroup_s = sim.now + config.regroup_every_s

    def probe(w: Worker):
        """Count iterations: timed compute only, or ASGD when the probe's updates are kept."""
        end_s = config.probe_s if config.probe_s is not None else float("inf")
        limit = config.probe_limit()
        params, version = server.params, server.version
        while sim.now < end_s and (limit is None or max(plan.counts) < limit):
            began = sim.now
            if config.keep_probe_updates:
                g = yield from sim.compute(w, params)
                yield from server.push(w)
                apply([Contribution(w.index, version)], g)
                params, version = yield from server.fetch(w)
            else:
                yield from sim.work(w.name, sim.compute_model.duration_s(w.index, sim.now), "probe")
            plan.counts[w.index] += 1
            plan.busy_s[w.index] += sim.now - began

    def barrier(w: Worker):
        """Everyone meets; the last to arrive regroups by the iterations counted since the last time."""
        arrived = sim.env.event()
        plan.barrier.append((w.index, arrived))
        open_barrier()
        yield from sim.wait_for(w.name, arrived)

    def open_barrier() -> None:
        if not plan.barrier:
            return
        here = {i for i, _ in plan.barrier}
        owed = [i for i in sim.faults.live(list(range(n))) if i not in here]
        if owed:
            sim.faults.blocked(owed, "the regrouping barrier")
            return
        plan.pending.clear()
        regroup()
        for _, event in plan.barrier:
            event.succeed()
        plan.barrier = []

    def worker(w: Worker):
        yield from probe(w)
        yield from barrier(w)
        params, version = server.params, server.version
        while True:
            gid = plan.of[w.index]
            group = [sim.workers[m] for m in plan.groups[gid]]
            began = sim.now
            g = yield from sim.compute(w, params)
            plan.counts[w.index] += 1
            plan.busy_s[w.index] += sim.now - began
            plan.reads[gid][w.index] = version
            total = yield from sim.allreduce(group, w, sim.param_bytes, g)
            applied = plan.applied[gid]
            members = sim.participants(group)
            if w.index == members[0]:  # the leader sends the group's average to the server
                try:
                    yield from server.push(w)
                    reads = plan.reads[gid]
                    apply([Contribution(m, reads[m]) for m in members], total)
                finally:  # even when the leader crashed mid-push, the members go on
                    plan.reads[gid] = {}
                    if sim.now >= plan.next_regroup_s:
                        plan.pending.add(gid)
                    plan.applied[gid] = sim.env.event()
                    applied.succeed()
            else:
                yield from sim.wait_for(w.name, applied)
            params, version = yield from server.fetch(w)
            if gid in plan.pending:
                yield from barrier(w)

    sim.faults.on_change(open_barrier)
    for w in sim.workers:
        sim.process(worker(w))
    return lambda: server.params
