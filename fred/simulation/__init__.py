"""Simulation layer: the SimPy engine and the cluster it simulates.

The engine and its primitives (compute, send, all-reduce), the network, compute times,
parameter servers, the logical-clock dispatcher and injected faults. Strategies compose
these primitives; they live in the top-level ``strategies`` package.
"""

from fred._lazy import submodule as _submodule


def __getattr__(name: str) -> object:  # a submodule, imported on first use
    return _submodule(globals(), name)
