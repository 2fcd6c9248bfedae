"""Evaluation on a held-out set: mean loss and accuracy, in one call or in chunks of bounded memory.

A set whose activations fit in ``EVAL_BYTES`` is evaluated in one call (:func:`mean_loss`); a
larger one in chunks of :func:`eval_chunk_rows` rows, the last one padded so that one program
serves them all, the chunks' sums added in order (:func:`chunk_sums`, :func:`evaluate`). The
loss is :func:`fred.numerics.losses.loss`, the one training differentiates.
"""

from __future__ import annotations

import math
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from fred.numerics.losses import loss
from fred.numerics.models import Model, Params

# Activations of one evaluation call: a set whose activations take more is evaluated in chunks,
# so that a large model on a large set does not allocate GBs at once.
EVAL_BYTES = 64 * 2**20


def eval_chunk_rows(width: int) -> int:
    """Rows of one evaluation call, for a model whose widest layer holds ``width`` floats a row
    (about four such float32 arrays are alive at once)."""
    return max(1, EVAL_BYTES // (16 * max(width, 1)))


def mean_loss(
    model: Model, task: str, params: Params, x: jax.Array, y: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """Mean loss and accuracy of the whole set ``x, y`` in one call."""
    out = model.apply(params, x)
    return loss(model, task, out, y, "mean"), _accuracy(task, out, y)


def chunk_sums(
    model: Model, task: str, params: Params, x: jax.Array, y: jax.Array, valid: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """Summed loss and correct predictions of the first ``valid`` rows (the rest pad a last chunk);
    a sequence counts its share of correct tokens."""
    out = model.apply(params, x)
    keep = jnp.arange(x.shape[0]) < valid
    losses = jnp.sum(jnp.where(keep, loss(model, task, out, y, "each"), 0.0))
    if task == "regression":
        return losses, jnp.int32(0)
    if y.ndim == 2:
        shares = jnp.mean(jnp.argmax(out, axis=-1) == y, axis=1)
        return losses, jnp.sum(jnp.where(keep, shares, 0.0))
    return losses, jnp.sum(keep & (jnp.argmax(out, axis=1) == y))


def _accuracy(task: str, out: jax.Array, y: jax.Array) -> jax.Array:
    """Share of correct predictions: of examples, or of tokens for sequences; NaN for regression."""
    if task == "regression":
        return jnp.float32(jnp.nan)
    if y.ndim == 2:
        return jnp.mean(jnp.argmax(out, axis=-1) == y)
    return jnp.mean(jnp.argmax(out, axis=1) == y)


Whole = Callable[[Params, np.ndarray, np.ndarray], tuple[jax.Array, jax.Array]]
Sums = Callable[[Params, np.ndarray, np.ndarray, np.int32], tuple[jax.Array, jax.Array]]


def evaluate(
    whole: Whole, sums: Sums, rows: int, task: str, params: Params, x: np.ndarray, y: np.ndarray
) -> tuple[float, float]:
    """Mean loss and accuracy on ``x, y``: by ``whole`` (:func:`mean_loss`, compiled) when ``x`` has
    at most ``rows`` rows, else by ``sums`` (:func:`chunk_sums`, compiled) over chunks of ``rows``.
    A NaN loss (a diverged run's NaN outputs) has no accuracy: argmax of NaN logits is class 0."""
    if len(x) <= rows:
        mean, accuracy = whole(params, x, y)
        mean = float(mean)
        return mean, math.nan if math.isnan(mean) else float(accuracy)
    total, correct = 0.0, 0
    for start in range(0, len(x), rows):
        xs, ys = _padded(x[start : start + rows], rows), _padded(y[start : start + rows], rows)
        loss_sum, hits = sums(params, xs, ys, np.int32(min(rows, len(x) - start)))
        total += float(loss_sum)
        correct += float(hits)  # a count of examples, or sequences' shares of tokens: exact either way
    mean = total / len(x)
    if task == "regression" or math.isnan(mean):
        return mean, math.nan
    return mean, correct / len(x)


def _padded(a: np.ndarray, rows: int) -> np.ndarray:
    """``a`` with zero rows appended up to ``rows`` (a label array of any rank, as the features)."""
    if len(a) == rows:
        return a
    return np.concatenate([a, np.zeros((rows - len(a), *a.shape[1:]), a.dtype)])
