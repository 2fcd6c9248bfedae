"""The workload of the model a scenario trains: its layers, parameter bytes and FLOPs, for the
model's configuration and the data's shape.

What the workload library (:mod:`fred.scenario.workloads`) gives a named large model, this
gives the model a scenario trains: its layers in forward order (gradient buckets are cut from
them, :mod:`fred.simulation.buckets`), and its training FLOPs per example (what
``cluster.compute.device_flops`` times a step with when no FLOPs are given). Each model kind
lists its own layers (``layer_list``, :mod:`fred.models`) with the pieces here (:func:`conv`,
:func:`dense`, :func:`norm`), named as the parameters' keys begin (``layer2.0.conv1`` holds
``layer2.0.conv1.w``), and counted as the library counts: 2 FLOPs per multiply-add of a
convolution, a dense layer and the attention products, 1 per output of a bias add, 0 for
normalisation, activations, pooling, softmax, residual adds and embedding lookups; a training
step is 3 forward passes. A CIFAR ResNet-20 (width 16, 10 classes) is 269,722 parameters and
81.1 MFLOP forward per 32x32 image: 40.55 M multiply-adds, the "41 M FLOPs" its papers quote
(they count multiply-adds).

Nothing here imports the schema (which imports this): a model section is asked for its layers,
and the scenario's data is read by its ``kind`` and fields.
"""

from __future__ import annotations

from typing import Any

from fred.scenario.workloads import FLOAT32_BYTES, TRAINING_PASSES, Layer, Workload

IMAGE_SHAPE = (32, 32, 3)  # CIFAR's, and the synthetic images'
BYTE_VOCAB = 256


def layer(name: str, params: int, forward_flops: int) -> Layer:
    """A layer of ``params`` float32 parameters and ``forward_flops`` FLOPs an example."""
    return Layer(name, FLOAT32_BYTES * params, forward_flops)


def conv(name: str, c_in: int, c_out: int, k: int, pixels_out: int, bias: bool = False) -> Layer:
    outputs = c_out * pixels_out
    return layer(
        name,
        k * k * c_in * c_out + (c_out if bias else 0),
        2 * k * k * c_in * outputs + (outputs if bias else 0),
    )


def dense(name: str, n_in: int, n_out: int, tokens: int = 1) -> Layer:
    return layer(name, n_in * n_out + n_out, tokens * (2 * n_in * n_out + n_out))


def norm(name: str, channels: int) -> Layer:
    return layer(name, 2 * channels, 0)  # a scale and a shift per channel


def mlp_layers(sizes: list[int], prefix: str = "dense") -> list[Layer]:
    return [dense(f"{prefix}{i}", a, b) for i, (a, b) in enumerate(zip(sizes, sizes[1:]))]


_CACHE: dict[tuple[str, tuple[int, ...], int], Workload | None] = {}
CACHE_SIZE = 256  # validating a scenario of 4,096 workers asks for its step time once a worker


def model_workload(model: Any, feature_shape: tuple[int, ...], outputs: int) -> Workload | None:
    """The layers of ``model`` (a model section) for examples of ``feature_shape`` and ``outputs``
    outputs, as its kind lists them, as a :class:`Workload` (its ``timed_*`` its own totals),
    cached by the model's configuration; None where its layers are not known (user code, or a
    shape the model does not take: building it says why)."""
    key = (model.model_dump_json(), tuple(int(d) for d in feature_shape), int(outputs))
    if key not in _CACHE:
        if len(_CACHE) >= CACHE_SIZE:
            _CACHE.clear()
        layers = model.layer_list(key[1], key[2])
        _CACHE[key] = (
            None
            if layers is None
            else Workload(
                f"model:{model.kind}",
                f"the scenario's {model.kind}",
                f"one example of shape {key[1]}",
                (),
                tuple(layers),
                0.0,
                sum(each.param_bytes for each in layers),
                float(TRAINING_PASSES * sum(each.forward_flops for each in layers)),
            )
        )
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
