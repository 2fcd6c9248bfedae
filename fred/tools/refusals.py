"""Which exceptions are refusals (bad input, exit status 2) and which are bugs in fred (exit status 3).

A refusal is an exception fred raises on purpose, with a message that says the fix: a
:class:`~fred.scenario.errors.Refusal`, a :class:`~fred.scenario.loading.ScenarioError`, one of the
named refusals of the layers below (:data:`NAMED`), or a missing file. Everything else out of a
command (a ``ValueError`` from numpy, a ``KeyError``, ...) is a bug, reported as one.

The layers that raise their refusals as plain ``ValueError`` (:data:`PLAIN_VALUE_ERRORS`) are read
by where the error was raised: a ``raise`` statement of theirs is a refusal; a ``ValueError`` from a
library they call, or from a built-in such as ``int("x")``, is a bug. A module leaves that list once
its refusals raise :class:`~fred.scenario.errors.Refusal`.
"""

from __future__ import annotations

import linecache
import sys
from types import TracebackType

from fred.scenario.errors import Refusal

NAMED = (  # (module, class): refusals by name, looked up only where their module is loaded already
    ("fred.scenario.loading", "ScenarioError"),
    ("fred.numerics.user_code", "UserCodeError"),
    ("fred.runs.memory", "TooLarge"),
    ("fred.tools.replay", "ReplayError"),
)

PLAIN_VALUE_ERRORS = (  # module prefixes whose `raise ValueError(...)` statements are refusals
    "fred.scenario.", "fred.numerics.", "fred.simulation.", "strategies.", "fred.runs.",
    "fred.tools.replay", "fred.tools.calibrate",
)


def is_refusal(err: BaseException) -> bool:
    """Whether ``err`` is input fred refused on purpose (its message says the fix), not a bug."""
    if isinstance(err, (Refusal, FileNotFoundError)):
        return True
    if any(isinstance(err, cls) for cls in _named()):
        return True
    return type(err) is ValueError and _raised_by(err.__traceback__, PLAIN_VALUE_ERRORS)


def _named() -> list[type]:
    """The named refusal classes whose modules are loaded (an error of an unloaded module's class cannot be)."""
    return [getattr(sys.modules[module], name) for module, name in NAMED if module in sys.modules]


def _raised_by(tb: TracebackType | None, prefixes: tuple[str, ...]) -> bool:
    """Whether the innermost frame of ``tb`` is a ``raise`` statement in a module named by ``prefixes``."""
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    module = tb.tb_frame.f_globals.get("__name__", "")
    if not module.startswith(prefixes):
        return False
    line = linecache.getline(tb.tb_frame.f_code.co_filename, tb.tb_lineno, tb.tb_frame.f_globals)
    return line.lstrip().startswith("raise ")
