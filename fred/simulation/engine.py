"""The simulation: a SimPy environment plus the primitives strategies compose.

Strategies never touch links, clocks or records directly. They write worker and
server processes as generators and use a few primitives:

``yield from sim.compute(worker, params)``
    charge one gradient step of simulated time; returns the real :class:`GradSum`
    (``None`` in a timing-only run, which has no gradient service).
``yield from sim.work(entity, seconds, kind)``
    keep an entity busy for a given time (compression, a server's update, a sleep).
``yield from sim.send(src, dst, nbytes, kind, payload)``
    a point-to-point transfer (:mod:`fred.simulation.transport`); a payload lands in ``dst``'s mailbox.
``yield from server.push(...)`` / ``server.fetch(...)``
    transfers to and from a :class:`~fred.simulation.server.ParameterServer`.
``yield from sim.allreduce(group, member, nbytes, value)``
    join an all-reduce with the group's other members; returns the summed value.
``yield from sim.allgather(group, member, nbytes, value)``
    join a ring all-gather: each member contributes ``nbytes`` (a sparse payload, which
    cannot be added on the way) and gets every member's value, in group order. It shares the
    all-reduce's bookkeeping (joining, waiting, crashes, the group's count of collectives);
    its time is (p-1)(alpha + nbytes beta) + S on idle links, and each member sends (p-1) nbytes.
``yield from sim.reduce_scatter(group, member, nbytes, value)``
    join a ring reduce-scatter: the all-reduce's sum (fred keeps full values), the
    reduce-scatter's time and bytes (fred times shards).
``yield from sim.backprop_allreduce(worker, params, group)``
    a gradient step all-reduced over the group, in gradient buckets that overlap the
    backward pass when the scenario has them; ``backprop_reduce_scatter`` reduce-scatters
    them (ZeRO-1 and -2), ``backprop_sharded`` also all-gathers each layer's parameters
    before its forward and its backward (ZeRO-3): :mod:`fred.simulation.overlap`.
``sim.applied(contributions, version_applied)``
    tell the run a model update happened (records, evaluation, stopping).

The engine joins the members of a collective and adds their values
(:mod:`fred.simulation.joins`); how long the collective takes and what each member sends
are the business of the collective objects chosen once from the network section when the
simulation is built (:attr:`Simulation.allreduce_timing`, :attr:`Simulation.allgather_timing`,
:attr:`Simulation.reduce_scatter_timing`,
:mod:`fred.simulation.algorithms`). Gradients come from the
:class:`~fred.simulation.gradient_service.GradientService`.

Faults (:mod:`fred.simulation.faults`) act through the same primitives: a process that computes,
sends or all-reduces for a worker belongs to it, and is interrupted when it crashes;
a lost transfer is resent after the scenario's retransmit timeout.

SimPy orders simultaneous events by (time, priority, insertion sequence), and every
process here is started in a fixed order, so the whole run is deterministic.
"""

from __future__ import annotations

from typing import Any, Callable, Generator, NamedTuple, Sequence

import simpy

from fred.numerics.gradients import GradSum
from fred.numerics.models import Params
from fred.scenario.schema import FaultsConfig
from fred.simulation.algorithms import Collective, allgather_for, allreduce_for, reduce_scatter_for
from fred.simulation.buckets import Bucket, LayerShare
from fred.simulation.compute import ComputeModel
from fred.simulation.faults import Crash, Faults
from fred.simulation.gradient_service import GradientService
from fred.simulation.joins import (
    ALLGATHER,
    ALLREDUCE,
    REDUCE_SCATTER,
    CollectiveCall,
    GroupKey,
    Tracer,
    sum_values,
)
from fred.simulation.network import Network
from fred.simulation.overlap import OverlappedSteps
from fred.simulation.rounds_as_flows import HeldLinks
from fred.simulation.transport import Transport
from fred.simulation.worker import Worker

__all__ = ["Contribution", "GradientService", "NO_PAYLOAD", "Process", "Simulation", "Tracer", "Worker"]

Process = Generator[simpy.Event, Any, Any]


class Contribution(NamedTuple):
    """One gradient in a model update: who computed it, on which version, and whether it was re-applied."""

    worker: int
    version_read: int
    cached: bool = False


NO_PAYLOAD: Any = object()  # send()'s default: a transfer that delivers nothing (a push of bytes alone)


class Simulation(OverlappedSteps):
    """Entities, links and primitives of one run. Built by :func:`fred.runs.runner.build`; its
    gradient steps that overlap communication are :class:`~fred.simulation.overlap.OverlappedSteps`'."""

    def __init__(
        self,
        env: simpy.Environment,
        workers: list[Worker],
        network: Network,
        compute_model: ComputeModel,
        gradients: GradientService | None,
        init_params: Params,
        param_bytes: int,
        seed: int,
        faults: FaultsConfig | None = None,
        buckets: Sequence[Bucket] = (),
        layers: Sequence[LayerShare] = (),
    ):
        self.env, self.workers, self.network = env, workers, network
        # Fairly shared flows, or transfers booked first come, first served (network.sharing).
        sharing = network.config.sharing
        self.flows = HeldLinks(env, rtt=sharing == "rtt") if sharing != "fcfs" else None
        self.compute_model, self.gradients = compute_model, gradients
        self.init_params, self.param_bytes, self.seed = init_params, param_bytes, seed
        self.buckets = tuple(buckets)  # gradient buckets in backward order; () all-reduces the whole message
        self.layers = tuple(layers)  # the model's layers in forward order (ZeRO-3); (): one of all of it
        self.tracers: list[Tracer] = []
        self.update_hooks: list[Callable[[list[Contribution], int], None]] = []
        self.compute_hooks: list[Callable[[GradSum], None]] = []
        self.report: dict[str, Any] = {}  # strategy facts for the summary (e.g. a grouping)
        self._collectives: dict[tuple[Any, int], CollectiveCall] = {}
        self._joined: dict[tuple[Any, int], int] = {}
        self._started: dict[tuple[int, ...], int] = {}  # collectives started per group
        self._last_participants: dict[tuple[int, ...], list[int]] = {}
        self._mailboxes: dict[str, simpy.Store] = {}
        # Collectives in flight per device, and an event for the next change: compute slows meanwhile
        # (cluster.compute.collective_share). Kept only when the share is above 0.
        self._share = getattr(compute_model, "collective_share", 0.0)  # tests build some without a model
        self._bucket_overhead_s = getattr(compute_model, "bucket_overhead_s", 0.0)
        self._in_flight: list[int] = []
        self._load_changed: list[simpy.Event] = []
        self._owned: list[dict[simpy.Process, None]] = [{} for _ in workers]  # ordered sets
        self._by_name = {w.name: w for w in workers}
        self._crew_key = GroupKey(w.index for w in workers)  # the key of most groups, built once
        self.failure: str | None = None
        self.faults = Faults(self, faults or FaultsConfig())
        self._track = bool(self.faults.config.worker_crash)  # who owns a process matters only then
        self.faults.on_change(self._recheck_collectives)
        for worker in workers:
            network.add(worker.name, worker=worker.index)
        self.transport = Transport(env, network, self.flows, self.faults, self.trace)
        # How every all-reduce, all-gather and reduce-scatter of the run is timed, chosen once.
        self.allreduce_timing: Collective = allreduce_for(self.transport, self.report)
        self.allgather_timing: Collective = allgather_for(self.transport)
        self.reduce_scatter_timing: Collective = reduce_scatter_for(self.transport)
        wpd = network.workers_per_device
        # Processes sharing a device take turns (GPU time-slicing): a step waits for the device.
        self._devices = (
            [simpy.Resource(env, capacity=1) for _ in range(-(-len(workers) // wpd))] if wpd > 1 else None
        )
        if self._share > 0:
            devices = -(-len(workers) // wpd)
            self._in_flight, self._load_changed = [0] * devices, [env.event() for _ in range(devices)]

    # -- bookkeeping -------------------------------------------------------------------
    @property
    def now(self) -> float:
        return self.env.now

    @property
    def timing_only(self) -> bool:
        """A run without gradients: ``compute`` returns ``None``; strategies skip their numbers."""
        return self.gradients is None

    def process(self, generator: Process, worker: Worker | None = None) -> simpy.Process:
        """Start a process; one interrupted by its worker's crash just ends.

        A process acts for the workers whose primitives it runs, from its first one; with
        ``worker`` it acts for that worker from the start, so that a second crash stops a
        rejoined worker whose first step is the server's fetch (a primitive of the server).
        """
        started = self.env.process(self._guarded(generator))
        if worker is not None and self._track:
            self._owned[worker.index][started] = None
        return started

    @staticmethod
    def _guarded(generator: Process) -> Process:
        try:
            return (yield from generator)
        except simpy.Interrupt as stop:
            if isinstance(stop.cause, Crash):
                return None
            raise

    def _own_entity(self, entity: str) -> None:
        """:meth:`_own` for an entity name that may be a worker's."""
        if self._track and entity in self._by_name:
            self._own(self._by_name[entity])

    def _own(self, worker: Worker) -> None:
        """The running process acts for ``worker``: it dies when the worker crashes."""
        if not self._track:
            return
        process, owned = self.env.active_process, self._owned[worker.index]
        if process is not None and process not in owned:
            owned[process] = None
            if len(owned) > 64 and len(owned) & (len(owned) - 1) == 0:  # at powers of two: drop the dead
                for dead in [p for p in owned if not p.is_alive]:
                    del owned[dead]

    def interrupt_owned(self, worker: Worker, cause: Crash) -> None:
        """Stop every live process acting for ``worker``, in the order they started acting."""
        owned, self._owned[worker.index] = self._owned[worker.index], {}
        for process in owned:
            if process.is_alive:
                process.interrupt(cause)

    def fail(self, reason: str) -> None:
        """End the run with ``status: failed`` and ``reason`` (the first failure wins)."""
        if self.failure is None:
            self.failure = reason
            self.trace("failed", "run", self.now, self.now)

    def trace(
        self, kind: str, entity: str, start_s: float, end_s: float, nbytes: float = 0.0, peer: str = ""
    ) -> None:
        """Tell every tracer about one activity; ``peer`` is the other end of a transfer."""
        for tracer in self.tracers:
            tracer(kind, entity, start_s, end_s, nbytes, peer)

    def wait(self, entity: str, until_s: float) -> simpy.Timeout:
        """Idle until ``until_s``, recorded as a ``wait`` event when it takes time."""
        if until_s > self.now:
            self.trace("wait", entity, self.now, until_s)
        return self.env.timeout(max(until_s - self.now, 0.0))

    def wait_for(self, entity: str, event: simpy.Event) -> Generator[simpy.Event, Any, Any]:
        """Block on ``event`` (a barrier, a message); the blocked time is recorded as ``wait``."""
        self._own_entity(entity)
        start = self.now
        try:
            value = yield event
        except simpy.Interrupt:
            # A dead worker must not take a message meant for its successor. A lock request
            # cancels itself as its `with` block ends (SimPy's way): cancelled twice, it raised.
            if isinstance(event, (simpy.resources.base.Get, simpy.resources.base.Put)) and not isinstance(
                event, simpy.resources.resource.Request
            ):
                event.cancel()
            raise
        finally:
            if self.now > start:
                self.trace("wait", entity, start, self.now)
        return value

    def applied(self, contributions: Sequence[tuple[int, int] | Contribution], version_applied: int) -> None:
        """Record one model update made of ``(worker, version_read[, cached])`` gradients.

        ``version_applied`` is the model version the gradients were applied to, so
        each contribution's staleness is ``version_applied - version_read``; ``cached``
        marks a gradient the server re-applied from its cache instead of receiving it.
        """
        rows = [Contribution(*c) for c in contributions]
        for hook in self.update_hooks:
            hook(rows, version_applied)

    # -- primitives --------------------------------------------------------------------
    def compute(
        self,
        worker: Worker,
        params: Params,
        duration_s: float | None = None,
        started: Callable[[float], None] | None = None,
        buckets: Sequence[simpy.Event] | None = None,
    ) -> Generator[simpy.Event, Any, GradSum | None]:
        """One gradient step of ``worker`` on its next batch, at ``params``.

        It takes the compute model's next duration for the worker, or ``duration_s``
        when given (a logical clock passes 0). Without a gradient service (a
        timing-only run) it draws no batch and returns ``None``: the time is charged
        all the same, because durations never depend on the numbers. ``started`` is
        told the duration when the step begins on its device. With ``buckets`` (a step of
        :meth:`backprop_allreduce`) the step pays each bucket's ``bucket_overhead_s``, and these
        events are triggered as the backward pass makes each of :attr:`buckets` but the last.

        On a device shared by several workers, the step's host overhead is spent first (a
        ``host`` event) without holding the device; then the worker takes its turn on the
        device (``wait`` while others hold it) for the rest of the step.
        """
        self._own(worker)
        request = (
            self.gradients.request(params, worker.next_batch(), worker.index) if self.gradients else None
        )
        try:
            if self._devices is None:
                yield from self._step(worker, request, duration_s, started, buckets=buckets)
            else:
                # The host's part (framework, copies, data loading) runs off the device, beside
                # the other processes' device time; only the rest holds the device.
                host_s = self.compute_model.host_overhead_s if duration_s is None else 0.0
                if host_s:
                    yield from self.work(worker.name, host_s, kind="host")
                with self._devices[worker.index // self.network.workers_per_device].request() as turn:
                    yield from self.wait_for(worker.name, turn)
                    yield from self._step(
                        worker, request, duration_s, started, with_host=False, buckets=buckets
                    )
        except simpy.Interrupt:
            if request is not None:
                self.gradients.cancel(request)  # type: ignore[union-attr]
            raise
        if request is None:
            return None
        grad = self.gradients.result(request)
        for hook in self.compute_hooks:
            hook(grad)
        return grad

    def _step(
        self,
        worker: Worker,
        request: Any,
        duration_s: float | None,
        started: Callable[[float], None] | None = None,
        with_host: bool = True,
        buckets: Sequence[simpy.Event] | None = None,
    ) -> Generator[simpy.Event, Any, None]:
        """The step's time on its device, drawn as it starts (speed changes are in simulated time);
        ``with_host`` adds the host overhead when it was not spent before the device's turn. With
        ``buckets`` each bucket's ready event is triggered as the backward pass reaches it."""
        start = self.now
        if duration_s is None:
            duration_s = self.compute_model.duration_s(worker.index, self.now, with_host)
        if request is not None:
            request.duration_s = duration_s
        if started is not None:
            started(duration_s)
        device = worker.index // self.network.workers_per_device
        try:
            if buckets is not None:
                yield from self._backward_in_buckets(device, duration_s, buckets)
            else:
                yield from self._advance(device, duration_s)
        finally:
            self.trace("compute", worker.name, start, self.now)

    def _backward_in_buckets(self, device: int, duration_s: float, ready: Sequence[simpy.Event]) -> Process:
        """A step whose backward pass makes :attr:`buckets` one by one: bucket ``k`` is ready once the
        step's work reaches its fraction of ``duration_s`` and its copy (``bucket_overhead_s``) is done."""
        overhead_s, done_s = self._bucket_overhead_s, 0.0
        fractions = [b.ready for b in self.buckets] or [1.0]
        for k, fraction in enumerate(fractions):
            yield from self._advance(device, max(fraction * duration_s - done_s, 0.0) + overhead_s)
            done_s = max(done_s, fraction * duration_s)
            if k < len(ready):
                ready[k].succeed()

    def _advance(self, device: int, work_s: float) -> Process:
        """``work_s`` seconds of the device's compute: at full speed, or at ``1 - collective_share``
        of it while one of the device's collectives is in flight."""
        if self._share == 0:
            yield self.env.timeout(work_s)
            return
        while work_s > 0:
            rate = 1.0 - self._share if self._in_flight[device] else 1.0
            begun, finished = self.now, self.env.timeout(work_s / rate)
            if finished in (yield finished | self._load_changed[device]):
                return
            work_s -= (self.now - begun) * rate

    def _collective_load(self, worker: Worker, change: int) -> None:
        """One more (``+1``) or one fewer (``-1``) collective of ``worker``'s device in flight."""
        if self._share == 0:
            return
        device = worker.index // self.network.workers_per_device
        self._in_flight[device] += change
        changed, self._load_changed[device] = self._load_changed[device], self.env.event()
        changed.succeed()

    def work(self, entity: str, seconds: float, kind: str = "compute") -> Generator[simpy.Event, Any, None]:
        """Keep ``entity`` busy for ``seconds`` of simulated time (compression, an update, a sleep)."""
        self._own_entity(entity)
        start = self.now
        try:
            yield self.env.timeout(seconds)
        finally:
            self.trace(kind, entity, start, self.now)

    def send(
        self,
        src: str,
        dst: str,
        nbytes: float,
        kind: str = "send",
        payload: Any = NO_PAYLOAD,
        delivered: Callable[[], bool] | None = None,
    ) -> Generator[simpy.Event, Any, None]:
        """Move ``nbytes`` from ``src`` to ``dst``; a ``payload``, if given, is delivered to ``dst``'s
        mailbox.

        ``None`` is a payload like any other (a timing-only run's parameters are ``None``);
        without one, nothing is delivered and only the transfer is simulated.

        ``delivered``, asked on arrival, may say the message was lost on the way (its end
        went down): it is then recorded as ``lost``, not as ``kind``, and not delivered.
        """
        self._own_entity(src)
        if self.flows is not None:  # a flow: it starts now and ends when its share of the links lets it
            start_s, arrived = self.now, self.env.event()
            self.transport.post(src, dst, nbytes, 1, arrived)
        else:  # booked first come, first served: it waits for its links, then takes its time
            transfer = self.transport.book(src, dst, nbytes)
            yield self.wait(src, transfer.start_s)
            start_s, arrived = transfer.start_s, self.env.timeout(transfer.arrive_s - self.now)
        try:
            yield arrived
        except simpy.Interrupt:  # the sender crashed: what was on the wire is lost
            self.trace("lost", src, start_s, self.now, nbytes, dst)
            raise
        if delivered is not None and not delivered():
            self.trace("lost", src, start_s, self.now, nbytes, dst)
            return
        self.trace(kind, src, start_s, self.now, nbytes, dst)
        if payload is not NO_PAYLOAD:
            self.mailbox(dst).put((src, payload))

    def mailbox(self, entity: str) -> simpy.Store:
        """The FIFO of ``(sender, payload)`` messages delivered to ``entity``."""
        if entity not in self._mailboxes:
            self._mailboxes[entity] = simpy.Store(self.env)
        return self._mailboxes[entity]

    def allreduce(
        self, group: Sequence[Worker], member: Worker, nbytes: float, value: Any = None
    ) -> Generator[simpy.Event, Any, Any]:
        """Join the group's next all-reduce; returns the pairwise-tree sum of the values.

        Values are :class:`GradSum` (summed with their losses and counts) or any pytree
        of arrays (parameters, for model averaging); ``None`` from everyone times the
        collective without numbers.

        Members block until every member peers still wait for has joined (recorded as
        ``wait``; a crashed member is waited for until ``faults.sync_timeout_s``). The
        timing is :attr:`allreduce_timing`'s (``network.allreduce``, step by step); the sum
        is always taken in group order by the fixed tree, so it is the same bits whatever
        the algorithm did.
        """
        return self._join(group, member, nbytes, value, ALLREDUCE)

    def allgather(
        self, group: Sequence[Worker], member: Worker, nbytes: float, value: Any = None
    ) -> Generator[simpy.Event, Any, Any]:
        """Join the group's next ring all-gather; returns the participants' values in group order.

        Each member contributes ``nbytes`` (values nobody can add on the way, such as top-k's
        (index, value) pairs). Joining, waiting and crashes are the all-reduce's, and the two
        count the group's collectives together, so members call them in the same order. The
        timing is a ring all-gather's whatever ``network.allreduce`` and ``hierarchical`` say:
        p-1 steps in which each member passes the payload it got last to its successor
        (:func:`~fred.simulation.collectives.ring_allgather`), booked on the links, so
        ``(p-1)(alpha + nbytes beta) + S`` on idle ones; each member sends ``(p-1) nbytes``.
        ``None`` from anyone (a timing-only run) returns ``None``.
        """
        return self._join(group, member, nbytes, value, ALLGATHER)

    def reduce_scatter(
        self, group: Sequence[Worker], member: Worker, nbytes: float, value: Any = None
    ) -> Generator[simpy.Event, Any, Any]:
        """Join the group's next ring reduce-scatter of an ``nbytes`` message; returns the sum.

        fred keeps full values and times shards: each member gets the whole pairwise-tree sum,
        as :meth:`allreduce` returns it (so a sharded strategy's numbers are the unsharded
        one's, bit for bit), while the clock and the bytes are a ring reduce-scatter's, after
        which each member would hold the sum of one ``1/p`` shard:
        ``(p-1)(alpha + n/p beta + n/p gamma) + S`` on idle links, ``(p-1)/p n`` sent by each,
        whatever ``network.allreduce`` says. Joining, waiting and crashes are the all-reduce's,
        with which it counts the group's collectives.
        """
        return self._join(group, member, nbytes, value, REDUCE_SCATTER)

    def _join(self, group: Sequence[Worker], member: Worker, nbytes: float, value: Any, kind: str) -> Process:
        """:meth:`allreduce`, :meth:`allgather` or :meth:`reduce_scatter` (``kind``): join the
        group's next collective."""
        if self._track:
            self._own(member)
        key = self._group_key(group)
        joined = (key, member.index)
        call = self._joined.get(joined, 0)
        self._joined[joined] = call + 1
        coll = self._collectives.get((key, call))
        if coll is None:
            coll = self._collectives[(key, call)] = CollectiveCall(self.env, nbytes, self.trace, kind)
        elif coll.kind != kind:
            raise RuntimeError(
                f"{member.name} joined collective {call} of its group as {kind} while others joined "
                f"it as {coll.kind}: members must call them in the same order"
            )
        coll.arrived.append((member.index, value))
        waiting = (member.name, self.env.now)
        coll.waiting.append(waiting)
        self._try_start(key, call, coll)
        self._collective_load(member, +1)
        try:
            yield coll.done
        except simpy.Interrupt:
            if (
                coll.started.callbacks is not None
            ):  # crashed before it started: its value never entered the ring
                coll.arrived = [a for a in coll.arrived if a[0] != member.index]
                coll.waiting.remove(waiting)
                if self.env.now > waiting[1]:
                    self.trace("wait", member.name, waiting[1], self.env.now)
            raise
        finally:
            self._collective_load(member, -1)
        if coll.sent is None:  # once per collective, not once per member
            names = [self.workers[i].name for i in coll.participants]
            coll.sent = self._timing(kind).sent_by(coll.participants, names, coll.nbytes)
        sent = coll.sent(member.index, nbytes)
        self.trace(kind, member.name, coll.start_s, self.env.now, sent)
        return coll.result

    def participants(self, group: Sequence[Worker]) -> list[int]:
        """Who took part in the group's latest started all-reduce (all, unless some crashed)."""
        return self._last_participants.get(self._group_key(group), [w.index for w in group])

    def _group_key(self, group: Sequence[Worker]) -> tuple[int, ...]:
        """A group's member indices. The whole crew (``self.workers``, never changed) is the
        usual group: every member joins with it, so building it per join would cost p^2."""
        return self._crew_key if group is self.workers else GroupKey(w.index for w in group)

    def _try_start(self, key: tuple[int, ...], call: int, coll: CollectiveCall | None = None) -> None:
        """Start the collective once every member peers still wait for has joined."""
        if coll is None:
            coll = self._collectives[(key, call)]
        expected = self.faults.live(key) if self.faults.any_excluded() else key  # no O(p) copy per join
        if len(coll.arrived) < len(expected):  # arrivals are live members: a crash withdraws its own
            if self.faults.down:
                here = {i for i, _ in coll.arrived}
                self.faults.blocked([i for i in expected if i not in here], "the all-reduce")
            return
        del self._collectives[(key, call)]
        self._started[key] = call + 1
        arrived = sorted(coll.arrived, key=lambda item: item[0])
        coll.participants = [i for i, _ in arrived]
        self._last_participants[key] = coll.participants
        values = [v for _, v in arrived]
        if coll.kind == ALLGATHER:
            coll.result = None if any(v is None for v in values) else values
        else:
            coll.result = sum_values(values)
        names = [self.workers[i].name for i in coll.participants]
        self.env.process(self._timed(self._timing(coll.kind), names, coll.nbytes, coll.done))
        coll.started.succeed()

    def _timing(self, kind: str) -> Collective:
        if kind == ALLGATHER:
            return self.allgather_timing
        return self.reduce_scatter_timing if kind == REDUCE_SCATTER else self.allreduce_timing

    def _timed(self, timing: Collective, names: list[str], nbytes: float, done: simpy.Event) -> Process:
        """The collective's timing, then ``done``: triggered where the process ends, in its place."""
        yield from timing.run(names, nbytes)
        done.succeed()

    def _recheck_collectives(self) -> None:
        for key, call in list(self._collectives):
            if (key, call) in self._collectives and self._collectives[(key, call)].arrived:
                self._try_start(key, call)

    def next_collective(self, group: Sequence[Worker], member: Worker) -> int:
        """The number of the group's all-reduce that ``member`` joins next (0 for the first):
        after a rejoin, the first that has not started."""
        return self._joined.get((self._group_key(group), member.index), 0)

    def rejoined(self, worker: Worker) -> None:
        """A worker back from a crash joins each of its groups' next collective, not its old one."""
        for key, started in self._started.items():
            if worker.index in key:
                self._joined[(key, worker.index)] = started
