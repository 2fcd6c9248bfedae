"""fred: a deterministic single-node simulator of distributed deep-learning training.

Quick use::

    import fred
    result = fred.run("scenarios/quickstart.yaml", out="runs/quickstart-50", stop={"max_updates": 50})
    result.metrics            # eval loss/accuracy against simulated time
    again = fred.load_run(result.path)  # result.path is None when run without out=
"""

import typing as _typing
from importlib import import_module as _import_module

from fred._lazy import submodule as _submodule
from fred._version import __version__, strategy_api  # noqa: F401 - the strategy contract's version

# Each public name and the module it comes from, imported at its first use (PEP 562): the
# `fred` command imports this package before it can take Ctrl-C, and jax and pandas take a
# second to load, during which a Ctrl-C would be a raw traceback.
_SOURCES = {
    "RunResult": "fred.runs.runner",
    "Scenario": "fred.scenario.schema",
    "ScenarioError": "fred.scenario.loading",
    "load_run": "fred.runs.api",
    "load_scenario": "fred.scenario.loading",
    "run": "fred.runs.api",
    "validate": "fred.scenario.loading",
}

__all__ = [
    "RunResult",
    "Scenario",
    "ScenarioError",
    "load_run",
    "load_scenario",
    "run",
    "validate",
    "__version__",
]

if _typing.TYPE_CHECKING:  # what type checkers and editors see
    from fred.runs.api import load_run, run
    from fred.runs.runner import RunResult
    from fred.scenario.loading import ScenarioError, load_scenario, validate
    from fred.scenario.schema import Scenario


def __getattr__(name: str) -> object:
    if name not in _SOURCES:
        return _submodule(globals(), name)  # fred.runs and the other layers
    value = globals()[name] = getattr(_import_module(_SOURCES[name]), name)  # later uses skip this function
    return value


def __dir__() -> list[str]:
    return sorted(
        name for name in {*globals(), *_SOURCES} if not name.startswith("_") or name.startswith("__")
    )
