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
strategy packages (:data:`PLUGIN_PACKAGES`) are imported by name at the first lookup: a
plug-in discovery, as pytest finds its plugins, which keeps the layers pointing one way.
"""

from __future__ import annotations

import difflib
import importlib
from typing import Any, Callable, NamedTuple

from pydantic import BaseModel

# start(sim: fred.simulation.engine.Simulation, config) -> a function giving the current parameters
Start = Callable[[Any, Any], Callable[[], Any]]
PLUGIN_PACKAGES = ("strategies",)  # imported at the first lookup; each registers its strategies


class Strategy(NamedTuple):
    name: str
    config: type[BaseModel]  # a fred.scenario.schema.StrategyConfig subclass
    start: Start
    summary: str
    timing_only: bool = False


_REGISTRY: dict[str, Strategy] = {}


def register(config: type[BaseModel], timing_only: bool = False) -> Callable[[Start], Start]:
    """Register ``start`` under the default of ``config.name``; see the module doc for ``timing_only``."""
    name = config.model_fields["name"].default
    if not isinstance(name, str):
        raise TypeError(f"{config.__name__}.name needs a string default (the strategy's registry name)")

    def decorate(start: Start) -> Start:
        if name in _REGISTRY:
            first = _REGISTRY[name].start.__module__
            raise ValueError(f"strategy {name!r} is registered twice, by {first} and by {start.__module__}; rename one")
        doc = (start.__module__ and __import__(start.__module__, fromlist=["_"]).__doc__) or ""
        _REGISTRY[name] = Strategy(name, config, start, _summary(doc), timing_only)
        return start

    return decorate


def _load_plugins() -> None:
    for package in PLUGIN_PACKAGES:
        importlib.import_module(package)  # a no-op after the first time


def names() -> list[str]:
    _load_plugins()
    return sorted(_REGISTRY)


def get(name: str) -> Strategy:
    _load_plugins()
    if name not in _REGISTRY:
        close = difflib.get_close_matches(str(name), names(), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"unknown strategy {name!r}{hint} Registered: {', '.join(names())}")
    return _REGISTRY[name]


def config_class(name: str) -> type[BaseModel]:
    return get(name).config


def all_strategies() -> list[Strategy]:
    return [_REGISTRY[n] for n in names()]


def _summary(doc: str) -> str:
    """A module docstring's first paragraph on one line (a first sentence may wrap)."""
    return " ".join(line.strip() for line in doc.strip().split("\n\n")[0].splitlines())
