"""Stateless codecs that round every value on the wire: ``fp16``, ``int8`` and ``e3m0``.

    sender:   send roundtrip(g)              (wire_bytes of it)
    receiver: uses exactly those values      (the update sees the rounding)

``fp16`` zeroes the 16 low mantissa bits of every float32 (a bfloat16 on the wire, half the
bytes); ``int8`` maps each tensor linearly onto 256 levels between its min and max and back (a
quarter of the bytes, plus the min and max of every tensor); ``e3m0`` sends each value as a 4-bit
float of a sign and 3 exponent bits, no mantissa (Streaming DiLoCo's outer gradients), scaled per
tensor by its largest magnitude ``s`` (an eighth of the bytes, plus ``s`` of every tensor):

    m <- |x| / s                                   (in [0, 1]; s = max |x| of the tensor, float32)
    m = f 2^e, f in [0.5, 1)                       (frexp: exact)
    q <- 2^e if f >= 0.75 else 2^(e-1)             (the nearest power of two; a tie goes up)
    q <- 0 if m < 2^-7; 2^-6 if q < 2^-6           (8 magnitudes: 0, 2^-6 .. 2^0; 2^-7 is halfway to 0)
    x <- sign(x) (q s)                             (q s is exact: q is a power of two)

A tensor of zeros (``s = 0``) is sent as it is.
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


E3M0_SMALLEST = 2.0**-6  # the least non-zero magnitude, in units of the tensor's largest


def _e3m0(x: jax.Array) -> jax.Array:
    scale = jnp.max(jnp.abs(x))
    m = jnp.abs(x) / jnp.where(scale > 0, scale, 1.0)
    f, e = jnp.frexp(m)
    q = jnp.ldexp(jnp.ones_like(m), jnp.where(f >= 0.75, e, e - 1))
    q = jnp.where(m < E3M0_SMALLEST / 2, 0.0, jnp.maximum(q, E3M0_SMALLEST))
    v = q * scale
    return jnp.where(scale > 0, jnp.where(x < 0, -v, v), x)


@op("fred.numerics.codecs.quantize:e3m0_quantize")
@jax.jit
def e3m0_quantize(tree: Params) -> Params:
    """Send each value as sign, 3 exponent bits and no mantissa, times the tensor's largest magnitude."""
    return jax.tree.map(_e3m0, tree)


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


def e3m0() -> Quantizer:
    """An eighth of the bytes (4 bits a value), plus the float32 scale of every tensor (4 bytes each)."""
    return Quantizer("e3m0", e3m0_quantize, lambda param_bytes, tensors: param_bytes / 8 + 4 * tensors)


# by the kind a scenario names
QUANTIZERS: dict[str, Callable[[], Quantizer]] = {"fp16": fp16, "int8": int8, "e3m0": e3m0}
