"""ZeRO-3's gradient step: parameters all-gathered layer by layer, one layer ahead of the compute.

Under ZeRO stage 3 (Rajbhandari et al., 2020; PyTorch's FSDP) each worker keeps only its
``1/p`` shard of the parameters, so every layer's parameters are all-gathered before its
forward pass and again before its backward pass (they are freed in between), and the
gradient is reduce-scattered in buckets as the backward pass makes them. A step of
duration ``D`` is split as gradient buckets split it (:mod:`fred.simulation.buckets`): layer
``i``'s forward takes ``f_i D / 3F``, its backward ``2 f_i D / 3F`` (:attr:`Simulation.layers
<fred.simulation.engine.Simulation.layers>`, the workload profile's or the model's layers;
without them, one layer of the whole message).

One communication stream per worker issues, in an order every worker shares (so that the
group's collectives match up): the gather of each *use* of a layer (its forward, then in
reverse its backward), each no earlier than the compute of the use before it begins (the
prefetch, one layer ahead), and after each gather the reduce-scatters of the buckets the
backward pass has made by the end of the use before it. A use's compute waits for its gather
(recorded as ``wait``). When every layer's compute lasts at least its gather, only the first
gather is exposed: on idle links the step takes ``AG(n_0/p) + D + RS(n)``. Traffic per member:
two all-gathers and a reduce-scatter of the model, ``3 (p-1)/p n``, 1.5 times a ring
all-reduce's ``2 (p-1)/p n``. The last bucket, reduce-scattered as the step ends, carries the
gradient: the sum is the all-reduce's, bit for bit.
"""

from __future__ import annotations

from typing import Any, Generator, Sequence

import simpy

from fred.numerics.models import Params
from fred.simulation.buckets import Bucket, LayerShare
from fred.simulation.worker import Worker

Process = Generator[simpy.Event, Any, Any]
READY_SLACK = 1e-9  # a bucket's ready fraction and the summed shares may differ in the last bits


def uses(layers: Sequence[LayerShare]) -> list[tuple[float, float]]:
    """``(parameter bytes, share of the step)`` of each pass over a layer, in the order they run:
    every layer's forward, then every layer's backward in reverse."""
    forward = [(layer.nbytes, layer.forward / 3) for layer in layers]
    backward = [(layer.nbytes, 2 * layer.forward / 3) for layer in reversed(layers)]
    return forward + backward


def sharded_step(sim: Any, worker: Worker, params: Params, group: Sequence[Worker]) -> Process:
    """One gradient step of ``worker`` under ZeRO-3; returns the group's summed gradient
    (``None`` in a timing-only run). ``sim`` is the :class:`~fred.simulation.engine.Simulation`."""
    passes = uses(sim.layers or (LayerShare(sim.param_bytes, 1.0),))
    duration_s = sim.compute_model.duration_s(worker.index, sim.now)
    started, ended, gathered = ([sim.env.event() for _ in passes] for _ in range(3))
    stream = sim.process(_stream(sim, worker, group, passes, started, ended, gathered))
    for j, (_, share) in enumerate(passes[:-1]):
        yield from sim.wait_for(worker.name, gathered[j])
        started[j].succeed()
        yield from sim.work(worker.name, share * duration_s, "compute")
        ended[j].succeed()
    yield from sim.wait_for(worker.name, gathered[-1])
    started[-1].succeed()
    grad = yield from sim.compute(worker, params, duration_s=passes[-1][1] * duration_s)
    left: list[Bucket] = yield stream
    for bucket in left:  # made by the last pass (a scenario whose layers the buckets were not cut from)
        yield from sim.reduce_scatter(group, worker, bucket.nbytes)
    last = sim.buckets[-1].nbytes if sim.buckets else sim.param_bytes
    return (yield from sim.reduce_scatter(group, worker, last, grad))


def _stream(
    sim: Any,
    worker: Worker,
    group: Sequence[Worker],
    passes: list[tuple[float, float]],
    started: list[simpy.Event],
    ended: list[simpy.Event],
    gathered: list[simpy.Event],
) -> Process:
    """The worker's communication stream during a step: each pass's gather, one pass ahead of
    the compute, and the reduce-scatter of each bucket once made; returns the buckets not yet
    made when the last pass begins."""
    pending = list(sim.buckets[:-1])
    done = 0.0  # the share of the step made by the end of the pass before
    for j, (nbytes, _) in enumerate(passes):
        if j > 0:
            yield started[j - 1]
        if nbytes > 0:
            yield from sim.allgather(group, worker, nbytes / len(group))
        gathered[j].succeed()
        if j > 0:
            done += passes[j - 1][1]
            while pending and pending[0].ready <= done + READY_SLACK:
                yield ended[j - 1]
                yield from sim.reduce_scatter(group, worker, pending.pop(0).nbytes)
    return pending
