"""The workload library: parameter bytes and FLOPs of the models people simulate, layer by layer.

A scenario names one with ``workload: {profile: resnet101}``: messages then carry that model's
parameter bytes, and with ``cluster.compute.device_flops`` a step costs its training FLOPs per
example times the batch, while the numbers stay those of the scenario's small model.

The data is ``workloads.json`` in this package, derived from each architecture by
``docs/make_workloads.py`` (not typed in); ``docs/workloads.md`` gives the models, their totals,
sources and how FLOPs are counted. A layer is one module with its parameters (a convolution,
a batch norm, a linear layer, an embedding, a layer norm), in forward order, named as the
reference implementation names it; the attention products, without parameters, are a layer
of their own.
"""

from __future__ import annotations

import difflib
import functools
import json
from dataclasses import dataclass, replace
from importlib.resources import files

FLOAT32_BYTES = 4
TRAINING_PASSES = 3  # forward + backward, the backward about twice the forward (two products per layer)


@dataclass(frozen=True)
class Layer:
    """One module: its parameters' bytes in float32 and its forward FLOPs for one example."""

    name: str
    param_bytes: int
    forward_flops: int


@dataclass(frozen=True)
class Workload:
    """A model's layers and totals; ``timed_*`` are what a scenario naming it is timed with."""

    name: str
    title: str
    example: str  # what one example is: "one 224x224 RGB image", "one sequence of 128 tokens"
    sources: tuple[str, ...]
    layers: tuple[Layer, ...]
    published_params: float
    timed_param_bytes: int  # param_bytes, except where the library keeps rounded totals (resnet50)
    timed_flops_per_example: float  # flops_per_example, with the same exception

    @property
    def param_bytes(self) -> int:
        return sum(layer.param_bytes for layer in self.layers)

    @property
    def param_count(self) -> int:
        return self.param_bytes // FLOAT32_BYTES

    @property
    def forward_flops_per_example(self) -> int:
        return sum(layer.forward_flops for layer in self.layers)

    @property
    def flops_per_example(self) -> float:
        """FLOPs of one training step per example: forward and backward."""
        return float(TRAINING_PASSES * self.forward_flops_per_example)


@functools.cache
def _library() -> dict[str, dict]:
    return json.loads(files(__package__).joinpath("workloads.json").read_text(encoding="utf-8"))["workloads"]


def names() -> list[str]:
    """The profiles a scenario may name, sorted."""
    return sorted(_library())


@functools.cache
def load(name: str) -> Workload:
    """The profile ``name``; ``ValueError`` naming the known ones if there is none."""
    library = _library()
    if name not in library:
        close = difflib.get_close_matches(str(name), names(), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"no workload profile {name!r}{hint} Known: {', '.join(names())}")
    entry = library[name]
    layers = tuple(
        Layer(layer_name, int(nbytes), int(flops)) for layer_name, nbytes, flops in entry["layers"]
    )
    derived = Workload(
        name,
        entry["title"],
        entry["example"],
        tuple(entry["sources"]),
        layers,
        float(entry["published_params"]),
        0,
        0.0,
    )
    totals = entry.get("scenario_totals", {})
    return replace(
        derived,
        timed_param_bytes=int(totals.get("param_bytes", derived.param_bytes)),
        timed_flops_per_example=float(totals.get("flops_per_example", derived.flops_per_example)),
    )
