"""Which exceptions are refusals (bad input, exit status 2) and which are bugs in fred (exit status 3),
and how a bug is reported.

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
import os
import sys
import tempfile
import traceback
from types import TracebackType

from fred.scenario.errors import Refusal

NAMED = (  # (module, class): refusals by name, looked up only where their module is loaded already
    ("fred.scenario.loading", "ScenarioError"),
    ("fred.numerics.user_code", "UserCodeError"),
    ("fred.runs.memory", "TooLarge"),
    ("fred.tools.replay", "ReplayError"),
)

PLAIN_VALUE_ERRORS = (  # module prefixes whose `raise ValueError(...)` statements are refusals
    "fred.scenario.",
    "fred.numerics.",
    "fred.simulation.",
    "fred.models.",
    "strategies.",
    "fred.runs.",
    "fred.tools.replay",
    "fred.tools.calibrate",
)


def is_refusal(err: BaseException) -> bool:
    """Whether ``err`` is input fred refused on purpose (its message says the fix), not a bug."""
    if isinstance(err, (Refusal, FileNotFoundError)):
        return True
    if any(isinstance(err, cls) for cls in _named()):
        return True
    return type(err) is ValueError and _raised_by(err.__traceback__, PLAIN_VALUE_ERRORS)


def _named() -> list[type]:
    """The named refusal classes whose modules are loaded (no error is of an unloaded module's class)."""
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


INTERNAL = (
    3  # the exit status of a bug in fred, apart from 2 (input refused) and 1 (a failed run, the machine)
)


def report_bug(err: BaseException, debug: bool = False) -> None:
    """Say on stderr, in one line, that ``err`` is a bug in fred and where its traceback is: a
    file ``fred-traceback-*.txt`` in the temporary folder, or above the line with ``debug``."""
    text = "".join(traceback.format_exception(err))
    what = f"{type(err).__name__}: {' '.join(str(err).split())}"
    what = what if len(what) <= 300 else f"{what[:299]}…"
    name = "above"
    if not debug:
        try:
            handle, name = tempfile.mkstemp(prefix="fred-traceback-", suffix=".txt")
            with os.fdopen(handle, "w", encoding="utf-8") as file:
                file.write(f"fred {' '.join(sys.argv[1:])}\n{text}")
        except OSError:  # no writable temporary folder: the traceback goes to stderr
            debug, name = True, "above"
    if debug:
        print(text, end="", file=sys.stderr)
    kept = (
        "its traceback is above"
        if debug
        else f"its traceback is in {name} (--debug prints it here); please report it with that file"
    )
    print(f"fred: internal error, a bug in fred and not in your input ({what}); {kept}", file=sys.stderr)
