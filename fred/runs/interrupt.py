"""Ctrl-C (and the ``fred`` command's SIGTERM) during a run, taken between two simulation steps.

A ``KeyboardInterrupt`` raised inside a step was lost or taken too late: SimPy catches it
in the process it hits (a generator's exception fails that process's event) and it came
out a step later, after a checkpoint of the half-done step had replaced the good one; one
raised inside a weak-reference or garbage-collector callback is printed and dropped by
Python, and the run went on to its end. For the whole of a run (building it, compiling,
stepping, making its tables) the first SIGINT therefore only asks for a stop, which the run
honours at its safe points, between steps among them; a second one interrupts at once,
wherever the run is.

SIGTERM, what a job scheduler or ``timeout`` sends before it kills, is taken the same way
where its handler is a Python function: the ``fred`` command installs
:func:`raise_terminated`, so a checkpointed run saves a last checkpoint and ends with 143.
Library use keeps the system's SIGTERM (a Jupyter kernel told to stop still stops).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

Handler = Callable[[int, Any], Any]
DEFERRED = (signal.SIGINT, signal.SIGTERM)  # the signals a run takes at its safe points


class Terminated(KeyboardInterrupt):
    """A SIGTERM taken by the ``fred`` command: a stop asked for, handled like Ctrl-C."""


def raise_terminated(signum: int, frame: object) -> None:
    """The ``fred`` command's SIGTERM handler, as Python's own SIGINT handler raises KeyboardInterrupt."""
    raise Terminated()


class StopRequest:
    """Whether a stop was asked for (Ctrl-C, or SIGTERM); :meth:`check` acts on it where it is safe to."""

    def __init__(self, previous: dict[int, Handler] | None = None) -> None:
        self.signum: int | None = None  # the signal that asked, until it is acted on
        self.forced = False  # a second signal interrupted at once: the step it hit may be cut
        self._previous = previous or {}  # the handlers the signals were kept from

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def check(self) -> None:
        if self.signum is not None:
            signum, self.signum = self.signum, None
            # Python's own SIGINT handler raises KeyboardInterrupt; the fred command's SIGTERM one, Terminated.
            self._previous.get(signum, signal.default_int_handler)(signum, None)


@contextmanager
def between_steps() -> Iterator[StopRequest]:
    """Defer SIGINT and SIGTERM to :meth:`StopRequest.check` for the block's length, and check at its end.

    In the main thread only (other threads cannot take signals), and only a signal whose
    handler is a Python function (not one ignored or left to the system: a sweep's pool
    workers ignore SIGINT, and SIGTERM is the system's outside the ``fred`` command).
    Nested, an inner block hands a request on to the outer one's when it ends.
    """
    previous = {s: h for s in DEFERRED if callable(h := signal.getsignal(s))}
    request = StopRequest(previous)
    if threading.current_thread() is not threading.main_thread() or not previous:
        yield request
        return

    def at_once(handler: Handler) -> Handler:
        def second(signum: int, frame: object) -> Any:
            request.forced = True
            return handler(signum, frame)

        return second

    def ask(signum: int, frame: object) -> None:
        if request.signum is None:
            request.signum = signum
        for s, handler in previous.items():  # a second signal: at once
            signal.signal(s, at_once(handler))

    for s in previous:
        signal.signal(s, ask)
    try:
        yield request
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    request.check()  # asked for during the block's last step: still a stop
