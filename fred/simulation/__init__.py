"""Simulation layer: the SimPy engine and the cluster it simulates.

The engine and its primitives (compute, send, all-reduce, all-gather), the gradient service,
the collectives (their rounds, the objects that time them, NCCL's choice), transfers on the
network's links (booked or as fairly shared flows), compute times, parameter servers, the
logical-clock dispatcher and injected faults. Strategies compose these primitives; they live
in the top-level ``strategies`` package.
"""

from fred._lazy import submodule as _submodule


def __getattr__(name: str) -> object:  # a submodule, imported on first use
    return _submodule(globals(), name)
