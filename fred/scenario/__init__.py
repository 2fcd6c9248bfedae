"""Scenario layer: the validated, frozen input of a run.

``schema`` holds the pydantic models, ``loading`` reads YAML files (includes, overrides,
profiles) into them, and ``registry`` is the catalogue of strategies a scenario may name.
Nothing here imports the simulation, the numerics or the run records.
"""

from fred._lazy import submodule as _submodule


def __getattr__(name: str) -> object:  # a submodule, imported on first use
    return _submodule(globals(), name)
