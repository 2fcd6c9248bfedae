"""The ``stop`` and ``eval`` sections: when a run ends and how it is evaluated."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, model_validator

from fred.scenario.schema.base import PositiveFloat, Section


class StopConfig(Section):
    max_sim_time_s: PositiveFloat | None = None
    max_updates: Annotated[int, Field(ge=1)] | None = None
    target_eval_loss: float | None = None

    @model_validator(mode="after")
    def _bounded(self) -> "StopConfig":
        if self.max_sim_time_s is None and self.max_updates is None:
            raise ValueError("set max_sim_time_s or max_updates (or both) so the run ends")
        return self


class EvalConfig(Section):
    """When to evaluate on the held-out set: every N updates or every T simulated seconds."""

    every_updates: Annotated[int, Field(ge=1)] | None = Field(
        default=None, description="20 when every_s is not given either"
    )
    every_s: PositiveFloat | None = None

    @model_validator(mode="before")
    @classmethod
    def _default_cadence(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("every_updates") is None and data.get("every_s") is None:
            return {**data, "every_updates": 20}
        return data

    @model_validator(mode="after")
    def _one_cadence(self) -> "EvalConfig":
        if self.every_updates is not None and self.every_s is not None:
            raise ValueError("give every_updates or every_s, not both")
        return self
