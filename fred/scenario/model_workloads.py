"""The built-in models' workloads: their layers, parameter bytes and FLOPs, derived from the
model's configuration and the data's shape.

What the workload library (:mod:`fred.scenario.workloads`) gives a named large model, this
gives the model a scenario trains: its layers in forward order (gradient buckets are cut from
them, :mod:`fred.simulation.buckets`), and its training FLOPs per example (what
``cluster.compute.device_flops`` times a step with when no FLOPs are given). The layers are
named as the parameters' keys begin (``layer2.0.conv1`` holds ``layer2.0.conv1.w``), and
counted as the library counts: 2 FLOPs per multiply-add of a convolution, a dense layer and
the attention products, 1 per output of a bias add, 0 for normalisation, activations,
pooling, softmax, residual adds and embedding lookups; a training step is 3 forward passes.
A CIFAR ResNet-20 (width 16, 10 classes) is 269,722 parameters and 81.1 MFLOP forward per
32x32 image: 40.55 M multiply-adds, the "41 M FLOPs" its papers quote (they count multiply-adds).

Nothing here imports the schema (which imports this): configurations, and the scenario,
are read by their ``kind`` and fields.
"""

from __future__ import annotations

import math
from typing import Any

from fred.scenario.workloads import FLOAT32_BYTES, TRAINING_PASSES, Layer, Workload

IMAGE_SHAPE = (32, 32, 3)  # CIFAR's, and the synthetic images'
BYTE_VOCAB = 256


def _layer(name: str, params: int, forward_flops: int) -> Layer:
    return Layer(name, FLOAT32_BYTES * params, forward_flops)


def conv(name: str, c_in: int, c_out: int, k: int, pixels_out: int, bias: bool = False) -> Layer:
    outputs = c_out * pixels_out
    return _layer(name, k * k * c_in * c_out + (c_out if bias else 0), 2 * k * k * c_in * outputs + (outputs if bias else 0))


def dense(name: str, n_in: int, n_out: int, tokens: int = 1) -> Layer:
    return _layer(name, n_in * n_out + n_out, tokens * (2 * n_in * n_out + n_out))


def norm(name: str, channels: int) -> Layer:
    return _layer(name, 2 * channels, 0)  # a scale and a shift per channel


def resnet_layers(depth: int, width: int, groupnorm: bool, feature_shape: tuple[int, ...], outputs: int) -> list[Layer]:
    """He et al.'s CIFAR ResNet as :func:`fred.numerics.models` builds it: 3x3 convolutions
    without bias (padding 1), a norm after each (or none), option-A shortcuts (no parameters)."""
    height, width_px, channels = feature_shape
    blocks = (depth - 2) // 6
    layers = [conv("conv1", channels, width, 3, height * width_px)] + ([norm("norm1", width)] if groupnorm else [])
    c_in = width
    for stage in range(3):
        c_out = width << stage
        for b in range(blocks):
            stride = 2 if stage > 0 and b == 0 else 1
            height, width_px = -(-height // stride), -(-width_px // stride)  # padding 1: ceil(size / stride)
            prefix = f"layer{stage + 1}.{b}"
            for i, c in ((1, c_in), (2, c_out)):
                layers.append(conv(f"{prefix}.conv{i}", c, c_out, 3, height * width_px))
                if groupnorm:
                    layers.append(norm(f"{prefix}.norm{i}", c_out))
            c_in = c_out
    return layers + [dense("fc", c_in, outputs)]  # after a global average pool


def transformer_layers(layers: int, d: int, tokens: int, positions: int, vocab: int) -> list[Layer]:
    """The GPT-style decoder of :func:`fred.numerics.models` (GPT-2's modules and names): its head
    is the token embedding, transposed, so it holds FLOPs and no bytes of its own."""
    found = [_layer("wte", vocab * d, 0), _layer("wpe", positions * d, 0)]
    for i in range(layers):
        p = f"h.{i}"
        found += [
            norm(f"{p}.ln_1", d), dense(f"{p}.attn.c_attn", d, 3 * d, tokens),
            _layer(f"{p}.attn.products", 0, 2 * (2 * tokens * tokens * d)),  # Q K^T and the weighted V: the full square
            dense(f"{p}.attn.c_proj", d, d, tokens), norm(f"{p}.ln_2", d),
            dense(f"{p}.mlp.c_fc", d, 4 * d, tokens), dense(f"{p}.mlp.c_proj", 4 * d, d, tokens),
        ]
    return found + [norm("ln_f", d), _layer("lm_head", 0, tokens * 2 * d * vocab)]


def mlp_layers(sizes: list[int], prefix: str = "dense") -> list[Layer]:
    return [dense(f"{prefix}{i}", a, b) for i, (a, b) in enumerate(zip(sizes, sizes[1:]))]


def cnn_layers(channels: list[int], kernel_size: int, hidden: int, feature_shape: tuple[int, ...], outputs: int) -> list[Layer]:
    height, width, c_in = feature_shape
    chans = [c_in, *channels]
    convs = [conv(f"conv{i}", a, b, kernel_size, height * width, bias=True) for i, (a, b) in enumerate(zip(chans, chans[1:]))]
    return convs + mlp_layers([height * width * chans[-1], hidden, outputs], "x_dense")


def model_layers(model: Any, feature_shape: tuple[int, ...], outputs: int) -> list[Layer] | None:
    """The layers of the built-in ``model`` for examples of ``feature_shape`` and ``outputs``
    outputs (classes; the transformer's default vocabulary); None for a ``python`` model, or a
    shape the model does not take (building it says why)."""
    kind = model.kind
    if kind in ("logistic", "mlp"):
        return mlp_layers([math.prod(feature_shape), *getattr(model, "hidden", []), outputs])
    if kind == "cnn" and len(feature_shape) == 3:
        return cnn_layers(model.channels, model.kernel_size, model.hidden, feature_shape, outputs)
    if kind == "resnet" and len(feature_shape) == 3:
        return resnet_layers(model.depth, model.width, model.norm == "group", feature_shape, outputs)
    if kind == "transformer" and len(feature_shape) == 1:
        tokens = feature_shape[0]
        return transformer_layers(model.layers, model.d_model, tokens, model.context or tokens, model.vocab or outputs)
    return None


_CACHE: dict[tuple[str, tuple[int, ...], int], Workload | None] = {}
CACHE_SIZE = 256  # validating a scenario of 4,096 workers asks for its step time once a worker


def model_workload(model: Any, feature_shape: tuple[int, ...], outputs: int) -> Workload | None:
    """:func:`model_layers` as a :class:`Workload` (its ``timed_*`` its own totals), cached by
    the model's configuration; None for a ``python`` model."""
    if model.kind == "python":
        return None
    key = (model.model_dump_json(), tuple(int(d) for d in feature_shape), int(outputs))
    if key not in _CACHE:
        if len(_CACHE) >= CACHE_SIZE:
            _CACHE.clear()
        layers = model_layers(model, key[1], key[2])
        _CACHE[key] = None if layers is None else Workload(
            f"model:{model.kind}", f"the scenario's {model.kind}", f"one example of shape {key[1]}", (), tuple(layers),
            0.0, sum(layer.param_bytes for layer in layers), float(TRAINING_PASSES * sum(layer.forward_flops for layer in layers)))
    return _CACHE[key]


def declared_shape(source: Any, model: Any) -> tuple[tuple[int, ...], int] | None:
    """One example's shape and the model's outputs, as far as the scenario tells them without
    reading a file; None where only the data's files tell (mnist, arrays, a text file read by
    character without ``model.vocab``)."""
    kind = source.kind
    if kind == "digits":
        return (8, 8, 1), 10
    if kind == "synthetic":
        return (source.features,), source.classes if source.task == "classification" else 1
    if kind == "synthetic_images":
        return IMAGE_SHAPE, source.classes
    if kind in ("cifar10", "cifar100"):
        return IMAGE_SHAPE, 10 if kind == "cifar10" else (100 if source.labels == "fine" else 20)
    if kind == "synthetic_tokens":
        return (source.context,), source.vocab
    if kind == "text":
        vocab = getattr(model, "vocab", None) or (BYTE_VOCAB if source.level == "byte" else None)
        return None if vocab is None else ((source.context,), vocab)
    return None


def scenario_workload(scenario: Any) -> Workload | None:
    """The scenario's own model's workload, when the scenario alone tells its data's shape."""
    shape = declared_shape(scenario.data.source, scenario.model)
    return None if shape is None else model_workload(scenario.model, *shape)
