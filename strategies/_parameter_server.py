"""The parameter-server loop that ``sasgd``, ``asgd``, ``fasgd``, ``bfasgd`` and ``ssgd`` (``aggregation:
ps``) run, each with its own update :class:`Rule` and, for B-FASGD, a :class:`Gate`:

    every worker, forever:
        [clock: logical -> wait until the dispatcher picks this worker]
        g <- gradient at the parameters it last fetched (version j)
        [gate.push says no -> the server re-applies the worker's last gradient, with its version]
        push g; wait until the server has applied the batch that holds it
        [gate.fetch says no -> keep the parameters it has]
        fetch theta, its version and the rule's statistic
    server: collect c gradients; in worker order, with staleness tau_k = version - j_k,
        theta, state <- rule.apply(theta, state, [g_1 .. g_c], [tau_1 .. tau_c]);  version += 1
"""

from __future__ import annotations

from typing import Any, Callable, Literal, NamedTuple

from fred.numerics.gradients import GradSum
from fred.numerics.models import Params
from fred.scenario.schema import StrategyConfig
from fred.simulation.dispatch import LogicalClock
from fred.simulation.engine import Contribution, Simulation, Worker
from fred.simulation.server import ParameterServer

PS_FAULTS = frozenset({"rejoin", "server_crash"})


class ParameterServerConfig(StrategyConfig):
    """What every parameter-server strategy's settings share: the optimizer, the clock, the faults."""

    applies_optimizer = True
    clock: Literal["simulated", "logical"] = "simulated"

    def fault_support(self) -> frozenset[str]:
        return PS_FAULTS


class Rule(NamedTuple):
    """A server update rule in the optax style.

    ``apply(params, state, grads, staleness)`` applies one batch of gradient sums with
    their step staleness; ``statistic(state)`` is the scalar B-FASGD gates on.
    """

    init: Callable[[Params], Any]
    apply: Callable[[Params, Any, list[GradSum], list[int]], tuple[Params, Any]]
    statistic: Callable[[Any], float] | None = None


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
                    sim.faults.blocked(
                        [i for i in everyone if i not in senders], "the parameter server's update"
                    )
            return
        batch = sorted(pending, key=lambda item: item[0].worker)
        state["pending"] = []
        if not sim.timing_only:  # a timing-only run has no gradients: the schedule goes on without them
            staleness = [server.version - con.version_read for con, _ in batch]
            server.params, state["rule"] = rule.apply(
                server.params, state["rule"], [g for _, g in batch], staleness
            )
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
                params, version = held[w.index] = yield from server.fetch(
                    w,
                    reply=lambda: carried.append(statistic()),  # noqa: B023 (called within this iteration)
                )
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
