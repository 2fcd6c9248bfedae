"""Distributed-training strategies, one module each, found and registered on import.

Adding an algorithm means adding a module here; nothing else changes. Modules whose names
start with ``_`` are not strategies but the machinery several of them compose (the
parameter-server loop, push-sum, the compressed all-reduce, the compression format,
bounded fields); docs/strategy-contract.md lists them.
"""

import importlib
import pkgutil

from fred.scenario import registry

for _module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    if not _module.startswith("_") and _module != "registry":
        try:
            importlib.import_module(f"{__name__}.{_module}")
        except Exception as _err:  # every command imports every strategy: say which one broke them all
            raise ImportError(
                f"strategies/{_module}.py failed to import ({type(_err).__name__}: {_err}); fix it, or "
                "rename it "
                f"_{_module}.py to leave it out"
            ) from _err

__all__ = ["registry"]
