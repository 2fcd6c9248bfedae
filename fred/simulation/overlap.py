"""Gradient steps that overlap their communication with their compute: the engine's
``backprop_allreduce``, ``backprop_reduce_scatter`` and ``backprop_sharded``.

:class:`OverlappedSteps` is a part of :class:`~fred.simulation.engine.Simulation` (a base
class): its methods compose the engine's primitives (``compute``, ``work``, ``allreduce``,
``reduce_scatter``, ``allgather``) into one gradient step whose gradient leaves in buckets as
the backward pass makes them (:mod:`fred.simulation.buckets`), or, under ZeRO-3, whose
parameters arrive layer by layer as the passes need them (:mod:`fred.simulation.sharding`).
In every case the last collective, joined as the step ends, carries the whole gradient, so
the sum is the same bits as one all-reduce after the step.
"""

from __future__ import annotations

from typing import Any, Callable, Generator, Sequence

import simpy

from fred.numerics.models import Params
from fred.simulation import sharding
from fred.simulation.worker import Worker

Process = Generator[simpy.Event, Any, Any]
Reduce = Callable[[Sequence[Worker], Worker, float, Any], Process]  # allreduce or reduce_scatter


class OverlappedSteps:
    """The gradient steps of :class:`~fred.simulation.engine.Simulation` that overlap compute
    and communication (a base class of it: ``self`` is the simulation)."""

    def backprop_allreduce(self, worker: Worker, params: Params, group: Sequence[Worker]) -> Process:
        """One gradient step, all-reduced over ``group``: the summed :class:`GradSum` (``None`` timing only).

        Without gradient buckets it is :meth:`compute` then :meth:`allreduce` of the whole
        message. With them (``workload.bucket_bytes``, :mod:`fred.simulation.buckets`), each
        bucket's all-reduce starts once the backward pass has made it and the bucket before it
        is all-reduced, while the step goes on; the last bucket, ready as the step ends, carries
        the gradient, so the sum is the same bits as without buckets.
        """
        return (yield from self._backprop(worker, params, group, self.allreduce))  # type: ignore[attr-defined]

    def backprop_reduce_scatter(self, worker: Worker, params: Params, group: Sequence[Worker]) -> Process:
        """:meth:`backprop_allreduce` whose buckets are reduce-scattered (ZeRO stages 1 and 2):
        the same sum, each bucket's ring reduce-scatter's time and bytes."""
        return (yield from self._backprop(worker, params, group, self.reduce_scatter))  # type: ignore[attr-defined]

    def backprop_sharded(self, worker: Worker, params: Params, group: Sequence[Worker]) -> Process:
        """One gradient step of ZeRO-3 (:func:`fred.simulation.sharding.sharded_step`): each
        layer's parameters all-gathered before its forward and again before its backward, one
        layer ahead of the compute, and the gradient reduce-scattered in buckets; the same sum."""
        return (yield from sharding.sharded_step(self, worker, params, group))

    def _backprop(self, worker: Worker, params: Params, group: Sequence[Worker], reduce: Reduce) -> Process:
        sim: Any = self
        if sim._bucket_overhead_s or (sim._share and len(sim.buckets) > 1):
            return (yield from self._costed_buckets(worker, params, group, reduce))
        if len(sim.buckets) < 2:
            grad = yield from sim.compute(worker, params)
            return (yield from reduce(group, worker, sim.param_bytes, grad))
        began = sim.env.event()
        early = sim.process(self._early_buckets(worker, group, began, reduce))
        grad = yield from sim.compute(
            worker, params, started=lambda duration_s: began.succeed((sim.now, duration_s))
        )
        yield early
        return (yield from reduce(group, worker, sim.buckets[-1].nbytes, grad))

    def _costed_buckets(
        self, worker: Worker, params: Params, group: Sequence[Worker], reduce: Reduce
    ) -> Process:
        """:meth:`_backprop` where the buckets cost compute time or slow it: each bucket is
        ready when the step's own progress reaches it (``Simulation._backward_in_buckets``)."""
        sim: Any = self
        ready = [sim.env.event() for _ in sim.buckets[:-1]]
        early = sim.process(self._ready_buckets(worker, group, ready, reduce))
        grad = yield from sim.compute(worker, params, buckets=ready)
        yield early
        last = sim.buckets[-1].nbytes if sim.buckets else sim.param_bytes
        return (yield from reduce(group, worker, last, grad))

    def _ready_buckets(
        self, worker: Worker, group: Sequence[Worker], ready: Sequence[simpy.Event], reduce: Reduce
    ) -> Process:
        """Every bucket but the last, one after another, each once its event says it is made."""
        for bucket, made in zip(self.buckets[:-1], ready):  # type: ignore[attr-defined]
            yield made
            yield from reduce(group, worker, bucket.nbytes, None)

    def _early_buckets(
        self, worker: Worker, group: Sequence[Worker], began: simpy.Event, reduce: Reduce
    ) -> Process:
        """Every bucket but the last, one after another, each from when the backward pass made it."""
        sim: Any = self
        start_s, duration_s = yield began
        for bucket in sim.buckets[:-1]:
            ready_s = start_s + bucket.ready * duration_s
            if ready_s > sim.now:
                yield sim.env.timeout(ready_s - sim.now)
            yield from reduce(group, worker, bucket.nbytes, None)
