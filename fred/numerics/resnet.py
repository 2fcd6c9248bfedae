"""He et al.'s CIFAR ResNet (Deep Residual Learning for Image Recognition, CVPR 2016, section 4.2).

A 3x3 convolution of ``width`` channels, then three stages of ``(depth - 2) / 6`` basic blocks
(two 3x3 convolutions each) of ``width``, ``2 width`` and ``4 width`` channels, the first block
of stages 2 and 3 striding by 2; a global average pool and a dense head. Shortcuts are option A,
as He et al. used for CIFAR: the identity, and where a block halves the image and doubles the
channels, every other pixel with the new channels zero (no parameters).

Each convolution (no bias) is followed by GroupNorm (Wu and He, 2018) with ``gcd(8, channels)``
groups and epsilon 1e-5 (``norm: group``), not batch norm: batch statistics would make an
example's gradient depend on the rest of its batch, which the exact reduction's per-example
gradients (and SSGD's equivalence to large-batch SGD) rule out. GroupNorm's statistics are an
example's own. With ``norm: none`` there is no normalisation, and the second convolution of
each block starts at its He-normal draw divided by the square root of the number of blocks
(Fixup's rescaling, Zhang, Dauphin and Ma, 2019), so that the residual sums do not grow with
depth at the start.

Convolutions are He-normal (standard deviation sqrt(2 / fan_in)), the head Glorot-uniform with
a zero bias, GroupNorm's scales 1 and shifts 0; all from the key given. Parameters are a flat
dict named as the layers of the ``resnet`` model kind (:mod:`fred.models.resnet`), which also
holds the network's configuration and memory figures: ``conv1.w``, ``norm1.scale``,
``layer2.0.conv1.w``, ..., ``fc.w``, ``fc.b``.
"""

from __future__ import annotations

import itertools
import math
from typing import Callable

import jax
import jax.numpy as jnp

from fred.numerics.models import Params

GROUPS = 8
EPSILON = 1e-5
PADDING = ((1, 1), (1, 1))  # as the reference implementations pad a 3x3 convolution, at any stride
DIMENSIONS = ("NHWC", "HWIO", "NHWC")


def build(
    depth: int, width: int, group: bool, feature_shape: tuple[int, ...], outputs: int
) -> tuple[Callable, Callable]:
    """``(init, apply)`` of the ResNet of ``depth`` layers whose first stage has ``width``
    channels, with GroupNorm (``group``) or none, for images of ``feature_shape`` ``(H, W, C)``."""
    blocks = (depth - 2) // 6
    convs = _convs(width, feature_shape[2], blocks)

    def init(key: jax.Array) -> Params:
        conv_key, head_key = jax.random.split(key)
        # One draw for every convolution, cut in forward order: one random program to compile,
        # where a draw per shape compiled a program each (seconds apiece for ResNet-20).
        sizes = [9 * c_in * c_out for _, c_in, c_out in convs]
        normals = jax.random.normal(conv_key, (sum(sizes),), jnp.float32)
        params: Params = {}
        for (name, c_in, c_out), start, size in zip(convs, itertools.accumulate([0, *sizes]), sizes):
            std = math.sqrt(2.0 / (9 * c_in)) / (
                math.sqrt(3 * blocks) if not group and name.endswith("conv2") else 1.0
            )
            params[f"{name}.w"] = normals[start : start + size].reshape(3, 3, c_in, c_out) * std
            if group:
                norm = name[: -len("conv1")] + "norm" + name[-1]
                params[f"{norm}.scale"] = jnp.ones((c_out,), jnp.float32)
                params[f"{norm}.bias"] = jnp.zeros((c_out,), jnp.float32)
        c_last = 4 * width
        limit = math.sqrt(6.0 / (c_last + outputs))
        params["fc.w"] = jax.random.uniform(head_key, (c_last, outputs), jnp.float32, -limit, limit)
        params["fc.b"] = jnp.zeros((outputs,), jnp.float32)
        return params

    def apply(params: Params, x: jax.Array) -> jax.Array:
        layer = lambda name, h, stride=1: _norm(params, name, _conv(h, params[f"{name}.w"], stride), group)
        h = jax.nn.relu(layer("conv1", x))
        for stage in range(1, 4):
            for b in range(blocks):
                stride = 2 if stage > 1 and b == 0 else 1
                prefix = f"layer{stage}.{b}"
                out = jax.nn.relu(layer(f"{prefix}.conv1", h, stride))
                out = layer(f"{prefix}.conv2", out)
                h = jax.nn.relu(out + _shortcut(h, stride, out.shape[-1]))
        pooled = jnp.mean(h, axis=(1, 2))
        return pooled @ params["fc.w"] + params["fc.b"]

    return jax.jit(init), apply  # one compiled program draws them all (eagerly: one per shape)


def _convs(width: int, channels: int, blocks: int) -> list[tuple[str, int, int]]:
    """(name, input channels, output channels) of every convolution, in forward order."""
    convs = [("conv1", channels, width)]
    c_in = width
    for stage in range(1, 4):
        c_out = width << (stage - 1)
        for b in range(blocks):
            convs += [(f"layer{stage}.{b}.conv1", c_in, c_out), (f"layer{stage}.{b}.conv2", c_out, c_out)]
            c_in = c_out
    return convs


def _conv(x: jax.Array, w: jax.Array, stride: int) -> jax.Array:
    return jax.lax.conv_general_dilated(x, w, (stride, stride), PADDING, dimension_numbers=DIMENSIONS)


def _norm(params: Params, conv_name: str, x: jax.Array, group: bool) -> jax.Array:
    if not group:
        return x
    name = conv_name[: -len("conv1")] + "norm" + conv_name[-1]
    return group_norm(x, params[f"{name}.scale"], params[f"{name}.bias"])


def group_norm(x: jax.Array, scale: jax.Array, bias: jax.Array) -> jax.Array:
    """GroupNorm over each example's pixels and the channels of each of ``gcd(8, C)`` groups.

    The two moments are per-channel means over the pixels, pooled by group (variance as
    E[x²] − E[x]², as Flax's GroupNorm computes it by default); the normalisation, scale and
    shift are then one multiply-add a value. Centring first costs a third more time a step.
    """
    n, _, _, c = x.shape
    groups = math.gcd(GROUPS, c)
    pooled = lambda values: jnp.mean(jnp.mean(values, axis=(1, 2)).reshape(n, groups, c // groups), axis=2)
    mean, mean_square = pooled(x), pooled(jnp.square(x))
    inverse = jax.lax.rsqrt(jnp.maximum(mean_square - jnp.square(mean), 0.0) + EPSILON)
    factor = jnp.repeat(inverse, c // groups, axis=1) * scale  # (n, c)
    shift = bias - jnp.repeat(mean, c // groups, axis=1) * factor
    return x * factor[:, None, None, :] + shift[:, None, None, :]


def _shortcut(x: jax.Array, stride: int, c_out: int) -> jax.Array:
    """Option A: the identity; across a stage, every other pixel and zeros for the new channels
    (half before the old ones, half after, as the common CIFAR implementations pad)."""
    if stride == 1 and x.shape[-1] == c_out:
        return x
    x = x[:, ::stride, ::stride, :]
    extra = c_out - x.shape[-1]
    return jnp.pad(x, ((0, 0), (0, 0), (0, 0), (extra // 2, extra - extra // 2)))
