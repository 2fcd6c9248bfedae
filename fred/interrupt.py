"""Ctrl-C during a run, taken between two simulation steps.

A ``KeyboardInterrupt`` raised inside a step was lost or taken too late: SimPy catches it
in the process it hits (a generator's exception fails that process's event) and it came
out a step later, after a checkpoint of the half-done step had replaced the good one; one
raised inside a weak-reference or garbage-collector callback is printed and dropped by
Python, and the run went on to its end. While a run steps, the first SIGINT therefore only
asks for a stop, which the stepping loop honours between steps; a second one interrupts
at once, wherever the run is.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class StopRequest:
    """Whether Ctrl-C was pressed; :meth:`check` raises ``KeyboardInterrupt`` if it was."""

    def __init__(self) -> None:
        self.requested = False

    def check(self) -> None:
        if self.requested:
            raise KeyboardInterrupt


@contextmanager
def between_steps() -> Iterator[StopRequest]:
    """Defer SIGINT to the loop's :meth:`StopRequest.check` for the block's length.

    Only where Python's own handler is in place, in the main thread: a sweep's pool workers
    ignore SIGINT, other threads cannot take signals, and a caller's own handler stays.
    """
    request = StopRequest()
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield request
        return

    def ask(signum: int, frame: object) -> None:
        request.requested = True
        signal.signal(signal.SIGINT, signal.default_int_handler)  # a second Ctrl-C: at once

    signal.signal(signal.SIGINT, ask)
    try:
        yield request
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    request.check()  # pressed during the last step of a run that then ended: still a Ctrl-C
