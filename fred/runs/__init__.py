"""Run layer: running a scenario and what a run leaves behind.

``build`` makes a run's data, model, numerics and simulated cluster from a scenario,
``controller`` steps it until a stop, ``summary`` says how it went and ``runner`` ties them
together; the records, run directories, checkpoints, interrupts and the Python API
(``fred.run``, ``fred.load_run``) live here too.
"""

from fred._lazy import submodule as _submodule


def __getattr__(name: str) -> object:  # a submodule, imported on first use
    return _submodule(globals(), name)
