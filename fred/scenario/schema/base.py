"""The base of every scenario section, and the field types and path helper they share."""

from __future__ import annotations

import os
import types
import typing
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, model_validator


class Section(BaseModel):
    """Base of every scenario section: frozen, unknown keys rejected, every number finite
    (an infinite time or size passed the bounds and then hung or crashed the run)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _no_booleans_for_numbers(cls, data: Any) -> Any:
        # pydantic takes true as 1: "workers: yes" ran one worker. (A model validator: a field
        # validator for every field is not allowed on the fields unions are told apart by.)
        if isinstance(data, dict):
            for key, value in data.items():
                field = cls.model_fields.get(key) if isinstance(key, str) else None
                if isinstance(value, bool) and field is not None and not _takes_bool(field.annotation):
                    wanted = "a number" if _numeric(field.annotation) else "a number or a name"
                    raise ValueError(
                        f"{key}: got {str(value).lower()}; {wanted} is needed here, not true or false"
                    )
        return data


def _numeric(annotation: Any) -> bool:
    """Whether a field takes numbers only (``int``, ``float``, bounded or optional)."""
    if typing.get_origin(annotation) is Annotated:
        return _numeric(typing.get_args(annotation)[0])
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if args and typing.get_origin(annotation) in (Union, types.UnionType):
        return all(_numeric(a) for a in args)
    return annotation in (int, float)


def _takes_bool(annotation: Any) -> bool:
    """Whether a field's type admits a boolean (``bool``, ``Any``, a Literal of one, or a union with one)."""
    if annotation is bool or annotation is Any:
        return True
    if typing.get_origin(annotation) is Literal:
        return any(isinstance(v, bool) for v in typing.get_args(annotation))
    return any(_takes_bool(arg) for arg in typing.get_args(annotation))


PositiveFloat = Annotated[float, Field(gt=0)]
NonNegFloat = Annotated[float, Field(ge=0)]


def absolute_path(value: str, base_dir: str | os.PathLike[str] | None = None) -> str:
    """``value`` (``~`` expanded) as an absolute path: a relative one is taken from ``base_dir``, the
    scenario file's folder, or without one (a scenario built in Python) from the working directory.
    The resolved scenario holds it so, and a run directory's copy finds the same file from anywhere."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"got {value!r}; give a path")
    path = os.path.expanduser(value)
    return os.path.abspath(os.path.join(base_dir, path) if base_dir is not None else path)


def _absolute(value: str | None) -> str | None:
    return None if value is None else absolute_path(value)
