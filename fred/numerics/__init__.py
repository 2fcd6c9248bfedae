"""Numerics layer: the real numbers of a run, as pure JAX functions.

Models' building blocks (the CIFAR ResNet, the GPT-style transformer), data (CIFAR, text,
synthetic), gradients and their exact reductions, the loss, evaluation, optimizers, the
compression codecs, the per-entity random streams, and the tape that records every jitted call
so it can be replayed.
"""

from fred._lazy import submodule as _submodule


def __getattr__(name: str) -> object:  # a submodule, imported on first use
    return _submodule(globals(), name)
