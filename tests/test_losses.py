"""One loss function for training and evaluation, each form compiling to the very program its
caller's own formula compiles to: the same float operations in the same order, so the same bits.
The formulas below are the reference: each caller's loss written out on its own."""

from __future__ import annotations

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fred.numerics.losses import loss
from fred.numerics.models import Model

PLAIN = Model(None, None)
USER = Model(None, None, loss=lambda out, y: 1.5 * (out[0] - y) ** 2)


def _reference_one(model, task, out, y):
    """One example's loss, as per-example gradients differentiate it."""
    if model.loss is not None:
        return model.loss(out, y)
    if task == "regression":
        return 0.5 * (out[0] - y) ** 2
    if y.ndim == 1:
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(out), y[:, None], axis=-1))
    return -jax.nn.log_softmax(out)[y]


def _reference_each(model, task, out, y):
    """Each example's loss of a batch, as a chunked evaluation sums them."""
    if model.loss is not None:
        return jax.vmap(model.loss)(out, y)
    if task == "regression":
        return 0.5 * (out[:, 0] - y) ** 2
    if y.ndim == 2:
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(out), y[..., None], axis=-1)[..., 0], axis=1)
    return -jnp.take_along_axis(jax.nn.log_softmax(out), y[:, None], axis=1)[:, 0]


def _reference_mean(model, task, out, y):
    """A batch's mean loss, as a one-call evaluation reports it."""
    if model.loss is not None:
        return jnp.mean(jax.vmap(model.loss)(out, y))
    if task == "regression":
        return jnp.mean(0.5 * (out[:, 0] - y) ** 2)
    if y.ndim == 2:
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(out), y[..., None], axis=-1))
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(out), y[:, None], axis=1))


REFERENCES = {"one": _reference_one, "each": _reference_each, "mean": _reference_mean}
CASES = {  # (model, task, batch of outputs, batch of labels)
    "class": (PLAIN, "classification", (6, 5), (6,), 5),
    "tokens": (PLAIN, "classification", (6, 4, 7), (6, 4), 7),
    "regression": (PLAIN, "regression", (6, 1), (6,), None),
    "user": (USER, "regression", (6, 1), (6,), None),
}


def _inputs(out_shape, y_shape, classes):
    keys = jax.random.split(jax.random.PRNGKey(3))
    out = jax.random.normal(keys[0], out_shape, jnp.float32) * 3
    if classes is None:
        return out, jax.random.normal(keys[1], y_shape, jnp.float32)
    return out, jax.random.randint(keys[1], y_shape, 0, classes, jnp.int32)


def _program(fn, *args) -> str:
    """The StableHLO that XLA compiles for ``fn``, less the names of its module and functions."""
    text = jax.jit(fn).lower(*args).as_text()
    return re.sub(r"@\w+|module @\S+|jit_\w+", "", text)


@pytest.mark.parametrize("over", ["one", "each", "mean"])
@pytest.mark.parametrize("case", CASES)
def test_each_form_of_the_loss_is_its_callers_program_and_bits(case, over):
    model, task, out_shape, y_shape, classes = CASES[case]
    out, y = _inputs(out_shape, y_shape, classes)
    new = functools.partial(loss, model, task, over=over)
    old = functools.partial(REFERENCES[over], model, task)
    if over == "one":  # as training uses it: each example's gradient, and the losses vmapped over a batch
        grad = lambda f: jax.vmap(jax.grad(f))
        assert _program(grad(new), out, y) == _program(grad(old), out, y)
        bits = lambda f: np.asarray(jax.jit(grad(f))(out, y)).tobytes()
        assert bits(new) == bits(old)
        new, old = jax.vmap(new), jax.vmap(old)
    assert _program(new, out, y) == _program(old, out, y)
    assert np.asarray(jax.jit(new)(out, y)).tobytes() == np.asarray(jax.jit(old)(out, y)).tobytes()


def test_the_mean_of_a_sequence_batch_is_over_its_tokens():
    out, y = _inputs((3, 4, 5), (3, 4), 5)
    each = loss(PLAIN, "classification", out, y, "each")
    assert each.shape == (3,)
    mean = loss(PLAIN, "classification", out, y, "mean")
    assert float(mean) == pytest.approx(float(jnp.mean(each)), rel=1e-6)
