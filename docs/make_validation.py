"""Write ``docs/validation.md``: for each seed paper's claim, its figure, fred's prediction and the error.

    python docs/make_validation.py            # rewrites docs/validation.md (about a minute on 2 cores)

Each paper's part is the ``section()`` of its ``scenarios/<paper>/validation.py``; this
script only puts them in order under the page's introduction. ``tests/test_validation.py``
runs each section's quick form.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "validation.md"
PAPERS = [
    "sgp",
    "ddp",
    "hpsgd",
    "pipe_sgd",
    "fasgd",
    "hybrid",
    "collectives",
]  # scenarios/<name>/validation.py, in the page's order

INTRODUCTION = """\
# Validation: measured tables, predicted

Produced by `python docs/make_validation.py`; do not edit by hand.

The seed papers' tables, and PyTorch DDP's own benchmark, each predicted by fred's clock.
A prediction counts only on data it was not fitted to. Each section says which constants
come from the paper's stated hardware, which were fitted and on which entries (never on
the entry being predicted), each fitted constant's physical reading, and the command that
reproduces its rows. Errors are fred's prediction against the paper's figure:
`(fred - paper) / paper`.
"""


def module(paper: str) -> ModuleType:
    """``scenarios/<paper>/validation.py``, loaded by path (scenario folders are not a package)."""
    path = ROOT / "scenarios" / paper / "validation.py"
    spec = importlib.util.spec_from_file_location(f"validation_{paper}", path)
    assert spec is not None and spec.loader is not None
    loaded = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = loaded  # dataclasses look their module up there
    spec.loader.exec_module(loaded)
    return loaded


def page(quick: bool = False) -> str:
    return "\n".join([INTRODUCTION] + [module(paper).section(quick) for paper in PAPERS])


if __name__ == "__main__":
    OUT.write_text(page())
    sys.exit(print(f"wrote {OUT}"))
