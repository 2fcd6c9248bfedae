"""The optimizers and learning-rate schedules a strategy's section names."""

from __future__ import annotations

import typing
from typing import Annotated, Any, Literal, Union

from pydantic import Field, field_validator, model_validator

from fred.scenario.schema.base import NonNegFloat, PositiveFloat, Section

Fraction = Annotated[float, Field(ge=0, lt=1)]  # a moving-average weight: 1 would never forget


class SGDOptimizer(Section):
    """optax.sgd: ``-lr * g``, or with momentum ``m <- momentum m + g`` and ``-lr * m``."""

    kind: Literal["sgd"] = "sgd"
    momentum: Fraction = Field(default=0.0, description="heavy-ball momentum; 0: plain SGD")
    nesterov: bool = Field(default=False, description="Nesterov's momentum (needs momentum above 0)")
    weight_decay: NonNegFloat = Field(
        default=0.0, description="L2: adds weight_decay * params to the gradient"
    )

    @model_validator(mode="after")
    def _nesterov_needs_momentum(self) -> "SGDOptimizer":
        # optax.sgd drops nesterov without momentum: the run would be plain SGD, silently.
        if self.nesterov and self.momentum == 0:
            raise ValueError(
                "nesterov: true needs momentum above 0 (e.g. momentum: 0.9); with momentum 0 it is plain SGD"
            )
        return self


class AdamOptimizer(Section):
    """optax.adam (Kingma and Ba); ``weight_decay`` is L2 added to the gradient, as in torch.optim.Adam."""

    kind: Literal["adam"] = "adam"
    b1: Fraction = Field(default=0.9, description="first-moment decay")
    b2: Fraction = Field(default=0.999, description="second-moment decay")
    eps: PositiveFloat = Field(default=1e-8, description="added to the root of the second moment")
    nesterov: bool = Field(default=False, description="NAdam's Nesterov momentum")
    weight_decay: NonNegFloat = Field(
        default=0.0, description="L2: adds weight_decay * params to the gradient"
    )


class AdamWOptimizer(AdamOptimizer):
    """optax.adamw (Loshchilov and Hutter): Adam with weight decay applied to the parameters, scaled by lr."""

    kind: Literal["adamw"] = "adamw"  # type: ignore[assignment]
    weight_decay: NonNegFloat = Field(
        default=1e-4, description="decoupled: -lr * weight_decay * params each step"
    )


OptimizerConfig = Annotated[Union[SGDOptimizer, AdamOptimizer, AdamWOptimizer], Field(discriminator="kind")]

# A schedule's keys are optax's own argument names; the strategy's lr fills the one named here.
ScheduleSteps = Annotated[int, Field(ge=1)]
StepCount = Annotated[int, Field(ge=0)]


class ConstantSchedule(Section):
    """``lr`` at every step."""

    kind: Literal["constant"] = "constant"


class CosineDecaySchedule(Section):
    """optax.cosine_decay_schedule from ``lr`` to ``alpha * lr`` over ``decay_steps``, then flat."""

    kind: Literal["cosine_decay"] = "cosine_decay"
    decay_steps: ScheduleSteps
    alpha: Annotated[float, Field(ge=0, le=1)] = Field(
        default=0.0, description="the final value as a fraction of lr"
    )
    exponent: PositiveFloat = 1.0


class ExponentialDecaySchedule(Section):
    """optax.exponential_decay: ``lr * decay_rate ** ((step - transition_begin) / transition_steps)``."""

    kind: Literal["exponential_decay"] = "exponential_decay"
    transition_steps: ScheduleSteps
    decay_rate: PositiveFloat
    transition_begin: StepCount = 0
    staircase: bool = Field(default=False, description="decay in whole transitions, not continuously")
    end_value: NonNegFloat | None = Field(
        default=None, description="a floor (decay_rate < 1) or ceiling (> 1)"
    )


class WarmupCosineDecaySchedule(Section):
    """optax.warmup_cosine_decay_schedule: linear from ``init_value`` to ``lr`` over ``warmup_steps``,
    then cosine to ``end_value`` at ``decay_steps`` (counted from the start, warm-up included)."""

    kind: Literal["warmup_cosine_decay"] = "warmup_cosine_decay"
    warmup_steps: StepCount
    decay_steps: ScheduleSteps
    init_value: NonNegFloat = Field(default=0.0, description="the learning rate at step 0")
    end_value: NonNegFloat = 0.0
    exponent: PositiveFloat = 1.0

    @model_validator(mode="after")
    def _decays_after_warmup(self) -> "WarmupCosineDecaySchedule":
        if self.decay_steps <= self.warmup_steps:
            raise ValueError(
                f"decay_steps ({self.decay_steps}) counts the warm-up too; give more than "
                f"warmup_steps ({self.warmup_steps})"
            )
        return self


class LinearSchedule(Section):
    """optax.linear_schedule from ``lr`` to ``end_value`` over ``transition_steps``, then flat."""

    kind: Literal["linear"] = "linear"
    end_value: NonNegFloat
    transition_steps: ScheduleSteps
    transition_begin: StepCount = 0


class PiecewiseConstantSchedule(Section):
    """optax.piecewise_constant_schedule: from each boundary step on, the rate is multiplied by its scale."""

    kind: Literal["piecewise_constant"] = "piecewise_constant"
    boundaries_and_scales: dict[StepCount, NonNegFloat] = Field(
        min_length=1, description="step -> factor, e.g. {30000: 0.1, 60000: 0.1}"
    )

    @field_validator("boundaries_and_scales")
    @classmethod
    def _in_step_order(cls, value: dict[int, float]) -> dict[int, float]:
        return dict(sorted(value.items()))  # the resolved scenario reads the same whatever the input's order


ScheduleConfig = Annotated[
    Union[
        ConstantSchedule,
        CosineDecaySchedule,
        ExponentialDecaySchedule,
        WarmupCosineDecaySchedule,
        LinearSchedule,
        PiecewiseConstantSchedule,
    ],
    Field(discriminator="kind"),
]


def _optimizer_by_kind(value: Any) -> Any:
    """``optimizer: adam`` is ``{kind: adam}``; keys without a kind are sgd's, the default optimizer."""
    if isinstance(value, str):
        return {"kind": value}
    return {"kind": "sgd", **value} if isinstance(value, dict) and "kind" not in value else value


def _schedule_by_kind(value: Any) -> Any:
    """``lr_schedule: constant`` is ``{kind: constant}``; a schedule's keys depend on its kind, so it must be
    named."""
    if isinstance(value, str):
        return {"kind": value}
    if isinstance(value, dict) and "kind" not in value:
        kinds = typing.get_args(typing.get_args(ScheduleConfig)[0])
        raise ValueError(
            "give the schedule's kind, one of: " + ", ".join(k.model_fields["kind"].default for k in kinds)
        )
    return value
