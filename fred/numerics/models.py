"""The models' one form, and the dense and convolutional networks the built-in kinds build.

A model is pure ``init``/``apply`` functions over parameters that are dicts of float32 arrays
with string keys, so their canonical leaf order is the sorted key order. Inputs arrive with
their natural feature shape (images as ``(H, W, C)``); the dense networks flatten them. Which
model a scenario trains, and how it is sized, is its model kind's (:mod:`fred.models`):
:func:`build_model` asks the scenario's ``model`` section.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Callable, NamedTuple

import jax
import jax.numpy as jnp

if TYPE_CHECKING:
    from fred.scenario.schema import ModelSection

Params = dict[str, jax.Array]

ACTIVATIONS: dict[str, Callable[[jax.Array], jax.Array]] = {
    "relu": jax.nn.relu,
    "tanh": jnp.tanh,
    "sigmoid": jax.nn.sigmoid,
    "gelu": jax.nn.gelu,
}


class Model(NamedTuple):
    """``init(key) -> params`` and ``apply(params, x) -> outputs`` for one example batch;
    ``width``: the most floats one example's forward pass holds in a layer (0: not known);
    ``loss(outputs, label)``: one example's loss (None: the task's, cross-entropy or squared
    error); ``exact_issue``: why per-example gradients would not be this model's ("" if they are)."""

    init: Callable[[jax.Array], Params]
    apply: Callable[[Params, jax.Array], jax.Array]
    width: int = 0
    loss: Callable[[jax.Array, jax.Array], jax.Array] | None = None
    exact_issue: str = ""


def build_model(cfg: ModelSection, feature_shape: tuple[int, ...], outputs: int) -> Model:
    """The model a scenario names, sized for ``feature_shape`` inputs and ``outputs`` outputs."""
    return cfg.build(feature_shape, outputs)


def _dense(key: jax.Array, fan_in: int, fan_out: int) -> tuple[jax.Array, jax.Array]:
    # Glorot-uniform weights, zero bias: a standard, seed-determined start.
    limit = math.sqrt(6.0 / (fan_in + fan_out))
    w = jax.random.uniform(key, (fan_in, fan_out), jnp.float32, -limit, limit)
    return w, jnp.zeros((fan_out,), jnp.float32)


def mlp(sizes: list[int], activation: Callable[[jax.Array], jax.Array]) -> Model:
    """Dense layers of ``sizes`` (inputs first) over the flattened input, ``activation`` between
    them; parameters ``dense0_w``, ``dense0_b``, ..."""

    def init(key: jax.Array) -> Params:
        params: Params = {}
        for i, key_i in enumerate(jax.random.split(key, len(sizes) - 1)):
            params[f"dense{i}_w"], params[f"dense{i}_b"] = _dense(key_i, sizes[i], sizes[i + 1])
        return params

    def apply(params: Params, x: jax.Array) -> jax.Array:
        h = x.reshape(x.shape[0], -1)
        layers = len(sizes) - 1
        for i in range(layers):
            h = h @ params[f"dense{i}_w"] + params[f"dense{i}_b"]
            if i < layers - 1:
                h = activation(h)
        return h

    return Model(init, apply)


def conv_net(channels: list[int], k: int, hidden: int, feature_shape: tuple[int, ...], outputs: int) -> Model:
    """'SAME' convolutions of ``channels`` (``k`` x ``k``, stride 1, a bias and ReLU each) over
    images of ``feature_shape`` ``(H, W, C)``, then a dense ``hidden`` layer and ``outputs``:
    parameters ``conv0_w``, ``conv0_b``, ..., and the head's ``x_dense0_w``, ..."""
    height, width, in_channels = feature_shape
    chans = [in_channels, *channels]
    flat = height * width * chans[-1]  # 'SAME' padding, stride 1: spatial size is kept
    head = mlp([flat, hidden, outputs], jax.nn.relu)

    def init(key: jax.Array) -> Params:
        keys = jax.random.split(key, len(channels) + 1)
        params = {f"x_{name}": value for name, value in head.init(keys[-1]).items()}
        for i in range(len(channels)):
            fan_in, fan_out = k * k * chans[i], k * k * chans[i + 1]
            limit = math.sqrt(6.0 / (fan_in + fan_out))
            shape = (k, k, chans[i], chans[i + 1])
            params[f"conv{i}_w"] = jax.random.uniform(keys[i], shape, jnp.float32, -limit, limit)
            params[f"conv{i}_b"] = jnp.zeros((chans[i + 1],), jnp.float32)
        return params

    def apply(params: Params, x: jax.Array) -> jax.Array:
        h = x
        for i in range(len(channels)):
            h = jax.lax.conv_general_dilated(
                h, params[f"conv{i}_w"], (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
            )
            h = jax.nn.relu(h + params[f"conv{i}_b"])
        return head.apply({name[2:]: v for name, v in params.items() if name.startswith("x_")}, h)

    return Model(init, apply)


def param_count(params: Params) -> int:
    return sum(int(v.size) for v in params.values())
