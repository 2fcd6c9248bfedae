"""Reading scenarios: safe YAML, ``--set`` overrides, and errors that say how to fix them."""

from __future__ import annotations

import copy
import difflib
import re
import types
import typing
from collections.abc import Hashable
from pathlib import Path
from typing import Any, NamedTuple

import yaml
from pydantic import BaseModel, ValidationError

from fred.scenario import registry
from fred.scenario.profiles import read_profile
from fred.scenario.schema import Scenario


class ScenarioError(Exception):
    """A scenario that cannot run, with one line per problem."""

    def __init__(self, problems: list[str], source: str = "scenario"):
        self.problems, self.source = problems, source
        count = f"{len(problems)} problem{'s' if len(problems) != 1 else ''}"
        super().__init__(f"{source}: {count}\n" + "\n".join(f"  - {p}" for p in problems))


def read_yaml(path: str | Path) -> dict[str, Any]:
    """Parse a scenario file with the safe loader (no tags, no code, no includes)."""
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise ScenarioError([f"no such file: {path}"], str(path)) from None
    except IsADirectoryError:
        raise ScenarioError([f"{path} is a directory; give a scenario .yaml file"], str(path)) from None
    except UnicodeDecodeError as err:
        raise ScenarioError([f"not UTF-8 text (byte {err.start}); save the file as UTF-8"], str(path)) from None
    try:
        data = yaml.load(text, Loader=_UniqueKeys)
    except yaml.YAMLError as err:
        where = getattr(err, "problem_mark", None)
        at = f"line {where.line + 1}, column {where.column + 1}: " if where else ""
        raise ScenarioError([f"YAML syntax error at {at}{getattr(err, 'problem', err)}"], str(path)) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ScenarioError([f"the top level must be a mapping of sections, got {type(data).__name__}"], str(path))
    return data


class _Numbers(yaml.SafeLoader):
    """The safe loader, reading ``1e-3`` and ``1.25e9`` as numbers: YAML 1.1, which PyYAML
    follows, wants ``1.0e-3`` and ``1.25e+9`` and reads the usual spellings as strings."""


_Numbers.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+.0123456789"),
)


def yaml_value(text: str) -> Any:
    """A value written on the command line (``--set``, ``--grid``), read as scenario files are."""
    return yaml.load(text, Loader=_Numbers)  # noqa: S506 - a safe loader


class _UniqueKeys(_Numbers):
    """The safe loader, refusing a key given twice in one mapping (YAML keeps the last silently:
    a second ``cluster:`` section replaced the first, workers and all)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, Hashable) and key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"the key {key!r} is given twice; merge the two into one", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def apply_overrides(data: dict[str, Any], sets: list[str]) -> dict[str, Any]:
    """Apply ``path.to.key=value`` overrides; values are parsed as YAML (``3``, ``0.1``, ``[64, 32]``)."""
    data = copy.deepcopy(data)
    for item in sets:
        if "=" not in item:
            raise ScenarioError([f"--set {item!r}: write it as path.to.key=value"], "--set")
        path, _, raw = item.partition("=")
        try:
            value = yaml_value(raw)
        except yaml.YAMLError:
            value = raw
        set_path(data, path.strip(), value)
    return data


def set_path(data: dict[str, Any], path: str, value: Any) -> None:
    """Set ``a.b.c`` in nested mappings, creating missing mappings on the way; a number
    indexes a list (``cluster.stragglers.0.slow_factor``)."""
    keys = path.split(".")
    if not all(keys):
        raise ScenarioError([f"--set {path}={value!r}: a part of the path is empty; write it as path.to.key=value"], "--set")
    node: Any = data
    for depth, key in enumerate(keys):
        last, parent = depth == len(keys) - 1, ".".join(keys[:depth])
        if isinstance(node, list):
            index = _list_index(node, key)
            if index is None:
                raise ScenarioError([f"--set {path}: {parent} is a list of {len(node)}; index it 0..{len(node) - 1}"], "--set")
            key = index  # type: ignore[assignment]
        elif not isinstance(node, dict):
            raise ScenarioError([f"--set {path}: {parent} is {node!r}, not a section; set it whole"], "--set")
        if last:
            node[key] = value
        elif isinstance(node, dict) and node.get(key) is None:
            node[key] = {}
        node = node[key]


def get_path(data: Any, path: str, default: Any = None) -> Any:
    """The value at ``a.b.0.c`` (as :func:`set_path` reads the path), or ``default`` where there is none."""
    for key in path.split("."):
        index = _list_index(data, key) if isinstance(data, list) else None
        if index is not None:
            data = data[index]
        elif isinstance(data, dict) and key in data:
            data = data[key]
        else:
            return default
    return data


def _list_index(items: list[Any], key: str) -> int | None:
    """``key`` as an index into ``items``, or None when it is not one."""
    return int(key) if key.isdigit() and int(key) < len(items) else None


def merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """Deep-merge ``overrides`` into a copy of ``base`` (mappings merge, everything else replaces)."""
    out = copy.deepcopy(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def validate(data: dict[str, Any], source: str = "scenario") -> Scenario:
    """Validate plain data into a :class:`Scenario`, or raise :class:`ScenarioError`."""
    try:
        return Scenario.model_validate(data)
    except ValidationError as err:
        raise ScenarioError(_merged([_describe(e, data) for e in err.errors()]), source) from None


def load_scenario(path: str | Path, sets: list[str] | None = None, seed: int | None = None) -> Scenario:
    """Read, override and validate a scenario file."""
    data = apply_overrides(read_yaml(path), list(sets or []))
    if seed is not None:
        data["seed"] = seed
    return validate(include_profiles(data, Path(path).parent, str(path)), str(path))


def include_profiles(data: dict[str, Any], base_dir: Path, source: str = "scenario") -> dict[str, Any]:
    """Replace ``cluster.compute.profile: FILE`` by the measured ``step_time_s`` in FILE.

    A relative FILE is found next to the scenario file (or the working directory).
    """

    compute = data.get("cluster", {}).get("compute") if isinstance(data.get("cluster"), dict) else None
    if not isinstance(compute, dict) or "profile" not in compute:
        return data
    profile = compute["profile"]
    if not isinstance(profile, str):
        raise ScenarioError([f"cluster.compute.profile: got {profile!r}; give the path of a profile file"], source)
    others = sorted(k for k, v in compute.items() if k != "profile" and v is not None)
    if others:  # the profile's time would silently replace step_time_s, or clash with FLOPs
        raise ScenarioError([f"cluster.compute: a profile gives the step time; drop {', '.join(others)}, or the profile"], source)
    try:
        step_time_s = read_profile(base_dir / profile)
    except ValueError as err:
        raise ScenarioError([str(err)], source) from None
    out = copy.deepcopy(data)
    out["cluster"]["compute"] = {k: v for k, v in compute.items() if k != "profile"} | {"step_time_s": step_time_s}
    return out


# ----------------------------------------------------------------------------- messages
class _Problem(NamedTuple):
    """One pydantic error, described: ``head + message`` is its line."""

    where: str  # the field's readable path
    head: str  # the path and the value it got, ready for the message: the same for each branch of a union
    message: str
    branch: bool  # one branch of a (not discriminated) union's


def _merged(problems: list[_Problem]) -> list[str]:
    """One line per field and value: a value that fits no branch of a union ("a name or a list")
    gives pydantic one error per branch, which read as one problem with its alternatives."""
    lines: dict[str, list[str]] = {}
    for p in problems:
        if p.branch and any(q.where.startswith(p.where + ".") for q in problems):
            continue  # a union branch the value's shape did not take: the deeper problem is the one to fix
        said = lines.setdefault(p.head, [])
        said.append(p.message.removeprefix(_SHOULD) if said and said[0].startswith(_SHOULD) else p.message)
    return [head + ", or ".join(messages) for head, messages in lines.items()]


_SHOULD = "Input should be "


def _describe(error: dict[str, Any], data: dict[str, Any]) -> _Problem:
    loc, model_at, branch = _walk(error["loc"], data)
    where = ".".join(str(p) for p in loc) or "scenario"
    kind = error["type"]
    if kind == "extra_forbidden":
        allowed = sorted(model_at.model_fields) if model_at else []
        close = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else "."
        return _Problem(where, f"{where}: unknown key{hint} Allowed here: {', '.join(allowed)}", "", branch)
    if kind == "missing":
        return _Problem(where, f"{where}: missing; this field is required", "", branch)
    if kind == "union_tag_invalid":  # pydantic: "Input tag 'x' found using 'kind' does not match any of ..."
        ctx = error.get("ctx", {})
        field = f"{where}.{str(ctx.get('discriminator', 'kind')).strip(chr(39))}"
        allowed = [t.strip(" '") for t in str(ctx.get("expected_tags", "")).split(",")]
        close = difflib.get_close_matches(str(ctx.get("tag")), allowed, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ";"
        return _Problem(field, f"{field}: got {ctx.get('tag')!r}{hint} allowed: {', '.join(allowed)}", "", branch)
    message = error["msg"].removeprefix("Value error, ")
    if kind in ("value_error", "assertion_error") or "input" not in error or isinstance(error["input"], dict):
        return _Problem(where, f"{where}: ", message, branch)
    return _Problem(where, f"{where}: got {error['input']!r}; ", message, branch)


def _walk(loc: tuple, data: Any) -> tuple[list, type[BaseModel] | None, bool]:
    """Readable path (union tags dropped), the model class that owns the last key, and whether
    the path went through one branch of a (not discriminated) union."""
    shown: list = []
    branch = False
    annotation: Any = Scenario
    owner: type[BaseModel] | None = None
    for part in loc:
        if typing.get_origin(annotation) in (list, dict):  # an item of a list or a mapping
            shown.append(part)
            annotation = typing.get_args(annotation)[-1]
            continue
        options = _models(annotation)
        if not options and isinstance(part, str) and _is_union(annotation):
            annotation, branch = None, True  # a branch pydantic tried ("literal[...]", "list[...]"), not a key
            continue
        if len(options) > 1 and isinstance(part, str):
            tagged = [m for m in options if _tag(m) == part]
            if tagged:  # a discriminated-union tag in the path: not a key the user wrote
                annotation = tagged[0]
                continue
        model = options[0] if len(options) == 1 else None
        shown.append(part)
        data = data.get(part) if isinstance(data, dict) else None
        if model is None:
            annotation, owner = None, None
            continue
        owner = model
        if isinstance(part, str) and part in model.model_fields:
            annotation = model.model_fields[part].annotation
            if part == "strategy" and model is Scenario:
                annotation = _strategy_class(data) or annotation
        else:
            annotation = None
    return shown, owner, branch


def _strategy_class(value: Any) -> type[BaseModel] | None:
    try:
        if not isinstance(value, dict) or not isinstance(value.get("name"), str):
            return None
        return registry.config_class(value["name"])
    except ValueError:
        return None


def _is_union(annotation: Any) -> bool:
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _is_union(typing.get_args(annotation)[0])
    return origin in (typing.Union, types.UnionType)


def _models(annotation: Any) -> list[type[BaseModel]]:
    """Model classes an annotation can hold (through Optional, Annotated and unions)."""
    if annotation is None:
        return []
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _models(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return [m for arg in typing.get_args(annotation) for m in _models(arg)]
    return []


def _tag(model: type[BaseModel]) -> Any:
    field = model.model_fields.get("kind")
    return field.default if field else None
