"""The strategy registry: name -> (hyper-parameter model, process builder).

A strategy module defines a :class:`~fred.scenario.schema.StrategyConfig` subclass whose
``name`` field is a one-value ``Literal`` and decorates its ``start`` function
with :func:`register`. ``start(sim, config)`` launches the strategy's processes
and returns a function giving the current global parameters (for evaluation).

``register(config, timing_only=True)`` declares that the strategy runs with
``workload.timing_only``: its processes accept ``None`` from ``sim.compute`` (no
gradient, so no numbers) and still send, reduce and apply on the same schedule.

The registry sits in the scenario layer, below the engine the strategies are built on, so it
knows a strategy's ``start`` only as a callable and a config only as a pydantic model. The
strategies are found at the first lookup, by name, never by an import of this module's own
(which keeps the layers pointing one way): the in-tree packages of :data:`PLUGIN_PACKAGES`,
then every installed entry point of the group :data:`ENTRY_POINT_GROUP`, as pytest finds its
plugins. An entry point is named as its strategy and names the module that registers it
(``easgd = "fred_easgd"``). One that fails to import (an exception, or ``sys.exit`` while it
imports), whose name another strategy has too, or that targets a strategy contract this fred does
not implement (its config's ``strategy_api``, against :data:`fred._version.strategy_api`) leaves
that name out with one line saying why (:func:`problems`); every other strategy works.
"""

from __future__ import annotations

import difflib
import importlib
from importlib.metadata import EntryPoint, entry_points
from typing import Any, Callable, NamedTuple

from pydantic import BaseModel

from fred._version import __version__, strategy_api

# start(sim: fred.simulation.engine.Simulation, config) -> a function giving the current parameters
Start = Callable[[Any, Any], Callable[[], Any]]
PLUGIN_PACKAGES = ("strategies",)  # imported at the first lookup; each registers its strategies
ENTRY_POINT_GROUP = "fred.strategies"  # installed packages' strategies, loaded after PLUGIN_PACKAGES


class Strategy(NamedTuple):
    name: str
    config: type[BaseModel]  # a fred.scenario.schema.StrategyConfig subclass
    start: Start
    summary: str
    timing_only: bool = False
    source: str = ""  # the module that registered it, or the distribution and entry point of a plug-in
    distribution: str | None = None  # a plug-in's distribution (its module, if it has none); None: fred's own
    version: str | None = None  # that distribution's version


def provider(strategy: Strategy, fred_version: str) -> tuple[str, str | None]:
    """Who provided ``strategy``, as a run's summary records it: a plug-in's distribution and
    version, or ``("fred", fred_version)`` for fred's own strategies."""
    if strategy.distribution is None:
        return "fred", fred_version
    return strategy.distribution, strategy.version


_REGISTRY: dict[str, Strategy] = {}
_PROBLEMS: dict[str, str] = {}  # a name left out -> why (a plug-in that failed, a name defined twice)
_DEFINERS: dict[str, list[str]] = {}  # a name defined more than once -> where, in loading order
_plugin_state: dict[str, Any] = {
    "loaded": False,
    "staged": None,
}  # staged: a plug-in's strategies as it loads
_PLUGIN_PACKAGES: set[str] = set()  # the top-level modules of the plug-ins that loaded (plugin_packages)


def register(config: type[BaseModel], timing_only: bool = False) -> Callable[[Start], Start]:
    """Register ``start`` under the default of ``config.name``; see the module doc for ``timing_only``."""
    name = config.model_fields["name"].default
    if not isinstance(name, str):
        raise TypeError(f"{config.__name__}.name needs a string default (the strategy's registry name)")

    def decorate(start: Start) -> Start:
        doc = (start.__module__ and __import__(start.__module__, fromlist=["_"]).__doc__) or ""
        strategy = Strategy(name, config, start, _summary(doc), timing_only, start.__module__)
        if _plugin_state["staged"] is not None:  # a plug-in loading: _load_entry_point checks its names
            _plugin_state["staged"].append(strategy)
            return start
        if name in _REGISTRY:
            first = _REGISTRY[name].source
            raise ValueError(
                f"strategy {name!r} is registered twice, by {first} and by {start.__module__}; rename one"
            )
        _REGISTRY[name] = strategy
        return start

    return decorate


def _load_plugins() -> None:
    for package in PLUGIN_PACKAGES:
        importlib.import_module(
            package
        )  # a no-op after the first time; a broken in-tree module stops everything
    if not _plugin_state["loaded"]:
        _plugin_state["loaded"] = (
            True  # first: a plug-in that looks a strategy up while loading must not recurse
        )
        found = entry_points(group=ENTRY_POINT_GROUP)
        for entry in sorted(
            found, key=lambda e: (e.name, e.value, e.dist.name if e.dist else "")
        ):  # not the path's order
            _load_entry_point(entry)


def _load_entry_point(entry: EntryPoint) -> None:
    """Import one plug-in and register what it registered, unless its name is taken or it broke."""
    dist = entry.dist
    package = dist.name if dist is not None else entry.module
    source = f"{package} {dist.version if dist is not None else ''}".rstrip()
    source += f" (entry point {ENTRY_POINT_GROUP}: {entry.name} = {entry.value})"
    _plugin_state["staged"] = staged = []
    try:
        entry.load()
    except KeyboardInterrupt:  # Ctrl-C (and a termination signal) while a plug-in imports stops the command
        raise
    except BaseException as err:  # noqa: BLE001 - any error of a plug-in is its own, reported in one line
        # SystemExit too: a plug-in calling sys.exit(0) as it imports would end every command with status 0.
        _PROBLEMS[entry.name] = (
            f"strategy plug-in {source} failed to import ({_raised(err)}); fix it or uninstall {package}"
        )
        return
    finally:
        _plugin_state["staged"] = None
    _PLUGIN_PACKAGES.add(entry.module.split(".")[0])
    earlier = _REGISTRY.get(entry.name)
    if not staged and earlier is not None and (earlier.source + ".").startswith(entry.module + "."):
        staged = [
            _REGISTRY.pop(entry.name)
        ]  # its module was imported before the registry looked for plug-ins
    if entry.name not in [s.name for s in staged]:
        made = ", ".join(repr(s.name) for s in staged) or "none"
        _PROBLEMS[entry.name] = (
            f"strategy plug-in {source} registered no strategy {entry.name!r} (it registered "
            f"{made}); name the entry point as its strategy config's name"
        )
    for strategy in staged:
        refusal = api_refusal(strategy.config, source, package)
        if refusal:
            _PROBLEMS[strategy.name] = refusal
            continue
        _add_plugin(
            strategy._replace(
                source=source, distribution=package, version=dist.version if dist is not None else None
            )
        )


def _raised(err: BaseException) -> str:
    """What a plug-in's import raised, as its one line says it."""
    if isinstance(err, SystemExit):
        return f"SystemExit: it called sys.exit({err.code!r}) as it imported"
    return f"{type(err).__name__}: {str(err).strip() or 'no message'}"


def api_version(text: object) -> tuple[int, int] | None:
    """``"MAJOR.MINOR"`` as a pair of integers; None for anything else."""
    parts = text.split(".") if isinstance(text, str) else []
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        return None
    return int(parts[0]), int(parts[1])


def api_refusal(config: type[BaseModel], source: str, package: str) -> str | None:
    """Why a plug-in's strategy cannot be used by this fred, judged by the contract version its
    config states (``strategy_api``; none stated: 1.0, the contract before versions); None if it can."""
    declared = getattr(config, "strategy_api", None)
    if declared is None:
        return None
    wanted, ours = api_version(declared), api_version(strategy_api)
    assert ours is not None
    if wanted is None:
        return (
            f"strategy plug-in {source} states strategy_api {declared!r}; give the contract version it "
            f'is written for as "MAJOR.MINOR" (this fred {__version__} implements {strategy_api}), '
            f"or uninstall {package}"
        )
    if wanted[0] == ours[0] and wanted[1] <= ours[1]:
        return None
    if wanted > ours:
        return (
            f"strategy plug-in {source} is written for strategy API {declared}, newer than this fred's "
            f"{strategy_api} (fred {__version__}): upgrade fred, or install a version of {package} "
            f"written for strategy API {ours[0]}.{ours[1]} or older"
        )
    return (
        f"strategy plug-in {source} is written for strategy API {declared}, which this fred "
        f"{__version__} no longer implements (it implements {strategy_api}): upgrade {package}, or use "
        f"a fred of strategy API {wanted[0]}"
    )


def _add_plugin(strategy: Strategy) -> None:
    """Register a plug-in's strategy; a name defined twice is refused for all: which was meant is unknown."""
    name = strategy.name
    if name not in _REGISTRY and name not in _DEFINERS:
        _REGISTRY[name] = strategy
        return
    sources = _DEFINERS.setdefault(name, [_REGISTRY.pop(name).source] if name in _REGISTRY else [])
    sources.append(strategy.source)
    _PROBLEMS[name] = (
        f"strategy {name!r} is defined {len(sources)} times, by {' and by '.join(sources)}; "
        "uninstall all but one, or rename a strategy (its config's name and its entry point)"
    )


def plugin_packages() -> frozenset[str]:
    """The top-level packages of the installed plug-ins that loaded (each entry point's module's):
    where a plug-in's own recorded numerics live, which replay may import by name."""
    _load_plugins()
    return frozenset(_PLUGIN_PACKAGES)


def problems() -> list[str]:
    """One line per strategy left out: a plug-in that failed to import, a name defined twice."""
    _load_plugins()
    return [_PROBLEMS[name] for name in sorted(_PROBLEMS)]


def names() -> list[str]:
    _load_plugins()
    return sorted(_REGISTRY)


def get(name: str) -> Strategy:
    _load_plugins()
    if name not in _REGISTRY:
        if name in _PROBLEMS:
            raise ValueError(_PROBLEMS[name])
        close = difflib.get_close_matches(str(name), names(), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ValueError(
            f"unknown strategy {name!r}{hint} Registered: {', '.join(names())} (a plug-in's strategy "
            f"is found once its package, with a {ENTRY_POINT_GROUP} entry point, is installed)"
        )
    return _REGISTRY[name]


def config_class(name: str) -> type[BaseModel]:
    return get(name).config


def all_strategies() -> list[Strategy]:
    return [_REGISTRY[n] for n in names()]


def _summary(doc: str) -> str:
    """A module docstring's first paragraph on one line (a first sentence may wrap)."""
    return " ".join(line.strip() for line in doc.strip().split("\n\n")[0].splitlines())
