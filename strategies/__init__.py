"""Distributed-training strategies, one module each, found and registered on import.

Adding an algorithm means adding a module here; nothing else changes.
"""

import importlib
import pkgutil

from strategies import registry

for _module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    if not _module.startswith("_") and _module != "registry":
        importlib.import_module(f"{__name__}.{_module}")

__all__ = ["registry"]
