"""Ctrl-C during a run, taken between two simulation steps.

A ``KeyboardInterrupt`` raised inside a step was lost or taken too late: SimPy catches it
in the process it hits (a generator's exception fails that process's event) and it came
out a step later, after a checkpoint of the half-done step had replaced the good one; one
raised inside a weak-reference or garbage-collector callback is printed and dropped by
Python, and the run went on to its end. For the whole of a run (building it, compiling,
stepping, making its tables) the first SIGINT therefore only asks for a stop, which the run
honours at its safe points, between steps among them; a second one interrupts at once,
wherever the run is.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


class StopRequest:
    """Whether Ctrl-C was pressed; :meth:`check` acts on it where it is safe to."""

    def __init__(self, previous: Callable[[int, Any], Any] = signal.default_int_handler) -> None:
        self.requested = False
        self._previous = previous  # the handler the press was kept from: Python's raises KeyboardInterrupt

    def check(self) -> None:
        if self.requested:
            self.requested = False
            self._previous(signal.SIGINT, None)


@contextmanager
def between_steps() -> Iterator[StopRequest]:
    """Defer SIGINT to :meth:`StopRequest.check` for the block's length, and check at its end.

    In the main thread only (other threads cannot take signals), and not where SIGINT is
    ignored or left to the system (a sweep's pool workers ignore it). Nested, an inner block
    hands a press on to the outer one's request when it ends.
    """
    previous = signal.getsignal(signal.SIGINT)
    request = StopRequest(previous) if callable(previous) else StopRequest()
    if threading.current_thread() is not threading.main_thread() or not callable(previous):
        yield request
        return

    def ask(signum: int, frame: object) -> None:
        request.requested = True
        signal.signal(signal.SIGINT, previous)  # a second Ctrl-C: at once

    signal.signal(signal.SIGINT, ask)
    try:
        yield request
    finally:
        signal.signal(signal.SIGINT, previous)
    request.check()  # pressed during the block's last step: still a Ctrl-C
