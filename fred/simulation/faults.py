"""Injected faults: worker crashes, degraded links, lost messages and server restarts.

The scenario's ``faults`` section is turned into a few SimPy processes that change
the cluster at set simulated times. They never reach into a strategy: a crash
interrupts the crashed worker's processes (the engine knows which processes act for
which worker), and anyone who must wait for that worker asks :meth:`Faults.excluded`
and listens to :meth:`Faults.on_change`. Every fault and every effect is traced, so
it lands in ``events.parquet``; the counters in the summary are read from there.

Failure detection is an oracle with a delay: ``sync_timeout_s`` after a crash every
peer knows the worker is gone (as a heartbeat timeout would tell them).
"""

from __future__ import annotations

import itertools
from typing import Any, Callable, Generator, Protocol

import numpy as np
import simpy

from fred.numerics import rng
from fred.scenario.schema import MAX_CADENCE_EVENTS, FaultsConfig, LinkDegrade, ServerCrashAt, WorkerCrash
from fred.simulation.flows import FairShare
from fred.simulation.network import Network
from fred.simulation.worker import Worker


class Engine(Protocol):
    """What faults use of :class:`fred.simulation.engine.Simulation`, which owns a :class:`Faults`."""

    env: simpy.Environment
    seed: int
    workers: list[Worker]
    network: Network
    flows: FairShare | None
    report: dict[str, Any]

    @property
    def now(self) -> float: ...
    def trace(
        self, kind: str, entity: str, start_s: float, end_s: float, nbytes: float = 0.0, peer: str = ""
    ) -> None: ...
    def fail(self, reason: str) -> None: ...
    def interrupt_owned(self, worker: Worker, cause: Crash) -> None: ...
    def rejoined(self, worker: Worker) -> None: ...


class Server(Protocol):
    """What faults do to a :class:`fred.simulation.server.ParameterServer`."""

    name: str
    down: bool

    def checkpoint(self) -> None: ...
    def crash(self) -> int: ...
    def restart(self) -> None: ...


class Crash:
    """The cause of the :class:`simpy.Interrupt` a crashed worker's processes receive."""

    def __init__(self, worker: int):
        self.worker = worker

    def __repr__(self) -> str:
        return f"Crash(worker={self.worker})"


class Faults:
    """The live fault state of one run: who is down, who has been given up on, lossy links."""

    def __init__(self, sim: Engine, config: FaultsConfig):
        self.sim, self.config = sim, config
        self.down: set[int] = set()  # crashed and not back
        self._excluded: set[int] = set()  # crashed, and peers have stopped waiting for it
        self._coming_back: set[int] = set()  # crashed, with a rejoin to come
        self._listeners: list[Callable[[], None]] = []
        self._next_change: simpy.Event | None = None
        self.rejoin_hooks: list[Callable[[Worker, str], None]] = []
        self._loss_streams: dict[str, np.random.Generator] = {}
        self._healthy: dict[str, tuple[float, float]] = {}  # entity -> (bandwidth_bps, latency_s) undegraded
        self._degraded: dict[str, list[LinkDegrade]] = {}  # entity -> the windows in force on its link
        self._pending_rejoins = sum(c.rejoin_at_s is not None for c in config.worker_crash)
        self.server: Server | None = None

    # -- what strategies ask -------------------------------------------------------------
    def excluded(self, worker: int) -> bool:
        """Whether peers have given up waiting for ``worker`` (crashed ``sync_timeout_s`` ago)."""
        return worker in self._excluded

    def any_excluded(self) -> bool:
        """Whether peers have given up waiting for any worker."""
        return bool(self._excluded)

    def live(self, indices: list[int]) -> list[int]:
        """``indices`` without the workers peers no longer wait for."""
        if not self._excluded:  # every run without crashes: a copy, not a scan per all-reduce arrival
            return list(indices)
        return [i for i in indices if i not in self._excluded]

    def on_change(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` after every crash, exclusion and rejoin (to re-check a wait)."""
        self._listeners.append(callback)

    def wakeup(self) -> simpy.Event | None:
        """An event at the next crash, exclusion or rejoin, to wake a waiter; None if none can come.

        ``None`` keeps runs without crashes on their plain waits (same events, same speed).
        """
        if not self.config.worker_crash:
            return None
        if self._next_change is None:
            self._next_change = self.sim.env.event()
        return self._next_change

    def on_rejoin(self, hook: Callable[[Worker, str], None]) -> None:
        """``hook(worker, rejoin_from)`` restarts a worker's processes when it comes back."""
        self.rejoin_hooks.append(hook)

    def blocked(self, missing: list[int], what: str) -> None:
        """Someone waits for crashed ``missing`` workers: without a timeout the run cannot go on,
        unless they will rejoin (the wait then ends with the rejoin)."""
        down = [
            i for i in missing if i in self.down and i not in self._excluded and i not in self._coming_back
        ]
        if down and self.config.sync_timeout_s is None:
            self.sim.fail(
                f"worker {down[0]} crashed and {what} waits for it; "
                "set faults.sync_timeout_s to go on without it"
            )

    def lost(self, src: str, dst: str) -> bool:
        """Whether the next transfer from ``src`` to ``dst`` is lost (a seeded draw per sender)."""
        loss = self.config.message_loss
        if loss is None or loss.probability == 0:
            return False
        if loss.entities and src not in loss.entities and dst not in loss.entities:
            return False
        if src not in self._loss_streams:
            self._loss_streams[src] = rng.stream(self.sim.seed, "faults", "loss", src)
        return bool(self._loss_streams[src].random() < loss.probability)

    # -- the fault processes -------------------------------------------------------------
    def start(self) -> None:
        for crash in self.config.worker_crash:
            self.sim.env.process(self._worker_crash(crash))
        for degrade in self.config.link_degrade:
            self.sim.env.process(self._degrade(degrade))
        if self.config.server_crash is not None:
            self.sim.env.process(self._checkpoints(self.config.server_crash.checkpoint_every_s))
            for at in self.config.server_crash.crashes:
                self.sim.env.process(self._server_crash(at))

    def _at(self, time_s: float) -> simpy.Timeout:
        return self.sim.env.timeout(max(time_s - self.sim.now, 0.0))

    def _changed(self) -> None:
        for callback in list(self._listeners):
            callback()
        if self._next_change is not None:
            event, self._next_change = self._next_change, None
            event.succeed()

    def _worker_crash(self, crash: WorkerCrash) -> Generator[simpy.Event, Any, None]:
        sim, worker = self.sim, self.sim.workers[crash.worker]
        yield self._at(crash.at_s)
        if crash.worker in self.down:
            return
        self.down.add(crash.worker)
        if crash.rejoin_at_s is not None:
            self._coming_back.add(crash.worker)
        sim.trace("crash", worker.name, sim.now, sim.now)
        sim.interrupt_owned(worker, Crash(crash.worker))
        if len(self.down) == len(sim.workers) and not self._pending_rejoins:
            sim.fail("every worker has crashed")
        self._changed()
        timeout_s = self.config.sync_timeout_s
        detect_s = crash.at_s + timeout_s if timeout_s is not None else None
        if detect_s is not None and (crash.rejoin_at_s is None or detect_s < crash.rejoin_at_s):
            yield self._at(detect_s)
            self._excluded.add(crash.worker)
            sim.trace("excluded", worker.name, crash.at_s, sim.now)
            self._changed()
        if crash.rejoin_at_s is not None:
            yield self._at(crash.rejoin_at_s)
            self._pending_rejoins -= 1
            self.down.discard(crash.worker)
            self._excluded.discard(crash.worker)
            self._coming_back.discard(crash.worker)
            sim.trace("rejoin", worker.name, crash.at_s, sim.now)
            sim.rejoined(worker)
            for hook in self.rejoin_hooks:
                hook(worker, crash.rejoin_from)
            self._changed()

    def _degrade(self, degrade: LinkDegrade) -> Generator[simpy.Event, Any, None]:
        yield self._at(degrade.at_s)
        start_s = self.sim.now
        self._degraded.setdefault(self._link(degrade.entity), []).append(degrade)
        self._set_link(degrade.entity)
        if degrade.duration_s is None:
            self.sim.trace("link_degraded", degrade.entity, start_s, start_s)
            return
        # Recorded as it begins, with the end it is timed to have, so that a window the run ends
        # inside is in the records and the count.
        lasts_s = max(degrade.at_s + degrade.duration_s - start_s, 0.0)  # as _at times it
        self.sim.trace("link_degraded", degrade.entity, start_s, start_s + lasts_s)
        yield self.sim.env.timeout(lasts_s)
        self._degraded[self._link(degrade.entity)].remove(degrade)
        self._set_link(degrade.entity)

    def _link(self, entity: str) -> str:
        """The link a degradation of ``entity`` acts on: its own, or its node's shared NIC."""
        return self.sim.network.link_port(entity).name

    def _set_link(self, entity: str) -> None:
        """The link as its degradations in force leave it, computed from its own values each time:
        restoring what one window saw at its start left the link degraded for ever when two
        windows on it overlapped."""
        port = self.sim.network.link_port(entity)
        bandwidth_bps, latency_s = self._healthy.setdefault(port.name, (port.bandwidth_bps, port.latency_s))
        for degrade in self._degraded[port.name]:  # in the order they began: the same bits every run
            bandwidth_bps, latency_s = (
                bandwidth_bps * degrade.bandwidth_factor,
                latency_s + degrade.extra_latency_s,
            )
        port.bandwidth_bps, port.latency_s = bandwidth_bps, latency_s
        if self.sim.flows is not None:  # flows in flight on it change speed now
            self.sim.flows.changed((port.tx, port.rx))

    def _checkpoints(self, every_s: float) -> Generator[simpy.Event, Any, None]:
        for count in itertools.count():
            if (
                count >= MAX_CADENCE_EVENTS
            ):  # a long wait the scenario did not show (validation bounds the rest)
                self.sim.fail(
                    f"faults.server_crash.checkpoint_every_s is {every_s} s: {count:,} checkpoints by "
                    f"{self.sim.now:.6g} s, the most a run makes; give a larger checkpoint_every_s"
                )
                return
            if self.server is not None and not self.server.down:
                self.server.checkpoint()
                self.sim.trace("checkpoint", self.server.name, self.sim.now, self.sim.now)
            yield self.sim.env.timeout(every_s)

    def _server_crash(self, at: ServerCrashAt) -> Generator[simpy.Event, Any, None]:
        yield self._at(at.at_s)
        server = self.server
        if server is None or server.down:
            return
        lost = server.crash()
        self.sim.report["updates_lost"] = self.sim.report.get("updates_lost", 0) + lost
        # Recorded as it begins, like the updates it loses, so that an outage the run ends in is
        # counted in server_crashes as it is in updates_lost.
        self.sim.trace("server_crash", server.name, at.at_s, self.sim.now + at.restart_s)
        yield self.sim.env.timeout(at.restart_s)
        server.restart()
