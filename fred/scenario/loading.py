"""Reading scenarios: safe YAML, ``--set`` overrides, and errors that say how to fix them."""

from __future__ import annotations

import contextlib
import copy
import difflib
import types
import typing
from pathlib import Path
from typing import Any, Iterator, NamedTuple

import yaml
from pydantic import BaseModel, ValidationError

from fred.scenario import registry
from fred.scenario.profiles import read_profile
from fred.scenario.schema import KINDS, Scenario, StrategyConfig, absolute_path
from fred.scenario.yaml_reading import (
    NumbersLoader,
    Refused,
    UniqueKeysLoader,
    read_text,
    shown,
    yaml_problem,
)


class ScenarioError(Exception):
    """A scenario that cannot run, with one line per problem."""

    def __init__(self, problems: list[str], source: str = "scenario"):
        self.problems, self.source = problems, source
        count = f"{len(problems)} problem{'s' if len(problems) != 1 else ''}"
        lines = [f"  - {_cut(p)}" for p in problems[:MAX_PROBLEMS_SHOWN]]
        if len(problems) > MAX_PROBLEMS_SHOWN:
            lines.append(
                f"  ... and {len(problems) - MAX_PROBLEMS_SHOWN} more problems; fix these and run again to "
                "see them"
            )
        super().__init__(f"{_cut(source)}: {count}\n" + "\n".join(lines))


MAX_PROBLEMS_SHOWN = 20  # lines of problems a message shows: what a person reads, not a fuzzer's 10,000
MAX_LINE = (
    1000  # characters of one problem's line: values are cut to 200 before, and a fix may name two long paths
)


def _cut(line: str) -> str:
    """``line``, at most :data:`MAX_LINE` characters, saying how long it was."""
    return line if len(line) <= MAX_LINE else f"{line[: MAX_LINE - 1]}… ({len(line):,} characters)"


def read_yaml(path: str | Path, own: bool = False) -> dict[str, Any]:
    """Parse a scenario file with the safe loader (no tags, no code, no includes), bounded:
    a regular file, not too large, not too deep, few aliases (:mod:`fred.scenario.yaml_reading`).

    ``own``: a file fred wrote (a run's or a checkpoint's resolved ``scenario.yaml``), whose size
    is the resolved scenario's, included files and all: not held to the size limit.
    """
    try:
        text = read_text(path, bounded=not own)
    except ValueError as err:
        raise ScenarioError([str(err)], str(path)) from None
    try:
        data = yaml.load(text, Loader=UniqueKeysLoader)
    except yaml.YAMLError as err:
        raise ScenarioError([yaml_problem(err)], str(path)) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ScenarioError(
            [f"the top level must be a mapping of sections, got {type(data).__name__}"], str(path)
        )
    return data


def yaml_value(text: str) -> Any:
    """A value written on the command line (``--set``, ``--grid``), read as scenario files are."""
    return yaml.load(text, Loader=NumbersLoader)


def apply_overrides(data: dict[str, Any], sets: list[str]) -> dict[str, Any]:
    """Apply ``path.to.key=value`` overrides; values are parsed as YAML (``3``, ``0.1``, ``[64, 32]``)."""
    data = copy.deepcopy(data)
    for item in sets:
        if "=" not in item:
            raise ScenarioError([f"--set {item!r}: write it as path.to.key=value"], "--set")
        path, _, raw = item.partition("=")
        try:
            value = yaml_value(raw)
        except Refused as err:  # too deep, an alias bomb, an integer too long: not a string either
            raise ScenarioError([f"--set {shown(item, 100)}: {yaml_problem(err)}"], "--set") from None
        except yaml.YAMLError:
            value = raw
        set_path(data, path.strip(), value)
    return data


def set_path(data: dict[str, Any], path: str, value: Any) -> None:
    """Set ``a.b.c`` in nested mappings, creating missing mappings on the way; a number
    indexes a list (``cluster.stragglers.0.slow_factor``)."""
    keys = path.split(".")
    if not all(keys):
        raise ScenarioError(
            [f"--set {path}={shown(value)}: a part of the path is empty; write it as path.to.key=value"],
            "--set",
        )
    node: Any = data
    for depth, key in enumerate(keys):
        last, parent = depth == len(keys) - 1, ".".join(keys[:depth])
        if isinstance(node, list):
            index = _list_index(node, key)
            if index is None:
                raise ScenarioError(
                    [f"--set {path}: {parent} is a list of {len(node)}; index it 0..{len(node) - 1}"], "--set"
                )
            key = index  # type: ignore[assignment]
        elif not isinstance(node, dict):
            raise ScenarioError(
                [f"--set {path}: {parent} is {shown(node)}, not a section; set it whole"], "--set"
            )
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


def load_scenario(
    path: str | Path, sets: list[str] | None = None, seed: int | None = None, typed: list[str] | None = None
) -> Scenario:
    """Read, override and validate a scenario file; a problem with a field of ``typed`` (by
    default ``sets``: the ``--set`` options the user typed) is said to be that option's."""
    sets = list(sets or [])
    data = apply_overrides(read_yaml(path), sets)
    if seed is not None:
        data["seed"] = seed
    with blaming_sets(sets if typed is None else typed):
        return validate(include_profiles(data, Path(path).parent, str(path)), str(path))


@contextlib.contextmanager
def blaming_sets(sets: list[str]) -> Iterator[None]:
    """Problems with a field a ``--set`` gave are said to be that ``--set``'s, not the file's
    (``--set stategy.lr=0.1: stategy: unknown key``); the message's head says which were."""
    try:
        yield
    except ScenarioError as err:
        lines = [_blamed(problem, sets) for problem in err.problems]
        ours = sum(
            line.startswith("--set ") and not problem.startswith("--set ")
            for line, problem in zip(lines, err.problems)
        )
        source = err.source if not ours else "--set" if ours == len(lines) else f"{err.source} and --set"
        raise ScenarioError(lines, source) from None


def _blamed(problem: str, sets: list[str]) -> str:
    """``problem`` headed by the ``--set`` that gave its field, if one did (the last one that did)."""
    field, _, rest = problem.partition(": ")
    said_as = problem
    if (
        field == "scenario"
    ):  # a check across sections ("scenario: stop.max_updates is 5: ..."): the field it names
        field, said_as = rest.split(" ", 1)[0].rstrip(":"), rest
    if " " in field or not field:
        return problem
    for item in reversed(sets):
        path = item.partition("=")[0].strip()
        if path == field or path.startswith(field + ".") or field.startswith(path + "."):
            item = item if len(item) <= 100 else f"{item[:99]}…"
            return f"--set {item}: {said_as.removeprefix(field + ': ') if path == field else said_as}"
    return problem


MAX_INCLUDES = 16


def include_profiles(data: dict[str, Any], base_dir: Path, source: str = "scenario") -> dict[str, Any]:
    """Merge the files of ``include:`` under the scenario, replace ``cluster.compute.profile:
    FILE`` by the measured ``step_time_s`` in FILE, and make every other path absolute
    (:func:`absolute_paths`).

    A relative path is taken from ``base_dir``: the scenario file's folder (the working
    directory for a scenario built in Python).
    """
    base_dir = (
        base_dir.absolute()
    )  # a missing file is named by the path looked at, whatever the working directory
    data = _included(data, base_dir, source)
    missing = missing_files(data, base_dir)
    if missing:  # said now, in the scenario's words, not after JAX has loaded and the run has begun
        raise ScenarioError(missing, source)
    data = absolute_paths(data, base_dir)
    compute = data.get("cluster", {}).get("compute") if isinstance(data.get("cluster"), dict) else None
    if not isinstance(compute, dict) or "profile" not in compute:
        return data
    profile = compute["profile"]
    if not isinstance(profile, str):
        raise ScenarioError(
            [f"cluster.compute.profile: got {shown(profile)}; give the path of a profile file"], source
        )
    others = sorted(
        k for k, v in compute.items() if k not in ("profile", "host_overhead_s") and v is not None
    )
    if others:  # the profile's time would silently replace step_time_s, or clash with FLOPs
        raise ScenarioError(
            [f"cluster.compute: a profile gives the step time; drop {', '.join(others)}, or the profile"],
            source,
        )
    try:
        step_time_s = read_profile(base_dir / profile)
    except ValueError as err:
        raise ScenarioError([str(err)], source) from None
    out = copy.deepcopy(data)
    out["cluster"]["compute"] = {k: v for k, v in compute.items() if k != "profile"} | {
        "step_time_s": step_time_s
    }
    return out


PATHS = (
    "data.source.path",
    "data.source.eval_path",
)  # the files a scenario names, besides include and profile


def absolute_paths(data: dict[str, Any], base_dir: Path) -> dict[str, Any]:
    """``data`` with its data files' paths and ``model.code_dir`` (where the user's code of a
    kind with that field is looked for; ``base_dir`` itself by default) absolute, taken from
    ``base_dir``: the resolved scenario, and a run directory's copy of it, name the same files
    from anywhere."""
    out = copy.deepcopy(data)
    model = out.get("model")
    if isinstance(model, dict) and _has_code_dir(model.get("kind")) and model.get("code_dir") is None:
        model["code_dir"] = str(base_dir)
    for path in (*PATHS, "model.code_dir"):
        value = get_path(out, path)
        if isinstance(value, str) and value.strip():  # anything else is left for validation to refuse, named
            set_path(out, path, absolute_path(value, base_dir))
    return out


def _has_code_dir(kind: Any) -> bool:
    """Whether the model kind ``kind`` has a ``code_dir`` field (the folder its code is imported from)."""
    return any(
        section.model_fields["kind"].default == kind and "code_dir" in section.model_fields
        for section in KINDS
    )


DATA_FILES = {  # what a data source's path names, for a missing one
    "mnist": "a folder of MNIST IDX files or one .npz file",
    "arrays": "an .npz file, a folder of .npy files, a .parquet file, or a folder written by datasets' "
    "save_to_disk",
    "cifar10": "the cifar-10-batches-py folder CIFAR-10's python version unpacks to, or the folder holding "
    "it",
    "cifar100": "the cifar-100-python folder CIFAR-100's python version unpacks to, or the folder holding it",
    "text": "a text file",
}


def missing_files(data: dict[str, Any], base_dir: Path) -> list[str]:
    """A problem for each data file ``data`` names that is not there, with the absolute path
    looked at and, for a relative path, the folder it was taken from."""
    source = get_path(data, "data.source")
    kind = source.get("kind") if isinstance(source, dict) else None
    what = DATA_FILES.get(kind) if isinstance(kind, str) else None  # any other kind: validation names it
    problems = []
    for path in PATHS if what else ():
        given = get_path(data, path)
        if not isinstance(given, str) or not given.strip():
            continue  # not a path: validation names it
        looked = absolute_path(given, base_dir)
        if not Path(looked).exists():
            taken = "" if Path(given).expanduser().is_absolute() else f" ({given!r} taken from {base_dir})"
            problems.append(f"{path}: {looked} does not exist{taken}; give {what}")
    return problems


def _included(data: dict[str, Any], base_dir: Path, source: str) -> dict[str, Any]:
    """``data`` over the sections of the files it names in ``include`` (one or a list; later
    files over earlier ones, the scenario's own values over all): a ``fred fit`` profile."""
    if not isinstance(data, dict) or "include" not in data:
        return data
    files = [data["include"]] if isinstance(data["include"], str) else data["include"]
    if (
        not isinstance(files, list)
        or not files
        or len(files) > MAX_INCLUDES
        or not all(isinstance(f, str) and f for f in files)
    ):
        raise ScenarioError(
            [
                f"include: got {shown(data['include'])}; give a file, or a list of up to {MAX_INCLUDES} "
                "files, of scenario sections (a profile fred fit wrote)"
            ],
            source,
        )
    merged: dict[str, Any] = {}
    for name in files:
        part = read_yaml(base_dir / name)
        if "include" in part:
            raise ScenarioError(
                [f"include: {name} includes files itself; name them all in the scenario's include"], source
            )
        merged = merge(merged, part)
    return merge(merged, {k: v for k, v in data.items() if k != "include"})


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
        elsewhere = _elsewhere(str(loc[-1]), ".".join(str(p) for p in loc[:-1]))
        if elsewhere:  # the key exactly, in another section: likelier than a misspelling of a key here
            hint = f"; {elsewhere}" + (f" (or did you mean {close[0]!r}?)" if close else ".")
        else:
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
        return _Problem(
            field, f"{field}: got {ctx.get('tag')!r}{hint} allowed: {', '.join(allowed)}", "", branch
        )
    message = error["msg"].removeprefix("Value error, ")
    if kind in ("value_error", "assertion_error") or "input" not in error or isinstance(error["input"], dict):
        return _Problem(where, f"{where}: ", message, branch)
    return _Problem(where, f"{where}: got {shown(error['input'])}; ", message, branch)


def _elsewhere(key: str, section: str) -> str:
    """Where else in the schema ``key`` is a key (``momentum`` under ``strategy.optimizer``), said
    as a hint, or ``""``: a key put in the wrong section is not a misspelling."""
    places = [(path, note) for path, note in _key_index().get(key, []) if path != section or note]
    if not places:
        return ""
    shown_places = [f"{path} ({note})" if note else path for path, note in places[:3]]
    more = f" and {len(places) - 3} more" if len(places) > 3 else ""
    return f"{key} is a key of {', '.join(shown_places)}{more}"


def _key_index() -> dict[str, list[tuple[str, str]]]:
    """Every key of the schema: the sections it belongs to, each with a note where only some
    kinds of the section have it (``kind cnn``, ``name local_sgd``). Built on each use: a
    plug-in registered later is in it."""
    index: dict[str, list[tuple[str, str]]] = {}
    _index_section([Scenario], "", index)  # strategy: StrategyConfig's own keys, optimizer and lr_schedule
    strategies = registry.all_strategies()
    owners: dict[str, list[str]] = {}
    for strategy in strategies:
        for key in strategy.config.model_fields:
            if key not in StrategyConfig.model_fields:
                owners.setdefault(key, []).append(strategy.name)
    for key, names in owners.items():
        more = " and others" if len(names) > 3 else ""
        index.setdefault(key, []).append(
            ("strategy", "" if len(names) == len(strategies) else f"name {', '.join(names[:3])}{more}")
        )
    return {key: list(dict.fromkeys(places)) for key, places in index.items()}


def _index_section(
    options: list[type[BaseModel]], section: str, index: dict[str, list[tuple[str, str]]]
) -> None:
    """Index the keys of a section that is one of ``options`` (the kinds of a union, or one model)."""
    kinds: dict[str, list[str]] = {}
    for option in options:
        for key in option.model_fields:
            kinds.setdefault(key, []).append(str(_tag(option) or ""))
    for key, having in kinds.items():
        note = f"kind {', '.join(having)}" if len(having) < len(options) and all(having) else ""
        index.setdefault(key, []).append((section or "the top level", note))
    for option in options:
        for key, field in option.model_fields.items():
            annotation, items = field.annotation, ""
            while typing.get_origin(annotation) in (
                list,
                dict,
            ):  # a list or mapping of sections: each item is one
                annotation, items = typing.get_args(annotation)[-1], items + ".<i>"
            inner = _models(annotation)
            if inner:
                _index_section(inner, f"{section}.{key}{items}" if section else f"{key}{items}", index)


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
            annotation, branch = (
                None,
                True,
            )  # a branch pydantic tried ("literal[...]", "list[...]"), not a key
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
