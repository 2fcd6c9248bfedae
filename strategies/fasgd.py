"""FASGD: SASGD whose step is divided by a moving average of per-element gradient statistics.

    server, on every gradient g (mean over its batch) with step staleness tau, in order:
        statistic: std (default, the paper's prose)
            n <- gamma n + (1 - gamma) g^2
            b <- gamma b + (1 - gamma) g
            v <- beta v + (1 - beta) sqrt(max(n - b^2, 0) + eps)
        statistic: abs (the authors' released code)
            v <- gamma v + (1 - gamma) |g|;   then divide by (v + eps)
        delta_k = g / v / (c (tau + 1))       (1/c when staleness_aware is off)
    after c gradients: theta <- theta - lr * sum_k delta_k;  version += 1

All arithmetic is element-wise. See docs/fasgd.md for why the printed ``1/sqrt``
form is not offered.

The averages start at zero, as in the paper and the authors' code, so the first
statistics are too small and the first steps large. ``bias_correction: true`` divides
each average by ``1 - w^t`` as Adam does (``w`` its weight, ``t`` the gradients seen):
``n``, ``b`` by ``1 - gamma^t`` before the standard deviation, ``v`` by ``1 - beta^t``
(by ``1 - gamma^t`` for ``abs``) before the division. The first gradient's corrected
standard deviation is ``sqrt(eps)``: one gradient has no spread.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Literal, NamedTuple

import jax
import jax.numpy as jnp
from pydantic import Field, model_validator

from fred.numerics.gradients import GradSum, mean_grad, tree_sum
from fred.numerics.models import Params
from fred.numerics.optim import GradientTransformation, make_step, optimizer_for
from fred.numerics.tape import op
from fred.scenario.registry import register
from fred.simulation.engine import Simulation
from strategies._parameter_server import Rule, run_parameter_server
from strategies.sasgd import SASGD, staleness_scales


class FASGD(SASGD):
    name: Literal["fasgd"] = "fasgd"  # type: ignore[assignment]
    lr: float = Field(default=0.005, gt=0)
    statistic: Literal["std", "abs"] = "std"
    gamma: float = Field(default=0.9, ge=0, lt=1, description="moving-average weight of the gradient moments")
    beta: float = Field(
        default=0.9, ge=0, lt=1, description="moving-average weight of the standard deviation"
    )
    eps: float = Field(
        default=None,  # type: ignore[assignment]
        gt=0,
        description="numerical floor: inside the sqrt (std; default 1e-4, Graves 2013) or added (abs; 1e-3)",
    )
    bias_correction: bool = Field(
        default=False,
        description="divide each zero-started moving average by 1 - weight^t, as Adam does; false: the "
        "paper's and "
        "the released code's form, whose first steps are large",
    )

    def optimizer_refusal(self) -> str | None:
        # FASGD's division by v is its own adaptive step; Adam's by its second moment would stack on it.
        if self.optimizer.kind != "sgd":
            return (
                f"optimizer.kind is {self.optimizer.kind!r}: {self.name} already divides every gradient by a "
                "running per-element statistic (its adaptive step), and Adam would divide it again; allowed "
                "with "
                f"{self.name}: sgd (its momentum and weight decay apply to FASGD's step), or use asgd or "
                "sasgd with adam"
            )
        return super().optimizer_refusal()

    @model_validator(mode="before")
    @classmethod
    def _default_eps(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("eps") is None:
            return {**data, "eps": 1e-3 if data.get("statistic") == "abs" else 1e-4}
        return data


class Moments(NamedTuple):
    """Per-element running moments ``n`` (of g^2), ``b`` (of g) and the statistic ``v``."""

    n: Params
    b: Params
    v: Params


class CorrectedMoments(NamedTuple):
    """:class:`Moments` and ``t``, the gradients they have seen, for the bias correction."""

    n: Params
    b: Params
    v: Params
    t: jax.Array  # int32 scalar


def init_moments(params: Params, bias_correction: bool = False) -> Moments | CorrectedMoments:
    zeros = jax.tree.map(jnp.zeros_like, params)
    if bias_correction:
        return CorrectedMoments(zeros, zeros, zeros, jnp.zeros((), jnp.int32))
    return Moments(zeros, zeros, zeros)


def _unbias(tree: Params, weight: float, t: jax.Array) -> Params:
    """A zero-started average of ``t`` values, weighted ``weight``, divided by ``1 - weight^t`` (Adam)."""
    scale = 1 - jnp.power(jnp.float32(weight), t.astype(jnp.float32))
    return jax.tree.map(lambda x: x / scale, tree)


def update_moments(
    m: Moments | CorrectedMoments, g: Params, statistic: str, gamma: float, beta: float, eps: float
) -> Moments | CorrectedMoments:
    """One gradient's effect on the running statistics (pure, element-wise)."""
    ema = lambda old, new, w: jax.tree.map(lambda o, x: w * o + (1 - w) * x, old, new)
    corrected = isinstance(m, CorrectedMoments)
    if statistic == "abs":
        v = ema(m.v, jax.tree.map(jnp.abs, g), gamma)
        return CorrectedMoments(m.n, m.b, v, m.t + 1) if corrected else Moments(m.n, m.b, v)
    n = ema(m.n, jax.tree.map(jnp.square, g), gamma)
    b = ema(m.b, g, gamma)
    if corrected:  # the standard deviation of the corrected moments, averaged
        std = _std(_unbias(n, gamma, m.t + 1), _unbias(b, gamma, m.t + 1), eps)
        return CorrectedMoments(n, b, ema(m.v, std, beta), m.t + 1)
    return Moments(n, b, ema(m.v, _std(n, b, eps), beta))


def _std(n: Params, b: Params, eps: float) -> Params:
    return jax.tree.map(lambda n_, b_: jnp.sqrt(jnp.maximum(n_ - b_**2, 0.0) + eps), n, b)


def statistic_of(m: Moments | CorrectedMoments, statistic: str, gamma: float, beta: float) -> Params:
    """``v`` as the update divides by it: corrected by ``1 - w^t`` when ``m`` counts its gradients."""
    if isinstance(m, CorrectedMoments):
        return _unbias(m.v, gamma if statistic == "abs" else beta, m.t)
    return m.v


def divide_by_statistic(
    g: Params,
    m: Moments | CorrectedMoments,
    statistic: str,
    eps: float,
    gamma: float = 0.0,
    beta: float = 0.0,
) -> Params:
    v = statistic_of(m, statistic, gamma, beta)
    if statistic == "abs":
        return jax.tree.map(lambda g_, v_: g_ / (v_ + eps), g, v)
    return jax.tree.map(lambda g_, v_: g_ / v_, g, v)


def mean_statistic(m: Moments) -> jax.Array:
    """The size-weighted mean of ``v`` over every parameter element (B-FASGD's scalar)."""
    leaves = jax.tree.leaves(m.v)
    return sum(jnp.sum(leaf) for leaf in leaves) / sum(leaf.size for leaf in leaves)


@functools.cache
def corrected_mean_statistic(
    statistic: str, gamma: float, beta: float
) -> Callable[[CorrectedMoments], jax.Array]:
    """:func:`mean_statistic` of the corrected ``v`` (B-FASGD's scalar with ``bias_correction``)."""

    @op("strategies.fasgd:corrected_mean_statistic", (statistic, gamma, beta))
    @jax.jit
    def mean(m: CorrectedMoments) -> jax.Array:
        return mean_statistic(Moments(m.n, m.b, statistic_of(m, statistic, gamma, beta)))

    return mean


# Recorded, so that a resumed run meets a placeholder (and says it needs the number) here.
_mean_statistic = op("strategies.fasgd:_mean_statistic")(jax.jit(mean_statistic))


@functools.cache
def fasgd_one(
    statistic: str, gamma: float, beta: float, eps: float, bias_correction: bool = False
) -> Callable[..., tuple[Moments, Params]]:
    """One gradient through the statistics: ``(moments, g, scale) -> (moments, scale * g / v)``."""
    key = (statistic, gamma, beta, eps) + (
        (True,) if bias_correction else ()
    )  # the paper's form keeps the shorter key

    @op("strategies.fasgd:fasgd_one", key)
    @jax.jit
    def one(moments: Moments, g: Params, scale: jax.Array) -> tuple[Moments, Params]:
        moments = update_moments(moments, g, statistic, gamma, beta, eps)
        divided = divide_by_statistic(g, moments, statistic, eps, gamma, beta)
        return moments, jax.tree.map(lambda d: d * scale, divided)

    return one


@functools.cache  # one compiled rule per hyper-parameter set, shared by runs in a process
def fasgd_rule(
    opt: GradientTransformation,
    staleness_aware: bool,
    statistic: str,
    gamma: float,
    beta: float,
    eps: float,
    bias_correction: bool = False,
) -> Rule:
    """``opt`` (SGD: ``-lr * x``, or with momentum) turns ``sum_k delta_k`` into the step."""
    step = make_step(opt)
    one = fasgd_one(statistic, gamma, beta, eps, bias_correction)
    mean = corrected_mean_statistic(statistic, gamma, beta) if bias_correction else _mean_statistic

    def init(params: Params) -> tuple[Moments | CorrectedMoments, Any]:
        return init_moments(params, bias_correction), opt.init(params)

    def apply(params: Params, state: Any, grads: list[GradSum], staleness: list[int]) -> tuple[Params, Any]:
        moments, opt_state = state
        scales = staleness_scales(len(grads), staleness, staleness_aware)  # c: this batch's size (sasgd_rule)
        deltas = []
        for k, grad in enumerate(grads):  # statistics see every gradient, in order
            moments, delta = one(moments, mean_grad(grad), scales[k])
            deltas.append(delta)
        params, opt_state = step(params, opt_state, deltas[0] if len(deltas) == 1 else tree_sum(deltas))
        return params, (moments, opt_state)

    return Rule(init, apply, statistic=lambda state: float(mean(state[0])))


def rule_for(config: FASGD) -> Rule:
    return fasgd_rule(
        optimizer_for(config),
        config.staleness_aware,
        config.statistic,
        config.gamma,
        config.beta,
        config.eps,
        config.bias_correction,
    )


@register(FASGD)
def start(sim: Simulation, config: FASGD):
    c = config.gradients_per_update(len(sim.workers))
    return run_parameter_server(sim, rule_for(config), c, config.clock)
