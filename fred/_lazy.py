"""Submodules as attributes on first use (PEP 562), for the package and each of its layers.

``import fred`` loads no layer, yet ``fred.runs.api`` or ``fred.tools.compare`` work at once:
each package's ``__getattr__`` imports the submodule asked for.
"""

from __future__ import annotations

from importlib import import_module
from importlib.util import find_spec
from typing import Any


def submodule(package: dict[str, Any], name: str) -> Any:
    """``package``'s submodule ``name``, imported and kept in ``package`` (its globals)."""
    full = f"{package['__name__']}.{name}"
    if not name.isidentifier() or find_spec(full) is None:
        raise AttributeError(f"module {package['__name__']!r} has no attribute {name!r}")
    package[name] = module = import_module(full)  # later uses skip __getattr__
    return module
