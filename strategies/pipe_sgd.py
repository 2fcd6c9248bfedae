"""Pipe-SGD (Li et al., Algorithm 1): a compute thread and a communication thread per worker.

    compute thread, iteration t = 0, 1, ...:
        if t >= k + 1: wait for g_sum[t - (k + 1)]; decompress it;
                       w[t] <- w[t - 1] - lr * g_sum[t - (k + 1)]      (l_up)
        g_local[t] <- gradient at w[t]                                 (l_comp)
        compress g_local[t]; hand it to the communication thread
    communication thread, forever:
        wait for g_local[t];  g_sum[t] <- ring all-reduce of g_local[t]   (l_comm)

The staleness is exactly k (k = 1 is the paper's choice; k = 0 is AR-SGD, bit for
bit). In steady state an iteration takes max(l_up + l_comp, l_comm). With
``pipeline_level: 2`` the gradient is all-reduced in ``segments`` pieces one after
another (L times the latency and sync terms). Compression changes the bytes on the
wire and the numbers: the update uses what the receivers reconstruct
(``compression: {kind: fp16}`` or ``{kind: int8}``, :mod:`fred.numerics.codecs.quantize`).

The codec's time (``codec_s_per_byte`` per raw byte) is charged where the paper's
implementation spends it. ``codec_at: ends`` charges the compression of g_local and the
decompression of g_sum on the compute thread (Algorithm 1, lines 4 and 9). ``every_hop``
adds the work inside the ring: a compressed ring cannot add compressed chunks, so each of
its p - 1 reduce-scatter steps decompresses the chunk it received, adds its own and
compresses the sum again ("compression is invoked repeatedly, complexity O(p)", the
paper's reason to keep the codec light). That is 2 (p - 1)/p n of codec work per
all-reduce, on the communication thread, after the ring's transfers (the same total as
interleaved with them when the members run alike: every step waits for its neighbour).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

import simpy
from pydantic import Field, field_validator

from fred.numerics.gradients import GradSum
from fred.numerics.optim import make_sum_step, optimizer_for
from fred.scenario.registry import register
from fred.scenario.schema import GradientSteps, Scenario, StrategyConfig
from fred.simulation.engine import Simulation, Worker
from strategies._compression import FP16, Int8, compression_by_kind, quantizer

Compression = Annotated[Union[FP16, Int8], Field(discriminator="kind")]


class PipeSGD(StrategyConfig):
    name: Literal["pipe_sgd"] = "pipe_sgd"
    applies_optimizer = True
    lr: float = Field(default=0.1, gt=0)
    staleness: int = Field(default=1, ge=0, description="k: iteration t applies the sum of iteration t-(k+1)")
    pipeline_level: Literal[1, 2] = 1
    segments: int = Field(
        default=4, ge=1, le=4096, description="L: gradient pieces all-reduced in turn at level 2"
    )
    compression: Compression | None = Field(
        default=None,
        description="round every value on the wire: {kind: fp16} (half the bytes) or {kind: int8} "
        "(a quarter, plus min and max per tensor); none: plain (docs/strategies.md, pipe_sgd)",
    )
    codec_s_per_byte: float = Field(default=0.0, ge=0, description="compress or decompress cost per raw byte")
    codec_at: Literal["ends", "every_hop"] = Field(
        default="ends",
        description="ends: compress g_local and decompress g_sum on the compute thread; "
        "every_hop: also decompress, add and recompress at each reduce-scatter step of the ring",
    )
    update_s: float = Field(default=0.0, ge=0, description="l_up: time to apply one update")

    _compression_kind = field_validator("compression", mode="before")(compression_by_kind)

    def gradient_steps(self, scenario: Scenario, updates: int) -> GradientSteps:
        # every worker computes k + 1 iterations before the first update (the pipeline's fill), then one an
        # update
        return GradientSteps(
            (updates + self.staleness) * scenario.cluster.workers, "a smaller strategy.staleness"
        )


def ring_codec_s(p: int, raw_bytes: float, s_per_byte: float) -> float:
    """Codec seconds inside one compressed ring all-reduce of ``raw_bytes`` over ``p`` members:
    p - 1 reduce-scatter steps, each decoding and re-encoding a chunk of raw_bytes / p."""
    return 2 * (p - 1) / p * raw_bytes * s_per_byte


@register(PipeSGD, timing_only=True)
def start(sim: Simulation, config: PipeSGD):
    k = config.staleness
    opt = optimizer_for(config)
    step = make_sum_step(opt)
    models = {0: sim.init_params}  # w[t], the same on every worker: computed once
    states = {0: opt.init(sim.init_params)}  # the optimizer's state that came with w[t]
    tensors = len(sim.init_params)
    codec = None if config.compression is None else quantizer(config.compression)
    wire = float(sim.param_bytes) if codec is None else codec.wire_bytes(sim.param_bytes, tensors)
    codec_s = config.codec_s_per_byte * sim.param_bytes if codec is not None else 0.0
    every_hop = codec_s and config.codec_at == "every_hop"
    hop_s = ring_codec_s(len(sim.workers), sim.param_bytes, config.codec_s_per_byte) if every_hop else 0.0
    sums: dict[tuple[int, int], simpy.Event] = {}  # (worker, t) -> g_sum[t] ready on that worker

    def summed(w: Worker, t: int) -> simpy.Event:
        return sums.setdefault((w.index, t), sim.env.event())

    def model(t: int, arrived: bool, g_sum: GradSum | None) -> Any:
        """w[t]; ``arrived``: g_sum[t-(k+1)] came (``None`` in a timing-only run: no numbers)."""
        if t not in models:
            previous = models[t - 1]
            # The worker making w[t] got g_sum[t-k-1], so every worker has finished iteration
            # t-k-1 and reads w[t-k] or later: older versions go (with k >= 2 a slower worker
            # can still be about to read w[t-1], so that one stays).
            models.pop(t - k - 1, None)
            state = states.pop(t - 1)  # only w[t] is ever made from it
            models[t], states[t] = previous, state
            if arrived:
                if g_sum is not None:
                    models[t], states[t] = step(previous, state, g_sum.grad, g_sum.count)
                read = max(0, t - 2 * k - 1)  # the version w[t-(k+1)] had
                sim.applied([(i, read) for i in sim.participants(sim.workers)], max(0, t - k - 1))
        return models[t]

    def compute_thread(w: Worker, outbox: simpy.Store):
        for t in range(10**12):
            g_sum, arrived = None, t >= k + 1
            if arrived:
                g_sum = yield from sim.wait_for(w.name, summed(w, t - k - 1))
                if codec_s:
                    yield from sim.work(w.name, codec_s, "decompress")
                if config.update_s:
                    yield from sim.work(w.name, config.update_s, "update")
            g = yield from sim.compute(w, model(t, arrived, g_sum))
            if codec_s:
                yield from sim.work(w.name, codec_s, "compress")
            if codec is not None and g is not None:
                g = GradSum(codec.roundtrip(g.grad), g.loss, g.count)
            yield outbox.put((t, g))

    def comm_thread(w: Worker, outbox: simpy.Store):
        pieces = config.segments if config.pipeline_level == 2 else 1
        while True:
            t, g = yield outbox.get()
            for piece in range(pieces):  # level 2: segment after segment; the sum rides on the last
                last = piece == pieces - 1
                total = yield from sim.allreduce(sim.workers, w, wire / pieces, g if last else None)
                if hop_s:
                    yield from sim.work(w.name, hop_s / pieces, "codec")
            summed(w, t).succeed(total)

    for w in sim.workers:
        outbox = simpy.Store(sim.env)
        sim.process(compute_thread(w, outbox))
        sim.process(comm_thread(w, outbox))
    return lambda: models[max(models)]
