"""SASGD: n-softsync, staleness-aware asynchronous SGD on a parameter server (Zhang et al.).

    every worker, forever:
        [clock: logical -> wait until the dispatcher picks this worker]
        g <- gradient at the parameters it last fetched (version j)
        push g; wait until the server has applied the batch that holds it
        fetch theta and its version
    server: collect c = floor(n / n_soft) gradients, then, in worker order,
        theta <- theta - lr * sum_k g_k / (c * (tau_k + 1))     (1/c if staleness_aware is off)
        version += 1

``n_soft = n`` (the default, c = 1) is staleness-aware ASGD; ``n_soft = 1`` waits for
every worker, which with staleness-awareness off is SSGD on a parameter server. The
server loop here is shared with ``ssgd``, ``fasgd`` and ``bfasgd``: each brings its own
update :class:`Rule` and, for B-FASGD, a :class:`Gate` deciding which pushes and
fetches happen.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Literal, NamedTuple

import jax
import jax.numpy as jnp
from pydantic import Field

from fred.numerics.gradients import GradSum, mean_grad, sum_grads, tree_sum
from fred.numerics.models import Params
from fred.numerics.optim import GradientTransformation, make_step, make_sum_step, optimizer_for
from fred.numerics.tape import op
from fred.scenario.registry import register
from fred.scenario.schema import GradientSteps, Scenario, StrategyConfig
from fred.simulation.dispatch import LogicalClock
from fred.simulation.engine import Contribution, Simulation, Worker
from fred.simulation.server import ParameterServer


class SASGD(StrategyConfig):
    name: Literal["sasgd"] = "sasgd"
    applies_optimizer = True
    lr: float = Field(default=0.04, gt=0)
    n_soft: int | None = Field(default=None, ge=1, description="softsync degree; default: the number of workers")
    staleness_aware: bool = True
    clock: Literal["simulated", "logical"] = "simulated"

    def fault_support(self) -> frozenset[str]:
        return PS_FAULTS

    def check(self, scenario: Scenario) -> None:
        workers = scenario.cluster.workers
        if self.n_soft is not None and self.n_soft > workers:
            raise ValueError(f"strategy.n_soft is {self.n_soft} but there are {workers} workers; use 1..{workers}")

    def gradients_per_update(self, workers: int) -> int:
        """The server's batch ``c = floor(n / n_soft)``."""
        return max(workers // (self.n_soft or workers), 1)

    def gradient_steps(self, scenario: Scenario, updates: int) -> GradientSteps:
        c = self.gradients_per_update(scenario.cluster.workers)
        return GradientSteps(updates * c, "a larger strategy.n_soft" if c > 1 else "")


PS_FAULTS = frozenset({"rejoin", "server_crash"})


# ----------------------------------------------------------------------------- numerics
class Rule(NamedTuple):
    """A server update rule in the optax style.

    ``apply(params, state, grads, staleness)`` applies one batch of gradient sums with
    their step staleness; ``statistic(state)`` is the scalar B-FASGD gates on.
    """

    init: Callable[[Params], Any]
    apply: Callable[[Params, Any, list[GradSum], list[int]], tuple[Params, Any]]
    statistic: Callable[[Any], float] | None = None


def staleness_scales(c: int, staleness: list[int], aware: bool) -> jax.Array:
    """``1 / (c (tau + 1))`` per gradient, or ``1 / c`` when not staleness-aware."""
    return jnp.asarray([1.0 / (c * (tau + 1)) if aware else 1.0 / c for tau in staleness], jnp.float32)


@op("strategies.sasgd:scaled_sum")
@jax.jit
def scaled_sum(grads: list[Params], scales: jax.Array) -> Params:
    """``sum_k scales[k] * grads[k]`` by the fixed pairwise tree."""
    return tree_sum([jax.tree.map(lambda g, k=k: g * scales[k], grad) for k, grad in enumerate(grads)])


@functools.cache
def sasgd_rule(opt: GradientTransformation, staleness_aware: bool) -> Rule:
    """The server's update for a batch of c gradients; c is the batch's own size, the configured
    c except after a crash, when the server applies what the live workers sent (a mean over
    them, as the plain average is: dividing by the configured c shrank the step). ``opt`` turns
    the (staleness-scaled) average into the step; its state is the server's."""
    step, sum_step = make_step(opt), make_sum_step(opt)

    def apply(params: Params, state: Any, grads: list[GradSum], staleness: list[int]) -> tuple[Params, Any]:
        if not staleness_aware:  # one plain average: the same bits as SSGD's aggregation
            total = sum_grads(grads)
            return sum_step(params, state, total.grad, total.count)
        means = [mean_grad(g) for g in grads]
        return step(params, state, scaled_sum(means, staleness_scales(len(grads), staleness, True)))

    return Rule(opt.init, apply)


# ----------------------------------------------------------------------------- processes
class Gate(NamedTuple):
    """Whether a worker transmits at its k-th push or fetch opportunity, given the statistic it knows."""

    push: Callable[[Worker, int, float | None], bool]
    fetch: Callable[[Worker, int, float | None], bool]


def run_parameter_server(
    sim: Simulation, rule: Rule, c: int, clock: str = "simulated", gate: Gate | None = None
) -> Callable[[], Params]:
    """Start the server and the workers; returns the global parameters' getter.

    Faults: the server applies a batch of ``min(c, workers still waited for)`` gradients,
    so a crashed worker stalls a synchronous server only until it is given up on. A
    rejoining worker fetches the global model or resumes from the copy it last held. A
    server crash rolls the parameters and the rule's state back to the last checkpoint
    (the version keeps counting, so staleness stays a count of updates applied).
    """
    logical = clock == "logical"
    server = ParameterServer(sim, sim.init_params, instant=logical)
    dispatcher = LogicalClock(sim) if logical else None
    everyone = [w.index for w in sim.workers]
    state: dict[str, Any] = {"rule": rule.init(server.params), "pending": [], "applied": sim.env.event()}
    cache: dict[int, tuple[GradSum, int]] = {}  # B-FASGD: each worker's last gradient and its version
    held = {i: (server.params, server.version) for i in everyone}  # each worker's copy of the model
    saved: dict[str, Any] = {}

    def apply_pending() -> None:
        """Apply the pending batch once it is full, or fail/wait when a crash keeps it short."""
        pending = state["pending"]
        if not pending:
            return
        if len(pending) < min(c, len(sim.faults.live(everyone))):
            if sim.faults.down:  # short because of a crash: wait for the timeout, or fail without one
                senders = {con.worker for con, _ in pending}
                if all(i in senders or i in sim.faults.down for i in everyone):
                    sim.faults.blocked([i for i in everyone if i not in senders], "the parameter server's update")
            return
        batch = sorted(pending, key=lambda item: item[0].worker)
        state["pending"] = []
        if not sim.timing_only:  # a timing-only run has no gradients: the schedule goes on without them
            staleness = [server.version - con.version_read for con, _ in batch]
            server.params, state["rule"] = rule.apply(server.params, state["rule"], [g for _, g in batch], staleness)
        sim.applied([con for con, _ in batch], server.version)
        server.version += 1
        release()

    def release() -> None:
        applied, state["applied"] = state["applied"], sim.env.event()
        applied.succeed()

    def submit(contribution: Contribution, grad: GradSum):
        """Queue a gradient; returns the event of the update that will contain it."""
        applied = state["applied"]
        state["pending"].append((contribution, grad))
        apply_pending()
        return applied

    def checkpoint() -> None:
        saved.update(params=server.params, rule=state["rule"], version=server.version)

    def crash() -> int:
        """Back to the checkpoint; gradients waiting in the server are gone, their senders go on."""
        server.params, state["rule"], state["pending"] = saved["params"], saved["rule"], []
        release()
        return server.version - saved["version"]

    def statistic() -> float | None:
        return rule.statistic(state["rule"]) if gate is not None and rule.statistic else None

    def worker(w: Worker, rejoin_from: str | None = None):
        if rejoin_from == "global":
            held[w.index] = yield from server.fetch(w)
        params, version = held[w.index]
        known, pushes, fetches = None, 0, 0
        while True:
            if dispatcher is not None:
                yield from dispatcher.turn(w)
            g = yield from sim.compute(w, params, 0.0 if logical else None)
            if gate is None or pushes == 0 or gate.push(w, pushes, known):  # a first push always goes
                yield from server.push(w)
                cache[w.index] = (g, version)
                entry = (Contribution(w.index, version), g)
            else:  # the server re-applies this worker's last gradient, with its original version
                server.dropped(w, "push")
                yield from server.until_up(w.name)  # a server that is down applies nothing
                cached, cached_version = cache[w.index]
                entry = (Contribution(w.index, cached_version, cached=True), cached)
            pushes += 1
            applied = submit(*entry)
            if not applied.triggered:  # its update is already made when this gradient completed the batch
                yield from sim.wait_for(w.name, applied)
            known = statistic()  # the server's reply carries its statistic
            if gate is None or gate.fetch(w, fetches, known):
                carried: list[float | None] = []  # the statistic the reply carries, taken as it is sent
                params, version = held[w.index] = yield from server.fetch(w, reply=lambda: carried.append(statistic()))
                known = carried[-1]
            else:
                server.dropped(w, "fetch")
            fetches += 1

    server.on_checkpoint, server.on_crash = checkpoint, crash
    sim.faults.on_change(apply_pending)
    sim.faults.on_rejoin(lambda w, rejoin_from: sim.process(worker(w, rejoin_from), w))
    for w in sim.workers:
        sim.process(worker(w))
    return lambda: server.params


@register(SASGD, timing_only=True)
def start(sim: Simulation, config: SASGD):
    c = config.gradients_per_update(len(sim.workers))
    return run_parameter_server(sim, sasgd_rule(optimizer_for(config), config.staleness_aware), c, config.clock)
