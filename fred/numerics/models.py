"""The JAX models: parameters as dicts of arrays, pure ``init``/``apply`` functions.

Inputs arrive with their natural feature shape (images as ``(H, W, C)``); the
dense models flatten them. Parameters are float32 pytrees with string keys, so
their canonical leaf order is the sorted key order.
"""

from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from fred.numerics import resnet, rng, transformer, user_code
from fred.scenario.schema import CNNModel, LogisticModel, MLPModel, ModelConfig, PythonModel, ResNetModel, TransformerModel

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


def build_model(cfg: ModelConfig, feature_shape: tuple[int, ...], outputs: int) -> Model:
    """The model a scenario names, sized for ``feature_shape`` inputs and ``outputs`` outputs."""
    if isinstance(cfg, PythonModel):
        return _python(cfg, feature_shape, outputs)
    if isinstance(cfg, ResNetModel):
        return Model(*resnet.build(cfg, feature_shape, outputs), width=resnet.width(cfg, feature_shape))
    if isinstance(cfg, TransformerModel):
        return Model(*transformer.build(cfg, feature_shape, outputs), width=transformer.width(cfg, feature_shape, outputs))
    width = activation_width(cfg, feature_shape, outputs)
    if isinstance(cfg, LogisticModel):
        return _mlp(layer_sizes(cfg, feature_shape, outputs), ACTIVATIONS["relu"])._replace(width=width)
    if isinstance(cfg, MLPModel):
        return _mlp(layer_sizes(cfg, feature_shape, outputs), ACTIVATIONS[cfg.activation])._replace(width=width)
    return _cnn(cfg, feature_shape, outputs)._replace(width=width)


def _python(cfg: PythonModel, feature_shape: tuple[int, ...], outputs: int) -> Model:
    """The user's model (see :mod:`fred.numerics.user_code`) over flat, named float32 parameters,
    checked on a few examples: its output shape, and whether an example's outputs are its own."""
    factory = user_code.checked_factory(cfg)
    where = f"model.factory: {cfg.factory}"
    make = lambda key: user_code.call_factory(cfg, factory, key, feature_shape, outputs)
    probe_key = rng.jax_key(0, "model", "probe")  # the parameters the checks run on: any fixed ones
    built = make(probe_key)
    style = user_code.detect(built, where, feature_shape)
    tree = _user_call(where, "building its parameters", lambda: style.params(built, probe_key))
    treedef, names = jax.tree.structure(tree), user_code.flat_names(tree, where)

    def init(key: jax.Array) -> Params:
        made = style.params(make(key), key)
        if jax.tree.structure(made) != treedef:
            raise user_code.UserCodeError(f"{where}: the parameters' structure changes with the random key; it must not")
        return dict(zip(names, jax.tree.leaves(made)))

    def apply(params: Params, x: jax.Array) -> jax.Array:
        return style.apply(jax.tree.unflatten(treedef, [params[name] for name in names]), x)

    params = dict(zip(names, jax.tree.leaves(tree)))
    issue = _check_outputs(where, style.name, apply, params, feature_shape, outputs)
    width = user_code.per_example_width(apply, params, feature_shape)  # bounds evaluation's chunks
    return Model(init, apply, width, user_code.loss_function(cfg), issue)


def _user_call(where: str, doing: str, call: Callable[[], Any]) -> Any:
    try:
        return call()
    except user_code.UserCodeError:
        raise
    except Exception as err:
        raise user_code.UserCodeError(f"{where}: {doing} raised {type(err).__name__}: {str(err)[:300]}") from None


def _check_outputs(where: str, style: str, apply: Callable, params: Params, feature_shape: tuple[int, ...],
                   outputs: int) -> str:
    """Refuse a model whose outputs do not fit the data; return why per-example gradients
    would not be its gradients ("" when they are)."""
    rows = user_code.probe_rows(feature_shape)
    batch = _user_call(where, f"its {style} apply on {len(rows)} examples of shape {feature_shape}",
                       lambda: np.asarray(jax.jit(apply)(params, rows)))
    wanted = (len(rows), outputs)
    if batch.shape != wanted:
        need = f"one output per class ({outputs} classes)" if outputs > 1 else "one output (the regression target)"
        raise user_code.UserCodeError(
            f"{where}: the model gives outputs of shape {batch.shape} for {len(rows)} examples; this data set needs "
            f"{wanted}: {need} for each example (a factory that takes 'outputs' is given the number)")
    alone = np.concatenate([np.asarray(jax.jit(apply)(params, rows[i : i + 1])) for i in range(len(rows))])
    if not user_code.close(batch, alone):
        return (f"{where}: an example's outputs depend on the other examples in its batch (statistics over the "
                "batch?), so the exact reduction's per-example gradients are not this model's gradients; set "
                "strategy.reduction: fast, or make each example's outputs its own")
    one = lambda p, x: jnp.sum(apply(p, x[None]))
    try:
        jax.eval_shape(jax.vmap(jax.grad(one), in_axes=(None, 0)), params, rows)
    except Exception as err:
        return (f"{where}: the exact reduction maps jax.grad over single examples (jax.vmap), which this model does "
                f"not support ({type(err).__name__}: {str(err)[:200]}); set strategy.reduction: fast")
    return ""


def python_sizes(cfg: PythonModel, feature_shape: tuple[int, ...], outputs: int) -> tuple[int, int]:
    """The user's model's parameters, and the most floats one example holds in it (0: not
    known), from their shapes alone: nothing is allocated."""
    factory = user_code.checked_factory(cfg)
    where = f"model.factory: {cfg.factory}"
    styles: list[user_code.Style] = []

    def params(key: jax.Array) -> Any:
        built = user_code.call_factory(cfg, factory, key, feature_shape, outputs)
        styles.append(user_code.detect(built, where, feature_shape))
        return styles[-1].params(built, key)

    shapes = _user_call(where, "building its parameters", lambda: jax.eval_shape(params, jax.random.PRNGKey(0)))
    try:
        width = user_code.per_example_width(styles[-1].apply, shapes, feature_shape)
    except Exception:  # built under a trace, some models cannot be traced again; building them says why
        width = 0
    return user_code.count(shapes), width


def layer_sizes(cfg: LogisticModel | MLPModel, feature_shape: tuple[int, ...], outputs: int) -> list[int]:
    """The widths of a dense model's layers, inputs first."""
    hidden = cfg.hidden if isinstance(cfg, MLPModel) else []
    return [math.prod(feature_shape), *hidden, outputs]


def activation_width(cfg: LogisticModel | MLPModel | CNNModel | ResNetModel | TransformerModel,
                     feature_shape: tuple[int, ...], outputs: int) -> int:
    """The most floats one example's forward pass holds in a layer: what evaluation's memory
    grows with (a convolution's, its patches: kernel_size² × channels at every pixel)."""
    if isinstance(cfg, ResNetModel):
        return resnet.width(cfg, feature_shape)
    if isinstance(cfg, TransformerModel):
        return transformer.width(cfg, feature_shape, outputs)
    if not isinstance(cfg, CNNModel):
        return max(layer_sizes(cfg, feature_shape, outputs))
    pixels = math.prod(feature_shape[:-1]) if len(feature_shape) == 3 else 1
    chans = [feature_shape[-1], *cfg.channels]
    return max(pixels * cfg.kernel_size**2 * max(chans), math.prod(feature_shape), cfg.hidden, outputs)


def stored_floats(cfg: ModelConfig, feature_shape: tuple[int, ...], outputs: int) -> int:
    """Floats one example's training step holds for the backward pass, for the models whose
    activations outweigh their parameters (the ResNet, the transformer); 0 for the others."""
    if isinstance(cfg, ResNetModel):
        return resnet.stored_floats(cfg, feature_shape)
    if isinstance(cfg, TransformerModel):
        return transformer.stored_floats(cfg, feature_shape, outputs)
    return 0


def param_count(params: Params) -> int:
    return sum(int(v.size) for v in params.values())
