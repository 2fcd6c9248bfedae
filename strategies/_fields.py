"""Bounded settings whose refusal says the fix, stated once: the bound and the fix are the Field's.

    class MyStrategy(StrategyConfig):
        steps: int = bounded(8, ge=1, fix="use at least 1 step", description="...")
        _bounds = refuse_out_of_bounds()

A number outside the Field's ``gt``/``ge``/``lt``/``le`` is refused as ``<field>: got <value>; <fix>``
(the scenario loader adds the field's path); the bounds stay in the Field, so the schema page
shows them too. Anything not a number is left to pydantic's own checks, which name it.
"""

from __future__ import annotations

import operator
from typing import Any, NamedTuple

import annotated_types
from pydantic import Field, ValidationInfo, field_validator

_TESTS = (
    (annotated_types.Gt, "gt", operator.gt),
    (annotated_types.Ge, "ge", operator.ge),
    (annotated_types.Lt, "lt", operator.lt),
    (annotated_types.Le, "le", operator.le),
)


class Fix(NamedTuple):
    """The fix a bounded Field's refusal names (kept in the Field's metadata)."""

    text: str


def bounded(default: Any, *, fix: str, description: str | None = None, **bounds: float) -> Any:
    """A Field with ``bounds`` (``gt``, ``ge``, ``lt``, ``le``) whose violation says ``fix``."""
    info = Field(default=default, description=description, **bounds)  # type: ignore[call-overload]
    info.metadata.append(Fix(fix))
    return info


def within(value: float, metadata: list[Any]) -> bool:
    """Whether ``value`` meets every bound among a Field's ``metadata``."""
    return all(
        test(value, getattr(m, name)) for kind, name, test in _TESTS for m in metadata if isinstance(m, kind)
    )


def _refuse(cls: Any, value: Any, info: ValidationInfo) -> Any:
    field = cls.model_fields[info.field_name]
    fixes = [m.text for m in field.metadata if isinstance(m, Fix)]
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if fixes and number and not within(value, field.metadata):
        raise ValueError(f"got {value}; {fixes[0]}")
    return value


def refuse_out_of_bounds() -> Any:
    """The validator a config class assigns (``_bounds = refuse_out_of_bounds()``) for its
    :func:`bounded` fields."""
    return field_validator("*", mode="before")(classmethod(_refuse))
