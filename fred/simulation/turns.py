"""Fewer SimPy events for the same run: an event handled in the turn it would have had anyway.

SimPy processes events in ``(time, priority, insertion order)`` order, one per step, and the
runner checks its stop conditions between steps. Two kinds of event cost a step and change
nothing that a step in between could see:

- an event triggered by the last callback of the event being processed, when nothing else
  is due at this instant: it would be the very next one processed, so its callbacks may run
  now (:func:`succeed_in_turn`), as if the two steps were one;
- an event that will have nothing to do when its turn comes: its place in the order is taken
  when it would have been scheduled (:func:`reserve`) and it is put there only if, by the end
  of the step, something may still need it (:func:`schedule_reserved`).

Every other event keeps its time, its priority and its place in the order, so processes
resume in the same order and the records are the same; only the count of steps differs.
Both reach into SimPy's queue and event state (``Environment._queue``, ``_eid``,
``Event._ok``/``_value``), as SimPy's own ``Timeout`` and ``Environment.step`` do.
"""

from __future__ import annotations

from heapq import heappush
from typing import Any, Callable

import simpy
from simpy.events import NORMAL


def nothing_due_now(env: simpy.Environment) -> bool:
    """Whether no event waits to be processed at the current instant."""
    queue = env._queue  # type: ignore[attr-defined]
    return not queue or queue[0][0] > env._now  # type: ignore[attr-defined]


def succeed_in_turn(env: simpy.Environment, event: simpy.Event, value: Any = None) -> None:
    """Trigger ``event``; when it would be the next event processed, process it now.

    Call it only as the last thing the last callback of the event being processed does:
    the event it triggers is then processed right after this one, with nothing between
    them, whichever way it is done.
    """
    if not nothing_due_now(env):
        event.succeed(value)
        return
    event._ok, event._value = True, value  # what succeed() and then Environment.step do
    callbacks, event.callbacks = event.callbacks, None  # type: ignore[assignment]
    for callback in callbacks:  # type: ignore[union-attr]
        callback(event)


def reserve(env: simpy.Environment) -> int:
    """The place in the order an event scheduled now would take."""
    return next(env._eid)  # type: ignore[attr-defined]


def schedule_reserved(env: simpy.Environment, place: int, callback: Callable[[simpy.Event], None]) -> None:
    """Schedule an event at the current instant, in the ``place`` :func:`reserve` took, that
    calls ``callback``: as ``env.timeout(0)`` made when the place was taken, provided no event
    has been processed since."""
    event = simpy.Event(env)
    event._ok, event._value = True, None
    event.callbacks.append(callback)  # type: ignore[union-attr]
    heappush(env._queue, (env._now, NORMAL, place, event))  # type: ignore[attr-defined]
