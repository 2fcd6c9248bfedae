"""How the numerics tape writes a tree down: pytree nodes as tagged JSON, and the names of the
functions and named tuples it records, resolved only inside fred, its strategies and installed
strategy plug-ins, so reading a tape never imports or runs anything else."""

from __future__ import annotations

import importlib
from typing import Any

from fred.scenario import registry


class Slot:
    """A leaf placeholder, to write a tree structure down."""

    def __init__(self, position: int):
        self.position = position


# Pytree nodes are written as tagged JSON; named tuples only from the modules resolve allows,
# so reading a tape never imports or runs anything else.
def encode(tree: Any) -> Any:
    if isinstance(tree, Slot):
        return {"slot": tree.position}
    if hasattr(type(tree), "_fields"):  # a named tuple, or a class that unpacks like one (GradSum)
        cls = type(tree)
        return {"named": f"{cls.__module__}:{cls.__qualname__}", "items": [encode(x) for x in tree]}
    if isinstance(tree, (list, tuple)):
        return {"list" if isinstance(tree, list) else "tuple": [encode(x) for x in tree]}
    if isinstance(tree, dict):
        return {"dict": [[k, encode(v)] for k, v in tree.items()]}
    if tree is None or isinstance(tree, (bool, int, float, str)):
        return {"lit": tree}
    raise TypeError(f"cannot record a {type(tree).__name__} on the numerics tape")


def decode(node: Any) -> Any:
    (tag, value), *_ = node.items()
    if tag == "slot":
        return Slot(value)
    if tag == "lit":
        return value
    if tag == "list":
        return [decode(x) for x in value]
    if tag == "tuple":
        return tuple(decode(x) for x in value)
    if tag == "dict":
        return {k: decode(v) for k, v in value}
    if tag == "named":
        return resolve(value)(*(decode(x) for x in node["items"]))
    raise ValueError(f"unknown tape node {tag!r}")


def resolve(name: str) -> Any:
    """``"module:attribute"`` of fred, its strategies, or the package of an installed strategy
    plug-in (whose ``fred.strategies`` entry point names that package or a module in it, and
    which the registry imports anyway): nothing else is ever imported."""
    module, _, attribute = name.partition(":")
    top = module.split(".")[0]
    if top not in ("fred", "strategies") and top not in registry.plugin_packages():
        raise ValueError(
            f"the tape names {name!r}, outside fred, strategies and the installed strategy plug-ins: "
            f"install the plug-in whose package is {top!r} (the run's summary.json names its distribution)"
        )
    target: Any = importlib.import_module(module)
    for part in attribute.split("."):
        target = getattr(target, part)
    return target
