"""Stateless codecs that round every value on the wire: ``fp16`` and ``int8``.

    sender:   send roundtrip(g)              (wire_bytes of it)
    receiver: uses exactly those values      (the update sees the rounding)

``fp16`` zeroes the 16 low mantissa bits of every float32 (a bfloat16 on the wire, half the
bytes); ``int8`` maps each tensor linearly onto 256 levels between its min and max and back (a
quarter of the bytes, plus the min and max of every tensor).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp

from fred.numerics.codecs.base import EmptyState
from fred.numerics.models import Params
from fred.numerics.tape import op


@op("fred.numerics.codecs.quantize:fp16_truncate")
@jax.jit
def fp16_truncate(tree: Params) -> Params:
    """Zero the 16 low mantissa bits of every float32 (a bfloat16 on the wire)."""

    def cut(x: jax.Array) -> jax.Array:
        bits = jax.lax.bitcast_convert_type(x, jnp.uint32) & jnp.uint32(0xFFFF0000)
        return jax.lax.bitcast_convert_type(bits, jnp.float32)

    return jax.tree.map(cut, tree)


@op("fred.numerics.codecs.quantize:int8_quantize")
@jax.jit
def int8_quantize(tree: Params) -> Params:
    """Map each tensor linearly onto 256 levels between its min and max, and back."""

    def levels(x: jax.Array) -> jax.Array:
        lo, hi = jnp.min(x), jnp.max(x)
        step = (hi - lo) / 255
        safe = jnp.where(step > 0, step, 1.0)
        q = jnp.clip(jnp.round((x - lo) / safe), 0, 255)
        return jnp.where(step > 0, lo + q * step, x)

    return jax.tree.map(levels, tree)


class Quantizer(NamedTuple):
    """A stateless codec: ``update(grad, state) -> (the values the receiver reconstructs, state)``;
    ``wire_bytes(param_bytes, tensors)``: one message of a ``param_bytes`` float32 gradient in
    ``tensors`` tensors."""

    kind: str
    roundtrip: Callable[[Params], Params]
    wire_bytes: Callable[[float, int], float]

    def init(self, params: Params) -> EmptyState:
        return EmptyState()

    def update(self, grad: Params, state: EmptyState) -> tuple[Params, EmptyState]:
        return self.roundtrip(grad), state


def fp16() -> Quantizer:
    """Half the bytes: every float32 sent as its high 16 bits."""
    return Quantizer("fp16", fp16_truncate, lambda param_bytes, tensors: param_bytes / 2)


def int8() -> Quantizer:
    """A quarter of the bytes, plus min and max per tensor (8 bytes each)."""
    return Quantizer("int8", int8_quantize, lambda param_bytes, tensors: param_bytes / 4 + 8 * tensors)


QUANTIZERS: dict[str, Callable[[], Quantizer]] = {"fp16": fp16, "int8": int8}  # by the kind a scenario names
