"""The JAX models: parameters as dicts of arrays, pure ``init``/``apply`` functions.

Inputs arrive with their natural feature shape (images as ``(H, W, C)``); the
dense models flatten them. Parameters are float32 pytrees with string keys, so
their canonical leaf order is the sorted key order.
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp

from fred.scenario.schema import CNNModel, LogisticModel, MLPModel

Params = dict[str, jax.Array]

ACTIVATIONS: dict[str, Callable[[jax.Array], jax.Array]] = {
    "relu": jax.nn.relu,
    "tanh": jnp.tanh,
    "sigmoid": jax.nn.sigmoid,
    "gelu": jax.nn.gelu,
}


class Model(NamedTuple):
    """``init(key) -> params`` and ``apply(params, x) -> outputs`` for one example batch;
    ``width``: the most floats one example's forward pass holds in a layer (0: not known)."""

    init: Callable[[jax.Array], Params]
    apply: Callable[[Params, jax.Array], jax.Array]
    width: int = 0


def _dense(key: jax.Array, fan_in: int, fan_out: int) -> tuple[jax.Array, jax.Array]:
    # Glorot-uniform weights, zero bias: a standard, seed-determined start.
    limit = math.sqrt(6.0 / (fan_in + fan_out))
    w = jax.random.uniform(key, (fan_in, fan_out), jnp.float32, -limit, limit)
    return w, jnp.zeros((fan_out,), jnp.float32)


def _mlp(sizes: list[int], activation: Callable[[jax.Array], jax.Array]) -> Model:
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


def _cnn(cfg: CNNModel, feature_shape: tuple[int, ...], outputs: int) -> Model:
    if len(feature_shape) != 3:
        raise ValueError(f"model 'cnn' needs image data of shape (H, W, C); this data set has {feature_shape}")
    height, width, in_channels = feature_shape
    k = cfg.kernel_size
    if k > max(height, width):  # a larger kernel only multiplies padding, and its memory
        raise ValueError(f"model.kernel_size is {k} but the images are {height} x {width}: use at most {max(height, width)}")
    chans = [in_channels, *cfg.channels]
    flat = height * width * chans[-1]  # 'SAME' padding, stride 1: spatial size is kept
    head = _mlp([flat, cfg.hidden, outputs], jax.nn.relu)

    def init(key: jax.Array) -> Params:
        keys = jax.random.split(key, len(cfg.channels) + 1)
        params = {f"x_{name}": value for name, value in head.init(keys[-1]).items()}
        for i in range(len(cfg.channels)):
            fan_in, fan_out = k * k * chans[i], k * k * chans[i + 1]
            limit = math.sqrt(6.0 / (fan_in + fan_out))
            shape = (k, k, chans[i], chans[i + 1])
            params[f"conv{i}_w"] = jax.random.uniform(keys[i], shape, jnp.float32, -limit, limit)
            params[f"conv{i}_b"] = jnp.zeros((chans[i + 1],), jnp.float32)
        return params

    def apply(params: Params, x: jax.Array) -> jax.Array:
        h = x
        for i in range(len(cfg.channels)):
            h = jax.lax.conv_general_dilated(
                h, params[f"conv{i}_w"], (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
            )
            h = jax.nn.relu(h + params[f"conv{i}_b"])
        return head.apply({name[2:]: v for name, v in params.items() if name.startswith("x_")}, h)

    return Model(init, apply)


def build_model(cfg: LogisticModel | MLPModel | CNNModel, feature_shape: tuple[int, ...], outputs: int) -> Model:
    """The model a scenario names, sized for ``feature_shape`` inputs and ``outputs`` outputs."""
    width = activation_width(cfg, feature_shape, outputs)
    if isinstance(cfg, LogisticModel):
        return _mlp(layer_sizes(cfg, feature_shape, outputs), ACTIVATIONS["relu"])._replace(width=width)
    if isinstance(cfg, MLPModel):
        return _mlp(layer_sizes(cfg, feature_shape, outputs), ACTIVATIONS[cfg.activation])._replace(width=width)
    return _cnn(cfg, feature_shape, outputs)._replace(width=width)


def layer_sizes(cfg: LogisticModel | MLPModel, feature_shape: tuple[int, ...], outputs: int) -> list[int]:
    """The widths of a dense model's layers, inputs first."""
    hidden = cfg.hidden if isinstance(cfg, MLPModel) else []
    return [math.prod(feature_shape), *hidden, outputs]


def activation_width(cfg: LogisticModel | MLPModel | CNNModel, feature_shape: tuple[int, ...], outputs: int) -> int:
    """The most floats one example's forward pass holds in a layer: what evaluation's memory
    grows with (a convolution's, its patches: kernel_size² × channels at every pixel)."""
    if not isinstance(cfg, CNNModel):
        return max(layer_sizes(cfg, feature_shape, outputs))
    pixels = math.prod(feature_shape[:-1]) if len(feature_shape) == 3 else 1
    chans = [feature_shape[-1], *cfg.channels]
    return max(pixels * cfg.kernel_size**2 * max(chans), math.prod(feature_shape), cfg.hidden, outputs)


def param_count(params: Params) -> int:
    return sum(int(v.size) for v in params.values())
