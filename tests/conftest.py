"""Shared helpers: tiny scenarios that run in well under a second."""

from __future__ import annotations

import copy
from typing import Any

import jax
import pytest

from fred.loading import merge

# The suite checks fred's CPU bits (fred.run computes on CPU anyway); on a machine with a GPU,
# helpers that call jitted code directly would otherwise run there. gpu-marked tests ask for it.
jax.config.update("jax_default_device", jax.devices("cpu")[0])

TINY: dict[str, Any] = {
    "name": "tiny",
    "seed": 7,
    "model": {"kind": "mlp", "hidden": [16]},
    "data": {"source": {"kind": "digits"}, "batch_size": 8},
    "cluster": {"workers": 4, "compute": {"step_time_s": 0.01}},
    "strategy": {"name": "asgd", "lr": 0.1},
    "stop": {"max_updates": 12},
    "eval": {"every_updates": 4},
}


def tiny(**overrides: Any) -> dict[str, Any]:
    """The tiny scenario with deep-merged overrides (``tiny(cluster={"workers": 2})``)."""
    return merge(copy.deepcopy(TINY), overrides)


@pytest.fixture
def tiny_scenario():
    return tiny
