"""The task's loss, in one place: what training differentiates and evaluation reports.

A model's own ``loss`` (the user's, or one chosen by name) comes first; otherwise regression is
half the squared error of the first output and classification the cross-entropy of the label's
logits, for a sequence the mean over its tokens. :func:`loss` computes it for one example, for
each example of a batch, or as a batch's mean. Each form fixes its float operations and their
order (a batch's mean over all tokens differs in its last bits from the mean of its sequences'
means), so each caller's bits are fixed; ``tests/test_losses.py`` compares the programs.
"""

from __future__ import annotations

import functools
from typing import Literal

import jax
import jax.numpy as jnp

from fred.numerics.models import Model, Params

Over = Literal["one", "each", "mean"]


def loss(model: Model, task: str, out: jax.Array, y: jax.Array, over: Over) -> jax.Array:
    """The loss of outputs ``out`` against labels ``y``: ``one`` example's (no batch axis),
    ``each`` example's of a batch (a vector), or the batch's ``mean``; a batch of sequences'
    mean is over all its tokens (equal lengths: the mean of the sequences' means)."""
    if model.loss is not None:  # the user's, or one chosen by name
        if over == "one":
            return model.loss(out, y)
        losses = jax.vmap(model.loss)(out, y)
        return losses if over == "each" else jnp.mean(losses)
    if task == "regression":
        losses = 0.5 * ((out[0] if over == "one" else out[:, 0]) - y) ** 2
        return jnp.mean(losses) if over == "mean" else losses
    return _cross_entropy(out, y, over)


def _cross_entropy(out: jax.Array, y: jax.Array, over: Over) -> jax.Array:
    """Cross-entropy of the labels' logits (``out``'s last axis); a sequence's, the mean of its tokens'."""
    if over == "one" and y.ndim == 0:  # one class label
        return -jax.nn.log_softmax(out)[y]
    picked = jnp.take_along_axis(jax.nn.log_softmax(out), y[..., None], axis=-1)
    if over == "each":
        return -jnp.mean(picked[..., 0], axis=1) if y.ndim == 2 else -picked[:, 0]
    return -jnp.mean(picked)  # one sequence's mean over its tokens, or a batch's over all of its


def example_loss(model: Model, task: str, params: Params, x: jax.Array, y: jax.Array) -> jax.Array:
    """One example's loss, the model applied to it alone (what per-example gradients differentiate)."""
    return loss(model, task, model.apply(params, x[None])[0], y, "one")


def batch_loss(model: Model, task: str, params: Params, xs: jax.Array, ys: jax.Array) -> jax.Array:
    """The summed loss of a batch, the model applied to the batch at once, as a training loop does
    (a tile's, a fast shard's: its examples' outputs are their own, Model.exact_issue)."""
    losses = jax.vmap(functools.partial(loss, model, task, over="one"))(model.apply(params, xs), ys)
    return jnp.sum(losses)
