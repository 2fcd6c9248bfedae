"""The outer all-reduce of DiLoCo and Local SGD, optionally quantised: ``outer_compression``.

    every worker, at an outer step:
        d_i <- Q(d_i)                    (d_i: DiLoCo's outer gradient, Local SGD's change since the
                                          last average; Q: the codec's rounding, :mod:`fred.numerics.codecs`)
        compress:    codec_s_per_byte x the raw bytes of d_i
        all-reduce:  sum_i Q(d_i), the codec's wire bytes on the links
        decompress:  codec_s_per_byte x the raw bytes of d_i

Each worker rounds what it sends once and the sum is added in float32, as OpenDiLoCo's fp16 and
INTELLECT-1's int8 all-reduces of the outer gradients receive them (a ring that re-rounded each
partial sum on its way would round more). The codecs are ``fp16`` (the 16 high bits of each float32),
``int8`` (256 levels per tensor between its min and max: a scale and an offset per tensor) and
``e3m0`` (4-bit floats scaled per tensor, Streaming DiLoCo's), all rounded bit-exactly
(:mod:`fred.numerics.codecs.quantize`).
"""

from __future__ import annotations

from typing import Annotated, Any, Union

import jax
import jax.numpy as jnp
from pydantic import Field, field_validator

from fred.numerics import codecs
from fred.numerics.models import Params
from fred.numerics.tape import op
from fred.scenario.schema import StrategyConfig
from fred.simulation.engine import Simulation, Worker
from strategies._compression import E3M0, FP16, Int8, compression_by_kind, quantizer

OuterCompression = Annotated[Union[FP16, Int8, E3M0], Field(discriminator="kind")]


class OuterCompressed(StrategyConfig):
    """The settings of an outer all-reduce that may be quantised: ``outer_compression`` and its cost."""

    outer_compression: OuterCompression | None = Field(
        default=None,
        description="round what each worker sends in the outer all-reduce: {kind: fp16} (half the "
        "bytes), {kind: int8} (a quarter, and a scale and offset per tensor) or {kind: e3m0} (an "
        "eighth, and a scale per tensor); none: float32 (docs/strategies.md#quantised-outer-all-reduce)",
    )
    codec_s_per_byte: float = Field(
        default=0.0,
        ge=0,
        description="the outer codec's compute per raw byte, once to compress and once to decompress",
    )

    _outer_compression_kind = field_validator("outer_compression", mode="before")(compression_by_kind)

    def outer_codec(self) -> codecs.Quantizer | None:
        """The codec ``outer_compression`` names (None: float32 on the wire)."""
        return None if self.outer_compression is None else quantizer(self.outer_compression)


def leaf_count(params: Params) -> int:
    """The tensors of ``params``: each has its own scale (and offset) on the wire."""
    return len(jax.tree.leaves(params))


def codec_work(sim: Simulation, w: Worker, raw_bytes: float, kind: str, config: OuterCompressed):
    """The codec's compute on ``raw_bytes`` of float32 (``kind``: compress or decompress), if any."""
    codec_s = config.codec_s_per_byte * raw_bytes if config.outer_compression is not None else 0.0
    if codec_s:
        yield from sim.work(w.name, codec_s, kind)


def outer_allreduce(
    sim: Simulation, w: Worker, raw_bytes: float, tensors: int, value: Any, codec: codecs.Quantizer | None
):
    """Join the outer all-reduce of every worker with ``value`` (already rounded by ``codec``):
    ``raw_bytes`` of float32 in ``tensors`` tensors, sent as the codec's wire bytes (without a
    codec, ``raw_bytes``)."""
    nbytes = raw_bytes if codec is None else codec.wire_bytes(raw_bytes, tensors)
    return (yield from sim.allreduce(sim.workers, w, nbytes, value))


def compressed_allreduce(
    sim: Simulation, w: Worker, raw_bytes: float, tensors: int, value: Any, config: OuterCompressed
):
    """:func:`outer_allreduce` between the codec's compress and decompress."""
    yield from codec_work(sim, w, raw_bytes, "compress", config)
    total = yield from outer_allreduce(sim, w, raw_bytes, tensors, value, config.outer_codec())
    yield from codec_work(sim, w, raw_bytes, "decompress", config)
    return total


@op("strategies._outer_exchange:recentre")
@jax.jit
def recentre(previous: Params, total: Params, n: int) -> Params:
    """``previous - total / n``: the average of the workers' parameters, from the sum of their
    (rounded) changes since ``previous``."""
    return jax.tree.map(lambda p, t: p - t / n, previous, total)


@op("strategies._outer_exchange:change")
@jax.jit
def change(previous: Params, params: Params) -> Params:
    """``previous - params``: what a worker moved since the last average, as an outer gradient."""
    return jax.tree.map(jnp.subtract, previous, params)
