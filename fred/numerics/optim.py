"""Optimizers: optax's, built by name, in the form strategies apply them.

An optimizer is a :class:`GradientTransformation` value: ``init(params)`` gives its state,
``update(grads, state, params)`` the updates to add to the parameters, and ``spec`` how to
build it again (replay rebuilds every optimizer step from it). The algorithms and schedules
are optax's: :func:`build` names them as the scenario does (``sgd`` with momentum and
Nesterov, ``adam``, ``adamw``, L2 weight decay, a learning-rate schedule).

Optax keeps its state in its own named tuples. Here that state travels flat, the tuple of its
arrays in :class:`OptState`, and is rebuilt inside each jitted step from the structure optax's
``init`` gives: the numerics tape then records only fred's types, and reading a tape never
imports anything outside fred.
"""

from __future__ import annotations

import functools
import json
from typing import Any, Callable, NamedTuple

import jax
import optax

from fred.numerics.models import Params
from fred.numerics.tape import op
from fred.scenario.schema import StrategyConfig


class OptState(NamedTuple):
    """An optax state, flat: its arrays in optax's order (none for plain SGD)."""

    leaves: tuple[jax.Array, ...]


class GradientTransformation(NamedTuple):
    init: Callable[[Params], OptState]
    update: Callable[[Params, OptState, Params], tuple[Params, OptState]]
    spec: tuple[str | float, ...] = ()  # how to build it again: ("sgd", lr); replay needs it


def _flat(tx: optax.GradientTransformation, spec: tuple[str | float, ...]) -> GradientTransformation:
    def init(params: Params) -> OptState:
        return OptState(tuple(jax.tree.leaves(tx.init(params))))

    def update(grads: Params, state: OptState, params: Params) -> tuple[Params, OptState]:
        structure = jax.tree.structure(jax.eval_shape(tx.init, params))
        updates, inner = tx.update(grads, jax.tree.unflatten(structure, state.leaves), params)
        return updates, OptState(tuple(jax.tree.leaves(inner)))

    return GradientTransformation(init, update, spec)


# The scenario's names for optax's optimizers and schedules; a schedule's other keys are optax's
# own argument names, and the learning rate fills the one given here (None: no schedule).
OPTIMIZERS: dict[str, Callable[..., optax.GradientTransformation]] = {
    "sgd": optax.sgd, "adam": optax.adam, "adamw": optax.adamw,
}  # fmt: skip
SCHEDULES: dict[str, tuple[Callable[..., optax.Schedule] | None, str]] = {
    "constant": (None, ""),
    "cosine_decay": (optax.cosine_decay_schedule, "init_value"),
    "exponential_decay": (optax.exponential_decay, "init_value"),
    "warmup_cosine_decay": (optax.warmup_cosine_decay_schedule, "peak_value"),
    "linear": (optax.linear_schedule, "init_value"),
    "piecewise_constant": (optax.piecewise_constant_schedule, "init_value"),
}


def _learning_rate(learning_rate: float, schedule: dict[str, Any]) -> float | optax.Schedule:
    make, lr_argument = SCHEDULES[schedule.pop("kind", "constant")]
    if make is None:
        return learning_rate  # a number, not a function of the step: plain SGD stays -lr * g
    if "boundaries_and_scales" in schedule:  # JSON made its steps strings
        schedule["boundaries_and_scales"] = {int(k): v for k, v in schedule["boundaries_and_scales"].items()}
    return make(**{lr_argument: learning_rate}, **schedule)


@functools.cache  # one value per setting, so jitted steps built from it are compiled once
def build(
    kind: str, learning_rate: float, options: str = "{}", schedule: str = "{}"
) -> GradientTransformation:
    """Optax's optimizer ``kind`` (sgd, adam, adamw) at ``learning_rate``.

    ``options`` are its other arguments and ``schedule`` a learning-rate schedule by name
    (``{"kind": "cosine_decay", "decay_steps": 1000}``), both as JSON: the key of the cache
    and of the tape. ``weight_decay`` of sgd and adam is L2, added to the gradient first.
    """
    args = json.loads(options)
    decay = 0.0 if kind == "adamw" else args.pop("weight_decay", 0.0)
    tx = OPTIMIZERS[kind](_learning_rate(learning_rate, json.loads(schedule)), **args)
    if decay:
        tx = optax.chain(optax.add_decayed_weights(decay), tx)
    plain = options == "{}" and schedule == "{}"
    return _flat(tx, (kind, learning_rate) if plain else (kind, learning_rate, options, schedule))


def sgd(learning_rate: float) -> GradientTransformation:
    """Plain SGD: ``updates = -learning_rate * grad``."""
    return build("sgd", learning_rate)


def optimizer_for(config: StrategyConfig, learning_rate: float | None = None) -> GradientTransformation:
    """The optimizer a strategy's section names, at its ``lr`` (or ``learning_rate``)."""
    opt, schedule = config.optimizer, config.lr_schedule
    defaults = type(opt)()
    options = {k: v for k, v in opt.model_dump(exclude={"kind"}).items() if v != getattr(defaults, k)}
    steps = {} if schedule.kind == "constant" else schedule.model_dump(mode="json")
    lr = config.lr if learning_rate is None else learning_rate  # type: ignore[attr-defined]
    return build(opt.kind, lr, _canonical(options), _canonical(steps))


def _canonical(value: dict[str, Any]) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def from_spec(kind: str, *args: Any) -> GradientTransformation:
    return build(kind, *args)


def apply_updates(params: Params, updates: Params) -> Params:
    return optax.apply_updates(params, updates)


@functools.cache  # compile once per optimizer, not once per run
def make_step(opt: GradientTransformation) -> Callable[[Params, OptState, Params], tuple[Params, OptState]]:
    """A jitted ``(params, state, mean_grad) -> (params, state)`` for ``opt``."""

    @op("fred.numerics.optim:step_from_spec", opt.spec or None)
    @jax.jit
    def step(params: Params, state: OptState, grads: Params) -> tuple[Params, OptState]:
        updates, state = opt.update(grads, state, params)
        return apply_updates(params, updates), state

    return step


@functools.cache
def make_sum_step(
    opt: GradientTransformation,
) -> Callable[[Params, OptState, Params, int], tuple[Params, OptState]]:
    """Like :func:`make_step`, from a gradient *sum* and its example count, in one compiled call."""

    @op("fred.numerics.optim:sum_step_from_spec", opt.spec or None)
    @jax.jit
    def step(params: Params, state: OptState, grad_sum: Params, count: int) -> tuple[Params, OptState]:
        updates, state = opt.update(jax.tree.map(lambda g: g / count, grad_sum), state, params)
        return apply_updates(params, updates), state

    return step


def step_from_spec(kind: str, *args: Any) -> Callable[..., tuple[Params, OptState]]:
    """:func:`make_step` of the optimizer ``from_spec(kind, *args)`` (how replay rebuilds it)."""
    return make_step(from_spec(kind, *args))


def sum_step_from_spec(kind: str, *args: Any) -> Callable[..., tuple[Params, OptState]]:
    return make_sum_step(from_spec(kind, *args))
