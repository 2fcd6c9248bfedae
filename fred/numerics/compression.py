"""Gradient compression: what goes on the wire, and the numbers that come back.

Pure functions on pytrees of float32 arrays. Each scheme returns the values the
receiver reconstructs (what training then uses) and the bytes it costs.
"""

from __future__ import annotations

from typing import Literal

import jax
import jax.numpy as jnp

from fred.numerics.models import Params
from fred.numerics.tape import op

Scheme = Literal["none", "fp16_truncate", "int8_quantize"]


@op("fred.numerics.compression:fp16_truncate")
@jax.jit
def fp16_truncate(tree: Params) -> Params:
    """Zero the 16 low mantissa bits of every float32 (a bfloat16 on the wire)."""

    def cut(x: jax.Array) -> jax.Array:
        bits = jax.lax.bitcast_convert_type(x, jnp.uint32) & jnp.uint32(0xFFFF0000)
        return jax.lax.bitcast_convert_type(bits, jnp.float32)

    return jax.tree.map(cut, tree)


@op("fred.numerics.compression:int8_quantize")
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


def roundtrip(scheme: Scheme, tree: Params) -> Params:
    """The values a receiver reconstructs from ``tree`` sent with ``scheme``."""
    if scheme == "fp16_truncate":
        return fp16_truncate(tree)
    if scheme == "int8_quantize":
        return int8_quantize(tree)
    return tree


def wire_bytes(scheme: Scheme, param_bytes: float, tensors: int) -> float:
    """Bytes of one compressed message of a ``param_bytes`` float32 gradient in ``tensors`` tensors."""
    if scheme == "fp16_truncate":
        return param_bytes / 2
    if scheme == "int8_quantize":
        return param_bytes / 4 + 8 * tensors  # one byte per value, plus min and max per tensor
    return float(param_bytes)
