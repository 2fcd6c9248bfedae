"""The exception for a refusal: input fred declines on purpose, with a message that says the fix.

``fred``'s command line answers a :class:`Refusal` (and a :class:`fred.scenario.loading.ScenarioError`)
with its message and exit status 2; any other exception out of a command is a bug in fred, answered
as an internal error (exit status 3, its traceback kept). A :class:`Refusal` is a ``ValueError``, so
code that catches ``ValueError`` catches it as before.
"""

from __future__ import annotations


class Refusal(ValueError):
    """Input fred refuses on purpose: a bad value, path or combination, named with what is allowed."""
