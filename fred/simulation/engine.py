"""The simulation: a SimPy environment plus the primitives strategies compose.

Strategies never touch links, clocks or records directly. They write worker and
server processes as generators and use a few primitives:

``yield from sim.compute(worker, params)``
    charge one gradient step of simulated time; returns the real :class:`GradSum`
    (``None`` in a timing-only run, which has no gradient service).
``yield from sim.work(entity, seconds, kind)``
    keep an entity busy for a given time (compression, a server's update, a sleep).
``yield from sim.send(src, dst, nbytes, kind, payload)``
    a point-to-point transfer (FIFO contention); a payload lands in ``dst``'s mailbox.
``yield from server.push(...)`` / ``server.fetch(...)``
    transfers to and from a :class:`~fred.simulation.server.ParameterServer`.
``yield from sim.allreduce(group, member, nbytes, value)``
    join a ring all-reduce with the group's other members; returns the summed value.
``yield from sim.allgather(group, member, nbytes, value)``
    join a ring all-gather: each member contributes ``nbytes`` (a sparse payload, which
    cannot be added on the way) and gets every member's value, in group order. It shares the
    all-reduce's bookkeeping (joining, waiting, crashes, the group's count of collectives);
    its time is (p-1)(alpha + nbytes beta) + S on idle links, and each member sends (p-1) nbytes.
``yield from sim.backprop_allreduce(worker, params, group)``
    a gradient step all-reduced over the group, in gradient buckets that overlap the
    backward pass when the scenario has them.
``sim.applied(contributions, version_applied)``
    tell the run a model update happened (records, evaluation, stopping).

Faults (:mod:`fred.simulation.faults`) act through the same primitives: a process that computes,
sends or all-reduces for a worker belongs to it, and is interrupted when it crashes;
a lost transfer is resent after the scenario's retransmit timeout.

SimPy orders simultaneous events by (time, priority, insertion sequence), and every
process here is started in a fixed order, so the whole run is deterministic.
"""

from __future__ import annotations

from typing import Any, Callable, Generator, NamedTuple, Sequence

import numpy as np
import simpy

from fred.numerics.data import Dataset
from fred.numerics.gradients import GradSum, Numerics, parts_of, sum_grads, tree_sum
from fred.numerics.models import Params
from fred.numerics.tape import active_tape, op
from fred.scenario.schema import FaultsConfig, NcclConfig
from fred.simulation import nccl
from fred.simulation.buckets import Bucket
from fred.simulation.collectives import (ALGORITHMS, HeldLinks, Round, RoundsAsFlows, bytes_sent, hierarchical,
                                         on_idle_links, ring_allgather, ring_phases, run_rounds)
from fred.simulation.compute import ComputeModel
from fred.simulation.faults import Crash, Faults
from fred.simulation.flows import Arrival
from fred.simulation.network import Network, Transfer, ring_by_chunk
from fred.simulation.worker import Worker

Process = Generator[simpy.Event, Any, Any]


class Contribution(NamedTuple):
    """One gradient in a model update: who computed it, on which version, and whether it was re-applied."""

    worker: int
    version_read: int
    cached: bool = False


Tracer = Callable[[str, str, float, float, float, str], None]


class GroupKey(tuple):
    """A group's member indices, hashed once: a tuple hashes all p of them at every lookup,
    and every join looks its group up several times, which made a ring round cost p^2."""

    def __new__(cls, indices: Any) -> "GroupKey":
        key = super().__new__(cls, indices)
        key._hash = tuple.__hash__(key)
        return key

    def __hash__(self) -> int:
        return self._hash


NO_PAYLOAD: Any = object()  # send()'s default: a transfer that delivers nothing (a push of bytes alone)


class _GradientRequest:
    __slots__ = ("params", "rows", "worker", "result", "duration_s", "seq")

    def __init__(self, params: Params, rows: np.ndarray, worker: int, seq: int):
        self.params, self.rows, self.worker, self.result, self.duration_s = params, rows, worker, None, 0.0
        self.seq = seq  # the order requests were made in: ties of one worker keep it


def _by_worker(req: _GradientRequest) -> tuple[int, int]:
    return req.worker, req.seq


class GradientService:
    """Evaluates gradient requests lazily, batching those made on the same parameters.

    A request's value is needed only when its simulated compute time has passed;
    by then every worker that started on the same parameters at the same instant
    has asked too, so vectorised calls serve them all (fast: one call; exact: calls
    of up to :meth:`Numerics.workers_per_call` workers). With the exact reduction every
    leaf of the summation tree (an example's gradient, or a tile's) is the same bits in
    whichever call computed it, so batched and unbatched results are the same bits
    (docs/determinism.md). With tiles (:attr:`Numerics.batches_parameters`) a call also
    serves the requests made on other parameters (ASGD's, Local SGD's or a gossip's workers
    computing at once on versions of their own), each tile at its own request's parameters:
    fewer, larger calls, the same bits.
    """

    def __init__(self, numerics: Numerics, dataset: Dataset):
        self.numerics, self.dataset = numerics, dataset
        # Requests waiting, grouped by what a batched call needs in common: the same
        # parameters (by identity; each request holds them) and batch size. Served in worker order.
        self._pending: dict[tuple[int, int], list[_GradientRequest]] = {}
        # On the numerics tape as "gradients": replay rebuilds it from the run's scenario.
        self._gradients = op("gradients")(
            lambda params, rows, shards, starts=None: numerics.gradients(params, dataset, rows, shards, starts)
        )
        self._made = 0  # requests made: their order breaks ties

    def request(self, params: Params, rows: np.ndarray, worker: int = 0) -> _GradientRequest:
        req = _GradientRequest(params, rows, worker, self._made)
        self._made += 1
        self._pending.setdefault((id(params), len(rows)), []).append(req)
        return req

    def cancel(self, req: _GradientRequest) -> None:
        """Forget a request whose worker crashed before it was needed."""
        key = (id(req.params), len(req.rows))
        rest = [r for r in self._pending.get(key, []) if r is not req]
        if rest:
            self._pending[key] = rest
        else:
            self._pending.pop(key, None)

    def result(self, req: _GradientRequest) -> GradSum:
        if req.result is None:
            self._flush_like(req)
        return req.result

    def _take(self, first: _GradientRequest) -> list[_GradientRequest]:
        """The requests one flush serves: those on ``first``'s parameters, and with tiles every
        request of its batch size."""
        batch = len(first.rows)
        keys = [(id(first.params), batch)]
        if self.numerics.batches_parameters:
            keys = [key for key in self._pending if key[1] == batch]  # any order: sorted by worker after
        return [req for key in keys for req in self._pending.pop(key)]

    def _call(self, group: list[_GradientRequest], rows: np.ndarray, starts: np.ndarray | None) -> Any:
        """One recorded gradient call for ``group``: at their one set of parameters, or at each
        request's own (a tuple, one set a request: the program depends on the call's shape only)."""
        first = group[0].params
        if all(req.params is first for req in group):
            return self._gradients(first, rows, len(group), starts)
        return self._gradients(tuple(req.params for req in group), rows, len(group), starts)

    def _flush_like(self, first: _GradientRequest) -> None:
        # In worker order (a stable sort: ties keep request order), as all-reduces sum: one of
        # whole calls then adds the stacked rows where they are (numerics.sum_grads). Which
        # call serves a worker never changes its bits.
        same = sorted(self._take(first), key=_by_worker)
        for group in _calls(same, self.numerics.workers_per_call(len(first.rows), len(same))):
            rows = np.concatenate([r.rows for r in group])
            starts = self.numerics.starts([r.worker for r in group], len(first.rows))  # None: not needed
            result = self._call(group, rows, starts)
            for req, part in zip(group, parts_of(result, len(group), len(first.rows), starts, self.numerics.tile)):
                req.result = part
            tape = active_tape()
            if tape is not None:  # replay reports real step times next to these simulated ones
                tape.note_compute([r.duration_s for r in group])


def _calls(requests: list[_GradientRequest], most: int) -> list[list[_GradientRequest]]:
    """``requests`` cut into calls of at most ``most``, in order. A call at several parameter
    versions holds a power of two of them: each call's size is a compiled program of its own, and
    mixes of every size would compile one for each (an 8-worker ASGD run's calls: 4 sizes, not 8)."""
    calls, start = [], 0
    while start < len(requests):
        call = requests[start : start + most]
        if any(req.params is not call[0].params for req in call):
            call = call[: 1 << (len(call).bit_length() - 1)]
        calls.append(call)
        start += len(call)
    return calls


def _sum_values(values: list[Any]) -> Any:
    """The all-reduced value: gradient sums by :func:`sum_grads`, other pytrees by the same tree."""
    if any(v is None for v in values):
        return None
    if all(isinstance(v, GradSum) for v in values):
        return sum_grads(values)
    return values[0] if len(values) == 1 else tree_sum(values)


class _Collective:
    """One all-reduce call of a group: who has joined, when it starts, when it ends.

    Members wait for ``done`` from the moment they join; the blocked time of those still there is
    recorded as ``started`` is processed (:meth:`trace_waits`), member by member in the order they joined.
    """

    __slots__ = ("started", "done", "arrived", "waiting", "participants", "result", "nbytes", "sent", "start_s", "gather")

    def __init__(self, env: simpy.Environment, nbytes: float, trace: Tracer, gather: bool = False):
        self.started, self.done = env.event(), env.event()
        self.gather = gather  # an all-gather: the result is every value, the time a ring all-gather's
        self.arrived: list[tuple[int, Any]] = []
        self.waiting: list[tuple[str, float]] = []  # (member's name, when it joined), in the order they joined
        self.participants: list[int] = []  # who was in it, once started
        self.result: Any = None
        self.nbytes = nbytes
        self.sent: dict[int, float] | None = None  # bytes each participant sends, for algorithms other than the ring
        self.start_s = 0.0
        self.started.callbacks.append(lambda _: self.trace_waits(env.now, trace))  # type: ignore[union-attr]

    def trace_waits(self, now: float, trace: Tracer) -> None:
        self.start_s = now
        for name, arrived_s in self.waiting:
            if now > arrived_s:
                trace("wait", name, arrived_s, now, 0.0, "")


class Simulation:
    """Entities, links and primitives of one run. Built by :func:`fred.runs.runner.build`."""

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
    ):
        self.env, self.workers, self.network = env, workers, network
        # Fairly shared flows, or transfers booked first come, first served (network.sharing).
        sharing = network.config.sharing
        self.flows = HeldLinks(env, rtt=sharing == "rtt") if sharing != "fcfs" else None
        self.compute_model, self.gradients = compute_model, gradients
        self.init_params, self.param_bytes, self.seed = init_params, param_bytes, seed
        self.buckets = tuple(buckets)  # gradient buckets in backward order; () all-reduces the whole message
        self.tracers: list[Tracer] = []
        self.update_hooks: list[Callable[[list[Contribution], int], None]] = []
        self.compute_hooks: list[Callable[[GradSum], None]] = []
        self.report: dict[str, Any] = {}  # strategy facts for the summary (e.g. a grouping)
        self._collectives: dict[tuple[Any, int], _Collective] = {}
        self._joined: dict[tuple[Any, int], int] = {}
        self._started: dict[tuple[int, ...], int] = {}  # collectives started per group
        self._last_participants: dict[tuple[int, ...], list[int]] = {}
        self._mailboxes: dict[str, simpy.Store] = {}
        self._nccl_picks: dict[tuple[int, int, float], nccl.Estimate] = {}
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
        self._lossy = bool(self.faults.config.message_loss and self.faults.config.message_loss.probability > 0)
        self.faults.on_change(self._recheck_collectives)
        for worker in workers:
            network.add(worker.name, worker=worker.index)
        wpd = network.workers_per_device
        # Processes sharing a device take turns (GPU time-slicing): a step waits for the device.
        self._devices = [simpy.Resource(env, capacity=1) for _ in range(-(-len(workers) // wpd))] if wpd > 1 else None
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
        ``worker`` it acts for that worker from the start (a rejoined worker whose first step
        is the server's fetch, a primitive of the server, was otherwise not stopped by a
        second crash).
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
        self, worker: Worker, params: Params, duration_s: float | None = None,
        started: Callable[[float], None] | None = None, buckets: Sequence[simpy.Event] | None = None,
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
        request = self.gradients.request(params, worker.next_batch(), worker.index) if self.gradients else None
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
                    yield from self._step(worker, request, duration_s, started, with_host=False, buckets=buckets)
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

    def _step(self, worker: Worker, request: Any, duration_s: float | None,
              started: Callable[[float], None] | None = None, with_host: bool = True,
              buckets: Sequence[simpy.Event] | None = None) -> Generator[simpy.Event, Any, None]:
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
        self, src: str, dst: str, nbytes: float, kind: str = "send", payload: Any = NO_PAYLOAD,
        delivered: Callable[[], bool] | None = None,
    ) -> Generator[simpy.Event, Any, None]:
        """Move ``nbytes`` from ``src`` to ``dst``; a ``payload``, if given, is delivered to ``dst``'s mailbox.

        ``None`` is a payload like any other (a timing-only run's parameters are ``None``);
        without one, nothing is delivered and only the transfer is simulated.

        ``delivered``, asked on arrival, may say the message was lost on the way (its end
        went down): it is then recorded as ``lost``, not as ``kind``, and not delivered.
        """
        self._own_entity(src)
        if self.flows is not None:  # a flow: it starts now and ends when its share of the links lets it
            start_s, arrived = self.now, self.env.event()
            self._post(src, dst, nbytes, 1, arrived)
        else:  # booked first come, first served: it waits for its links, then takes its time
            transfer = self._book(src, dst, nbytes)
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

    def _post(self, src: str, dst: str, nbytes: float, hops: int, arrive: Arrival,
              sent: Callable[[], None] | None = None) -> None:
        """Start a flow now; ``sent`` is called when its last byte has left, ``arrive`` when it has
        arrived (an event is triggered). A lost attempt is traced when it would have arrived, and the
        flow is sent again a retransmit timeout after it started."""
        channels, latency_s = self.network.path(src, dst)
        latency_s *= hops
        if self.network.wan:
            self._across_sites(channels, nbytes)
        if self._lossy and self.faults.lost(src, dst):
            start_s = self.now
            self.flows.start(channels, nbytes, latency_s, lambda: self.trace("lost", src, start_s, self.now, nbytes, dst))  # type: ignore[union-attr]
            retry_s = self.faults.config.message_loss.retransmit_timeout_s  # type: ignore[union-attr]
            self.env.timeout(retry_s).callbacks.append(lambda _: self._post(src, dst, nbytes, hops, arrive, sent))
            return
        self.flows.start(channels, nbytes, latency_s, arrive, sent)  # type: ignore[union-attr]

    def _across_sites(self, channels: tuple[Any, ...], nbytes: float) -> None:
        """A ``wide_area`` event for each site's uplink a flow of ``nbytes`` crosses, as it starts: what
        the summary's ``bytes_between_sites`` adds up."""
        for port in self.network.wan:
            times = channels.count(port.tx)
            if times:
                self.trace("wide_area", port.name, self.now, self.now, nbytes * times)

    def _book(self, src: str, dst: str, nbytes: float, not_before_s: float | None = None) -> Transfer:
        """Book a transfer; each lost attempt is traced and resent after the retransmit timeout."""
        transfer = self.network.reserve(src, dst, nbytes, self.now, not_before_s)
        if not self._lossy:
            return transfer
        while self.faults.lost(src, dst):
            self.trace("lost", src, transfer.start_s, transfer.arrive_s, nbytes, dst)
            retry_s = transfer.start_s + self.faults.config.message_loss.retransmit_timeout_s  # type: ignore[union-attr]
            transfer = self.network.reserve(src, dst, nbytes, self.now, retry_s)
        return transfer

    def mailbox(self, entity: str) -> simpy.Store:
        """The FIFO of ``(sender, payload)`` messages delivered to ``entity``."""
        if entity not in self._mailboxes:
            self._mailboxes[entity] = simpy.Store(self.env)
        return self._mailboxes[entity]

    def allreduce(
        self, group: Sequence[Worker], member: Worker, nbytes: float, value: Any = None
    ) -> Generator[simpy.Event, Any, Any]:
        """Join the group's next ring all-reduce; returns the pairwise-tree sum of the values.

        Values are :class:`GradSum` (summed with their losses and counts) or any pytree
        of arrays (parameters, for model averaging); ``None`` from everyone times the
        collective without numbers.

        Members block until every member peers still wait for has joined (recorded as
        ``wait``; a crashed member is waited for until ``faults.sync_timeout_s``). The
        timing is the ring's, step by step; the sum is always taken in group order
        by the fixed tree, so it is the same bits whatever the ring did.
        """
        return self._join(group, member, nbytes, value, False)

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
        return self._join(group, member, nbytes, value, True)

    def _join(self, group: Sequence[Worker], member: Worker, nbytes: float, value: Any, gather: bool) -> Process:
        """:meth:`allreduce`, or with ``gather`` :meth:`allgather`: join the group's next collective."""
        if self._track:
            self._own(member)
        key = self._group_key(group)
        joined = (key, member.index)
        call = self._joined.get(joined, 0)
        self._joined[joined] = call + 1
        coll = self._collectives.get((key, call))
        if coll is None:
            coll = self._collectives[(key, call)] = _Collective(self.env, nbytes, self.trace, gather)
        elif coll.gather != gather:
            raise RuntimeError(f"{member.name} joined collective {call} of its group as an all-{'gather' if gather else 'reduce'} "
                               "while others joined it as the other kind: members must call them in the same order")
        coll.arrived.append((member.index, value))
        waiting = (member.name, self.env.now)
        coll.waiting.append(waiting)
        self._try_start(key, call, coll)
        self._collective_load(member, +1)
        try:
            yield coll.done
        except simpy.Interrupt:
            if coll.started.callbacks is not None:  # crashed before it started: its value never entered the ring
                coll.arrived = [a for a in coll.arrived if a[0] != member.index]
                coll.waiting.remove(waiting)
                if self.env.now > waiting[1]:
                    self.trace("wait", member.name, waiting[1], self.env.now)
            raise
        finally:
            self._collective_load(member, -1)
        sent = (len(coll.participants) - 1) * nbytes if gather else self._sent_in_allreduce(coll, member.index, nbytes)
        self.trace("allgather" if gather else "allreduce", member.name, coll.start_s, self.env.now, sent)
        return coll.result

    def backprop_allreduce(
        self, worker: Worker, params: Params, group: Sequence[Worker]
    ) -> Generator[simpy.Event, Any, Any]:
        """One gradient step, all-reduced over ``group``: the summed :class:`GradSum` (``None`` timing only).

        Without gradient buckets it is :meth:`compute` then :meth:`allreduce` of the whole
        message. With them (``workload.bucket_bytes``, :mod:`fred.simulation.buckets`), each
        bucket's all-reduce starts once the backward pass has made it and the bucket before it
        is all-reduced, while the step goes on; the last bucket, ready as the step ends, carries
        the gradient, so the sum is the same bits as without buckets.
        """
        if self._bucket_overhead_s or (self._share and len(self.buckets) > 1):
            return (yield from self._costed_buckets(worker, params, group))
        if len(self.buckets) < 2:
            grad = yield from self.compute(worker, params)
            return (yield from self.allreduce(group, worker, self.param_bytes, grad))
        began = self.env.event()
        early = self.process(self._early_buckets(worker, group, began))
        grad = yield from self.compute(worker, params, started=lambda duration_s: began.succeed((self.now, duration_s)))
        yield early
        return (yield from self.allreduce(group, worker, self.buckets[-1].nbytes, grad))

    def _costed_buckets(self, worker: Worker, params: Params, group: Sequence[Worker]) -> Process:
        """:meth:`backprop_allreduce` where the buckets cost compute time or slow it: each bucket is
        ready when the step's own progress reaches it (:meth:`_backward_in_buckets`)."""
        ready = [self.env.event() for _ in self.buckets[:-1]]
        early = self.process(self._ready_buckets(worker, group, ready))
        grad = yield from self.compute(worker, params, buckets=ready)
        yield early
        last = self.buckets[-1].nbytes if self.buckets else self.param_bytes
        return (yield from self.allreduce(group, worker, last, grad))

    def _ready_buckets(self, worker: Worker, group: Sequence[Worker], ready: Sequence[simpy.Event]) -> Process:
        """Every bucket but the last, one after another, each once its event says it is made."""
        for bucket, made in zip(self.buckets[:-1], ready):
            yield made
            yield from self.allreduce(group, worker, bucket.nbytes)

    def _early_buckets(self, worker: Worker, group: Sequence[Worker], began: simpy.Event) -> Process:
        """Every bucket but the last, one after another, each from when the backward pass made it."""
        start_s, duration_s = yield began
        for bucket in self.buckets[:-1]:
            ready_s = start_s + bucket.ready * duration_s
            if ready_s > self.now:
                yield self.env.timeout(ready_s - self.now)
            yield from self.allreduce(group, worker, bucket.nbytes)

    def _sent_in_allreduce(self, coll: _Collective, member: int, nbytes: float) -> float:
        """The bytes ``member`` sent in the collective: 2(p-1)/p of the message in a ring."""
        p, cfg = len(coll.participants), self.network.config
        if cfg.allreduce in ("ring", "nccl") and not cfg.hierarchical:  # nccl: as its ring, whichever it picked
            return 2 * (p - 1) * nbytes / p
        if coll.sent is None:  # once per collective, not once per member: p members, O(p log p) steps
            rounds = self._rounds([self.workers[i].name for i in coll.participants])
            sent = bytes_sent(rounds or [], p, coll.nbytes)
            coll.sent = {index: sent[position] for position, index in enumerate(coll.participants)}
        return coll.sent[member]

    def participants(self, group: Sequence[Worker]) -> list[int]:
        """Who took part in the group's latest started all-reduce (all, unless some crashed)."""
        return self._last_participants.get(self._group_key(group), [w.index for w in group])

    def _group_key(self, group: Sequence[Worker]) -> tuple[int, ...]:
        """A group's member indices. The whole crew (``self.workers``, never changed) is the
        usual group: every member joins with it, so building it per join would cost p^2."""
        return self._crew_key if group is self.workers else GroupKey(w.index for w in group)

    def _try_start(self, key: tuple[int, ...], call: int, coll: _Collective | None = None) -> None:
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
        if coll.gather:
            coll.result = None if any(v is None for v in values) else values
        else:
            coll.result = _sum_values(values)
        names = [self.workers[i].name for i in coll.participants]
        self.env.process(self._ring_then(names, coll.nbytes, coll.done, coll.gather))
        coll.started.succeed()

    def _ring_then(self, names: list[str], nbytes: float, done: simpy.Event, gather: bool = False) -> Process:
        """The collective's timing, then ``done``: triggered where the process ends, in its place."""
        yield from (self._ring_allgather(names, nbytes) if gather else self._ring(names, nbytes))
        done.succeed()

    def _ring_allgather(self, names: list[str], nbytes: float) -> Process:
        """All-gather timing: :func:`ring_allgather`'s rounds, booked transfer by transfer (as flows on
        fairly shared links), then S. Always a flat ring: NCCL's all-gather is a ring too."""
        yield from self._timed_rounds(names, ring_allgather(len(names)), nbytes)

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

    def _rounds(self, names: list[str]) -> list[Round] | None:
        """The collective's rounds of transfers among ``names``; None for the flat ring (booked by the network)."""
        cfg = self.network.config
        if cfg.hierarchical:
            by_node: dict[Any, list[int]] = {}  # in group order: a node's (or site's) first member is its leader
            within = self.network.site if cfg.hierarchy == "site" else self.network.node
            for position, name in enumerate(names):
                by_node.setdefault(within[name], []).append(position)
            return hierarchical(tuple(tuple(members) for members in by_node.values()), cfg.allreduce, self.flows is not None)
        if cfg.allreduce == "ring":  # flows: a flow per member per phase; booked: by the network
            return ring_phases(len(names)) if self.flows is not None else None
        return ALGORITHMS[cfg.allreduce](len(names))

    def _ring_as_flows(self, names: list[str], nbytes: float) -> Process:
        """A ring on fairly shared links: each phase is one flow across every member's link.

        A pipelined ring moves at its slowest link's pace (a chunk goes on only once the one
        before it arrived), so its phase is one rate on all its links: (p-1)/p of the message,
        p-1 latencies, then the reduce-scatter's additions. Two flows per all-reduce, whatever p.
        With lost messages each member's phase is a flow of its own (:meth:`_rounds_as_flows`).
        """
        p, cfg = len(names), self.network.config
        paths = [self.network.path(names[i], names[(i + 1) % p]) for i in range(p)]
        channels = tuple(channel for hop, _ in paths for channel in hop)
        latency_s = (p - 1) * max(hop_latency_s for _, hop_latency_s in paths)
        phase_bytes = (p - 1) / p * nbytes
        for reduce in (True, False):
            arrived = self.env.event()
            if self.network.wan:
                self._across_sites(channels, phase_bytes)
            self.flows.start(channels, phase_bytes, latency_s, arrived)  # type: ignore[union-attr]
            yield arrived
            if reduce and phase_bytes * cfg.reduce_s_per_byte > 0.0:
                yield self.env.timeout(phase_bytes * cfg.reduce_s_per_byte)
        yield self.env.timeout(cfg.sync_s)

    def _rounds_as_flows(self, names: list[str], rounds: list[Round], nbytes: float) -> Process:
        """Rounds of transfers (an all-reduce's, an all-gather's) on fairly shared links: each step a
        flow, started when its ends are ready; timed in one piece while nothing else is on its links
        (:func:`on_idle_links`)."""
        done = self.env.event()
        post = lambda src, dst, n, hops, arrive, sent: self._post(names[src], names[dst], n, hops, arrive, sent)  # noqa: E731
        later = lambda delay_s, then: self.env.timeout(delay_s).callbacks.append(lambda _: then())  # noqa: E731
        run = RoundsAsFlows(rounds, len(names), nbytes, self.network.config.reduce_s_per_byte, post, later,
                            lambda: done.succeed(), start=False)
        # Timed in one piece, its transfers would not be seen crossing sites, and with rtt sharing a flow's
        # bytes start after its latency where the piece assumes after.
        if self._lossy or self.flows.rtt or self.network.wan or \
                not on_idle_links(run, self.flows, names, self.network.path):  # type: ignore
            run.start()
        yield done
        yield self.env.timeout(self.network.config.sync_s)

    def _nccl(self, names: list[str], nbytes: float) -> nccl.Estimate:
        """NCCL's pick for ``nbytes`` among ``names`` and its time (:mod:`fred.simulation.nccl`); the
        first of each size and group shape is told in the summary's ``nccl`` list."""
        cfg = self.network.config
        nodes = len({self.network.node[name]: None for name in names})
        key = (len(names), nodes, nbytes)
        known = self._nccl_picks.get(key)
        if known is None:
            allowed = cfg.nccl or NcclConfig()
            fabric = nccl.Fabric(len(names), nodes, cfg.intra_node.rate_bps(), cfg.bandwidth_bps * cfg.efficiency,
                                 allowed.intra_link)
            known = self._nccl_picks[key] = nccl.choose(nbytes, fabric, allowed.algorithms, allowed.protocols)
            self.report.setdefault("nccl", []).append(
                f"{nbytes:.6g} bytes over {len(names)} ranks on {nodes} nodes: {known.algorithm}/{known.protocol}, "
                f"{known.time_s * 1e3:.4g} ms")
        return known

    def _timed_rounds(self, names: list[str], rounds: list[Round], nbytes: float) -> Process:
        """Rounds of transfers among ``names``, then S: as flows on fairly shared links, else booked
        transfer by transfer. Only a step marked ``reduce`` costs gamma (an all-gather's none)."""
        if self.flows is not None:
            yield from self._rounds_as_flows(names, rounds, nbytes)
            return
        book = lambda src, dst, n, at: self._book(names[src], names[dst], n, at).arrive_s  # noqa: E731
        done_s = run_rounds(book, rounds, len(names), nbytes, self.network.config.reduce_s_per_byte, self.now)
        yield self.env.timeout(done_s - self.now + self.network.config.sync_s)

    def _ring(self, names: list[str], nbytes: float) -> Process:
        """All-reduce timing: the scenario's algorithm, booked transfer by transfer, then S.

        The ring sends 2(p-1) chunks per member and reduces p-1 of them; each chunk
        transfer is booked on its two links in step order, once its sender has received
        (and, while reducing, folded in) its predecessor's chunk. The whole schedule is
        booked when the collective starts, then waited out at once: the same times as one
        process per member, without their events. On idle, uniform links without message
        loss the ring is booked in one pass over one shared timeline
        (:meth:`Network.ring_on_idle_links`): the same times and link state. Other
        algorithms are rounds of transfers (:mod:`fred.simulation.collectives`).
        """
        cfg = self.network.config
        if cfg.allreduce == "nccl":
            yield self.env.timeout(self._nccl(names, nbytes).time_s + cfg.sync_s)
            return
        if self.flows is not None and cfg.allreduce == "ring" and not cfg.hierarchical and not self._lossy:
            yield from self._ring_as_flows(names, nbytes)
            return
        rounds = self._rounds(names)
        if self.flows is not None or rounds is not None:
            yield from self._timed_rounds(names, rounds or [], nbytes)
            return
        chunk = nbytes / len(names)
        reduce_s = chunk * cfg.reduce_s_per_byte
        done_s = None if self._lossy else self.network.ring_on_idle_links(names, chunk, reduce_s, self.now)
        if done_s is None:  # contention, a degraded link or lost chunks: book chunk by chunk
            done_s = ring_by_chunk(self._book, names, chunk, reduce_s, self.now)
        yield self.env.timeout(done_s - self.now + cfg.sync_s)
