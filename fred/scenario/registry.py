"""The strategy registry: name -> (hyper-parameter model, process builder).

A strategy module defines a :class:`~fred.scenario.schema.StrategyConfig` subclass whose
``name`` field is a one-value ``Literal`` and decorates its ``start`` function
with :func:`register`. ``start(sim, config)`` launches the strategy's processes
and returns a function giving the current global parameters (for evaluation).

``register(config, timing_only=True)`` declares that the strategy runs with
``workload.timing_only``: its processes accept ``None`` from ``sim.compute`` (no
gradient, so no numbers) and still send, reduce and apply on the same schedule.
"""

from __future__ import annotations

import difflib
from typing import Callable, NamedTuple

from fred.numerics.models import Params
from fred.scenario.schema import StrategyConfig
from fred.simulation.engine import Simulation

Start = Callable[[Simulation, StrategyConfig], Callable[[], Params]]


class Strategy(NamedTuple):
    name: str
    config: type[StrategyConfig]
    start: Start
    summary: str
    timing_only: bool = False


_REGISTRY: dict[str, Strategy] = {}


def register(config: type[StrategyConfig], timing_only: bool = False) -> Callable[[Start], Start]:
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


def names() -> list[str]:
    return sorted(_REGISTRY)


def get(name: str) -> Strategy:
    if name not in _REGISTRY:
        close = difflib.get_close_matches(str(name), names(), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"unknown strategy {name!r}{hint} Registered: {', '.join(names())}")
    return _REGISTRY[name]


def config_class(name: str) -> type[StrategyConfig]:
    return get(name).config


def all_strategies() -> list[Strategy]:
    return [_REGISTRY[n] for n in names()]


def _summary(doc: str) -> str:
    """A module docstring's first paragraph on one line (a first sentence may wrap)."""
    return " ".join(line.strip() for line in doc.strip().split("\n\n")[0].splitlines())
