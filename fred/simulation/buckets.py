"""Gradient buckets: when each part of a gradient is ready to be all-reduced.

PyTorch DDP all-reduces a gradient in buckets of about ``bucket_cap_mb`` (25 MiB by default),
filled with the parameters in the reverse of their forward order, because that is the order
the backward pass makes their gradients; a bucket's all-reduce starts as soon as its last
gradient is made, while the backward pass goes on with the layers before it. Buckets of one
process are all-reduced one after another, in the order they fill (one communication stream).

A step of duration ``D`` is timed as its model's training FLOPs: the forward pass is a third of
them, and the backward pass of a layer twice its forward FLOPs. So bucket ``b`` is ready at
``D (F + 2 sum of its and later layers' forward FLOPs) / 3F``, with ``F`` the forward FLOPs of
the whole model; the last bucket, which holds the first layers, is ready when the step ends.

The same split times ZeRO-3's step layer by layer (:func:`layer_plan`,
:mod:`fred.simulation.sharding`): layer ``i``'s forward pass takes ``f_i / 3F`` of the step and
its backward ``2 f_i / 3F``.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

from fred.scenario.workloads import Layer


class Bucket(NamedTuple):
    """``nbytes`` of gradient, ready at ``ready`` (a fraction of the step's duration)."""

    nbytes: float
    ready: float


def plan(layers: Sequence[Layer], bucket_bytes: int, message_bytes: float) -> tuple[Bucket, ...]:
    """The buckets of ``layers`` (in forward order) of about ``bucket_bytes``, in backward order.

    A bucket closes once it holds ``bucket_bytes`` or more (a layer is never split). The bytes
    are scaled so that the buckets add up to ``message_bytes``, the run's message size.
    """
    forward = sum(layer.forward_flops for layer in layers)
    total_bytes = sum(layer.param_bytes for layer in layers)
    if forward <= 0 or total_bytes <= 0:
        return (Bucket(message_bytes, 1.0),)
    buckets: list[Bucket] = []
    filled, backward_done = 0, 0.0
    for k, layer in enumerate(reversed(layers)):
        filled += layer.param_bytes
        backward_done += 2 * layer.forward_flops
        if filled >= bucket_bytes or k == len(layers) - 1:
            ready = 1.0 if k == len(layers) - 1 else (forward + backward_done) / (3 * forward)
            buckets.append(Bucket(filled * message_bytes / total_bytes, ready))
            filled = 0
    return tuple(b for b in buckets if b.nbytes > 0) or (Bucket(message_bytes, 1.0),)


class LayerShare(NamedTuple):
    """One layer's ``nbytes`` of parameters, and its ``forward`` share of the model's forward
    FLOPs: its forward pass takes ``forward / 3`` of a step, its backward ``2 forward / 3``."""

    nbytes: float
    forward: float


def layer_plan(layers: Sequence[Layer], message_bytes: float) -> tuple[LayerShare, ...]:
    """``layers`` (in forward order) as shares of a step and of ``message_bytes``, the run's
    message size (ZeRO-3 all-gathers each layer's parameters before its passes). A model of no
    FLOPs or no bytes is one layer of the whole message."""
    forward = sum(layer.forward_flops for layer in layers)
    total_bytes = sum(layer.param_bytes for layer in layers)
    if forward <= 0 or total_bytes <= 0:
        return (LayerShare(message_bytes, 1.0),)
    return tuple(
        LayerShare(layer.param_bytes * message_bytes / total_bytes, layer.forward_flops / forward)
        for layer in layers
    )
