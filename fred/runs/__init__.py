"""Run layer: running a scenario and what a run leaves behind.

The runner builds a simulation from a scenario and steps it; the records, run directories,
checkpoints, interrupts and the Python API (``fred.run``, ``fred.load_run``) live here.
"""

from fred._lazy import submodule as _submodule


def __getattr__(name: str) -> object:  # a submodule, imported on first use
    return _submodule(globals(), name)
