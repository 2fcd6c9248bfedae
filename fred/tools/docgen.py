"""Reference pages generated from the code, so they can never drift from it.

``mkdocs build`` calls these through ``docs/hooks.py``: the scenario schema comes from the
pydantic models (every section, and every registered strategy's hyper-parameters), the
CLI reference from the argument parser.
"""

from __future__ import annotations

import types
import typing
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from fred.scenario.schema import Scenario

_BOUNDS = {
    "gt": ">",
    "ge": ">=",
    "lt": "<",
    "le": "<=",
    "min_length": "at least {} entries",
    "max_length": "at most {} entries",
}


def _bounds(metadata: list[Any]) -> list[str]:
    """``Gt(gt=0)``, ``MinLen(min_length=1)``, ... as ``> 0``, ``at least 1 entries``."""
    found = []
    for item in metadata:
        for name, sign in _BOUNDS.items():
            value = getattr(item, name, None)
            if value is not None:
                found.append(sign.format(value) if "{}" in sign else f"{sign} {value}")
    return found


def _type_text(annotation: Any) -> tuple[str, list[str]]:
    """A readable type and the bounds found inside it (``Annotated[float, Field(gt=0)]``: float, > 0)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        text, bounds = _type_text(args[0])
        for extra in args[1:]:
            bounds += _bounds(getattr(extra, "metadata", [extra]))
        return text, bounds
    if origin in (typing.Union, types.UnionType):
        parts = [_type_text(a) for a in args if a is not type(None)]
        text = " or ".join(t for t, _ in parts) + (" or null" if type(None) in args else "")
        return text, [b for _, bounds in parts for b in bounds]
    if origin is typing.Literal:
        return " or ".join(repr(a) for a in args), []
    if origin is not None:
        inner = [_type_text(a) for a in args]
        name = getattr(origin, "__name__", str(origin))
        bounds = [f"each {b}" for _, bs in inner for b in bs]
        return f"{name}[{', '.join(t for t, _ in inner)}]", bounds
    return (annotation.__name__ if isinstance(annotation, type) else repr(annotation)), []


def _type_name(annotation: Any) -> str:
    return _type_text(annotation)[0].replace("|", "\\|")


def _default(field: Any) -> str:
    if field.default is not PydanticUndefined:
        return f"`{field.default!r}`" if field.default is not None else "—"
    if field.default_factory is not None:
        value = field.default_factory()
        return f"`{value.model_dump() if isinstance(value, BaseModel) else value!r}`"
    return "**required**"


def _constraints(field: Any) -> str:
    bounds = _bounds(field.metadata) + _type_text(field.annotation)[1]
    return ", ".join(bounds).replace("|", "\\|")


def model_table(model: type[BaseModel]) -> list[str]:
    lines = ["| field | type | default | constraints | description |", "| --- | --- | --- | --- | --- |"]
    for name, field in model.model_fields.items():
        lines.append(
            f"| `{name}` | {_type_name(field.annotation)} | {_default(field)} | {_constraints(field)} "
            f"| {(field.description or '').replace('|', '/')} |"
        )
    return lines


def _nested_models(model: type[BaseModel]) -> list[type[BaseModel]]:
    found: list[type[BaseModel]] = []

    def visit(annotation: Any) -> None:
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            if annotation not in found and annotation is not model:
                found.append(annotation)
                for f in annotation.model_fields.values():
                    visit(f.annotation)
            return
        for arg in typing.get_args(annotation):
            visit(arg)

    for f in model.model_fields.values():
        visit(f.annotation)
    return found


def scenario_reference() -> str:
    from fred.scenario import registry

    lines = [
        "# Scenario schema (generated)",
        "",
        "Generated from the pydantic models in `fred/scenario/schema/` and the registered strategies",
        "when the documentation is built; do not edit. Every section rejects unknown keys.",
        "",
        "## Scenario",
        "",
        *model_table(Scenario),
    ]
    for model in _nested_models(Scenario):
        if model.__name__ == "StrategyConfig":
            continue
        lines += [
            "",
            f"## {model.__name__}",
            "",
            (model.__doc__ or "").strip().splitlines()[0] if model.__doc__ else "",
            "",
        ]
        lines += model_table(model)
    lines += ["", "## Strategies", ""]
    for strategy in registry.all_strategies():
        lines += [f"### `{strategy.name}`", "", strategy.summary, "", *model_table(strategy.config), ""]
    return "\n".join(lines) + "\n"


def cli_reference() -> str:
    from fred.tools.cli_parser import build_parser

    parser = build_parser()
    lines = [
        "# Command line (generated)",
        "",
        "Generated from `fred --help` when the documentation is built.",
        "",
    ]
    lines += ["```text", parser.format_help().rstrip(), "```", ""]
    subparsers = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    for name, sub in subparsers.choices.items():
        lines += [f"## `fred {name}`", "", "```text", sub.format_help().rstrip(), "```", ""]
    return "\n".join(lines)
