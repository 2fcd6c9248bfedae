"""Optimizers in the optax style: ``init``/``update`` pairs, state as NamedTuples.

Hyper-parameters are closed over, so an optimizer is a value that strategies
pass around. Only what the strategies need lives here; it is deliberately
tiny so that the update a strategy applies is visible in one line.
"""

from __future__ import annotations

import functools
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp

from fred.numerics.models import Params
from fred.numerics.tape import op


class GradientTransformation(NamedTuple):
    init: Callable[[Params], NamedTuple]
    update: Callable[[Params, NamedTuple, Params], tuple[Params, NamedTuple]]
    spec: tuple[str | float, ...] = ()  # how to build it again: ("sgd", lr); replay needs it


class SGDState(NamedTuple):
    count: jax.Array


@functools.cache  # one value per learning rate, so jitted steps built from it are reused
def sgd(learning_rate: float) -> GradientTransformation:
    """Plain SGD: ``updates = -learning_rate * grad``."""

    def init(params: Params) -> SGDState:
        return SGDState(count=jnp.zeros([], jnp.int32))

    def update(grads: Params, state: SGDState, params: Params) -> tuple[Params, SGDState]:
        return jax.tree.map(lambda g: -learning_rate * g, grads), SGDState(state.count + 1)

    return GradientTransformation(init, update, ("sgd", learning_rate))


OPTIMIZERS: dict[str, Callable[..., GradientTransformation]] = {"sgd": sgd}


def from_spec(kind: str, *args: float) -> GradientTransformation:
    return OPTIMIZERS[kind](*args)


def apply_updates(params: Params, updates: Params) -> Params:
    return jax.tree.map(lambda p, u: p + u, params, updates)


@functools.cache  # compile once per optimizer, not once per run
def make_step(opt: GradientTransformation) -> Callable[[Params, NamedTuple, Params], tuple[Params, NamedTuple]]:
    """A jitted ``(params, state, mean_grad) -> (params, state)`` for ``opt``."""

    @op("fred.numerics.optim:step_from_spec", opt.spec or None)
    @jax.jit
    def step(params: Params, state: NamedTuple, grads: Params) -> tuple[Params, NamedTuple]:
        updates, state = opt.update(grads, state, params)
        return apply_updates(params, updates), state

    return step


@functools.cache
def make_sum_step(opt: GradientTransformation) -> Callable[[Params, NamedTuple, Params, int], tuple[Params, NamedTuple]]:
    """Like :func:`make_step`, from a gradient *sum* and its example count, in one compiled call."""

    @op("fred.numerics.optim:sum_step_from_spec", opt.spec or None)
    @jax.jit
    def step(params: Params, state: NamedTuple, grad_sum: Params, count: int) -> tuple[Params, NamedTuple]:
        updates, state = opt.update(jax.tree.map(lambda g: g / count, grad_sum), state, params)
        return apply_updates(params, updates), state

    return step


def step_from_spec(kind: str, *args: float) -> Callable[..., tuple[Params, NamedTuple]]:
    """:func:`make_step` of the optimizer ``from_spec(kind, *args)`` (how replay rebuilds it)."""
    return make_step(from_spec(kind, *args))


def sum_step_from_spec(kind: str, *args: float) -> Callable[..., tuple[Params, NamedTuple]]:
    return make_sum_step(from_spec(kind, *args))
