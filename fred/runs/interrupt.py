"""Ctrl-C and SIGTERM: a run stops between two simulation steps, and the ``fred`` command ends
promptly, with one line and status 130 or 143, whatever it is doing when the signal comes.

A ``KeyboardInterrupt`` raised inside a step would be lost or taken too late: SimPy catches it
in the process it hits (a generator's exception fails that process's event), so it would come
out a step later, after a checkpoint of the half-done step had replaced the good one; one
raised inside a weak-reference or garbage-collector callback is printed and dropped by
Python, and the run would go on to its end. For the whole of a run (building it, compiling,
stepping, making its tables) the first SIGINT therefore only asks for a stop
(:func:`between_steps`), which the run honours at its safe points, between steps among
them; a second one interrupts at once, wherever the run is.

The ``fred`` command adds what a library must not (:func:`take_signals`): SIGTERM, what a
job scheduler or ``timeout`` sends before it kills, is taken as Ctrl-C is; every stop asked
for is remembered, so one whose ``KeyboardInterrupt`` Python dropped still ends the command
at its next check; and a watcher thread ends the process itself when the main thread does
not take the stop within :data:`GRACE_S` seconds: a signal's Python handler runs only between
two bytecodes, and XLA compiling a large program can hold it back for a minute or two. Library
use keeps the system's SIGTERM (a Jupyter kernel told to stop still stops).
"""

from __future__ import annotations

import os
import select
import signal
import sys
import threading
import time
from _thread import interrupt_main
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, NoReturn

Handler = Callable[[int, Any], Any]
DEFERRED = (signal.SIGINT, signal.SIGTERM)  # the signals a run takes at its safe points
STATUS = {signal.SIGINT: 130, signal.SIGTERM: 143}  # what a shell reports for a command ended by each
GRACE_S = 3.0  # how long the main thread has to take a stop before the watcher ends the process
SECOND_GRACE_S = 1.0  # the same after a second signal, which asks to end at once
POLL_S = 0.1  # how often the watcher looks again while a stop is pending


class Terminated(KeyboardInterrupt):
    """A SIGTERM taken by the ``fred`` command: a stop asked for, handled like Ctrl-C."""


def stop_exception(signum: int) -> KeyboardInterrupt:
    """What a stop asked for by ``signum`` raises: ``Terminated`` for SIGTERM, else ``KeyboardInterrupt``."""
    return Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


def stop_in(err: BaseException | None) -> int | None:
    """The signal of the ``KeyboardInterrupt`` in ``err``'s chain (an ``ImportError`` raised while one
    unwound a half-done import, say), or None when there is none."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, KeyboardInterrupt):
            return signal.SIGTERM if isinstance(err, Terminated) else signal.SIGINT
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return None


@dataclass
class _Command:
    """The ``fred`` command's stop: which signal asked first, and how far the main thread is with it."""

    say: Callable[[int], str]  # the line to end with, for the signal that asked
    signum: int | None = None  # the first stop asked for; kept until the process ends
    taken: bool = False  # the main thread raised it, or its run saw it at a safe point
    ending: bool = False  # the main thread is reporting it and exiting
    again: bool = False  # it came during an import: the watcher signals the main thread again


_command: _Command | None = None  # set by take_signals, in the fred command only
_leaving = threading.Lock()  # held by whichever thread ends the process: one line, once


def take_signals(say: Callable[[int], str]) -> None:
    """The ``fred`` command's handling of SIGINT and SIGTERM, for the rest of the process.

    Each signal is remembered and raised in the main thread (a run defers it to its next
    safe point); a ``KeyboardInterrupt`` that Python drops ("Exception ignored in") is not
    printed and leaves the stop pending; and a watcher thread, woken by the signal even
    while the main thread is in native code, ends the process with ``say(signum)`` on
    stderr and the signal's status when the main thread has not taken the stop within
    :data:`GRACE_S` seconds (:data:`SECOND_GRACE_S` after a second signal).
    """
    global _command
    command = _command = _Command(say)
    for s in DEFERRED:
        signal.signal(s, _raise_stop)
    read, write = os.pipe()
    os.set_blocking(write, False)
    signal.set_wakeup_fd(write, warn_on_full_buffer=False)  # written by the C handler, at once
    sys.unraisablehook = _keep_dropped_stops(sys.unraisablehook)
    threading.Thread(target=_watch, args=(read, command), daemon=True, name="fred-stop-watcher").start()


def asked() -> int | None:
    """The signal that asked the ``fred`` command to stop, if one did (None outside the command)."""
    return _command.signum if _command is not None else None


def raise_if_asked() -> None:
    """Raise the stop the ``fred`` command was asked for, if any: at a point where it is safe to."""
    signum = asked()
    if signum is not None:
        _taking()
        raise stop_exception(signum)


def stop_of(err: BaseException) -> int | None:
    """The signal ``err`` ends the command for: the stop asked for, whatever ``err`` became on
    its way out, or the ``KeyboardInterrupt`` in its chain; None when it is no stop."""
    return asked() or stop_in(err)


def ending() -> None:
    """The main thread reports the stop and exits: further signals change nothing."""
    if _command is not None:
        _command.ending = True
        for s in DEFERRED:
            signal.signal(s, _ignore)


def is_ending() -> bool:
    """Whether the main thread already reports the stop (its line is written, or being written)."""
    return _command is not None and _command.ending


def finished() -> None:
    """The command is done and Python shuts down: a signal now ends the process at once, with its
    line and status, instead of raising into interpreter shutdown (an atexit traceback, status 0)."""
    if _command is not None:
        for s in DEFERRED:
            signal.signal(s, _end_now)


def _record(signum: int) -> None:
    if _command is not None and _command.signum is None:
        _command.signum = signum


def _taking() -> None:
    if _command is not None:
        _command.taken, _command.again = True, False


def _raise_stop(signum: int, frame: Any) -> None:
    """The ``fred`` command's handler: remember the stop, and raise it, unless an import is under
    way: raised inside a native module's initialisation it aborted the process ("terminate called
    after throwing an instance of 'nanobind::python_error'"), elsewhere in an import it came out as
    a traceback. The watcher then calls this again every :data:`POLL_S` until the import is done."""
    _record(signum)
    if _importing(frame) and _command is not None:
        _command.again = True
        return
    _taking()
    raise stop_exception(asked() or signum)


def _importing(frame: Any) -> bool:
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib._bootstrap"):
            return True
        frame = frame.f_back
    return False


def _ignore(signum: int, frame: object) -> None:
    """A signal while the command already ends: the watcher sees it, nothing else does."""


def _end_now(signum: int, frame: object | None = None) -> NoReturn:
    """Write the command's last line and end the process, skipping interpreter shutdown (where
    JAX/XLA crashed now and then). Whichever thread comes first does it; the other waits."""
    _leaving.acquire()  # never released: the process ends here
    line = _command.say(signum) if _command is not None else f"fred: stopped by signal {signum}"
    try:
        os.write(sys.stderr.fileno(), (line + "\n").encode(errors="replace"))
    except (OSError, ValueError):  # stderr closed: the status still says it
        pass
    release_semaphores()
    os._exit(STATUS.get(signum, 128 + signum))


RELEASE_S = 1.0  # the most the end of the process waits for the semaphores' removal


def release_semaphores() -> None:
    """Remove the named semaphores multiprocessing made in this process, as its exit handler does
    at Python's shutdown, which a stopped command skips: left to the end of the process they were
    removed by the resource tracker, which warned of "leaked semaphore objects" (a sweep's pool
    holds five). Removing a name leaves the semaphore working for whoever has it open.

    In a thread of its own, waited for :data:`RELEASE_S` at most: telling the tracker takes its
    lock, which the thread a signal handler interrupted may hold; the process then ends anyway.
    """
    if "multiprocessing.synchronize" not in sys.modules:  # no semaphore was made: nothing to do, no thread
        return
    try:
        helper = threading.Thread(target=_unlink_semaphores, daemon=True, name="fred-release-semaphores")
        helper.start()
    except RuntimeError:  # no new thread at interpreter shutdown: the tracker removes them
        return
    helper.join(RELEASE_S)


def _unlink_semaphores() -> None:
    util, synchronize = (
        sys.modules.get("multiprocessing.util"),
        sys.modules.get("multiprocessing.synchronize"),
    )
    registry = getattr(util, "_finalizer_registry", None)  # private: Python has no public way
    cleanup = getattr(getattr(synchronize, "SemLock", None), "_cleanup", None)
    if registry is None or cleanup is None:  # no semaphore was made (or another Python): nothing to do
        return
    for finalizer in list(registry.values()):
        if getattr(finalizer, "_callback", None) is cleanup:
            try:
                finalizer()  # unlinks the name and tells the tracker; runs once
            except Exception:  # noqa: BLE001 - the process ends anyway; the tracker removes what is left
                pass


def _keep_dropped_stops(previous: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """An unraisable hook that keeps a stop Python dropped (raised in a garbage-collection or
    weak-reference callback, or at exit) pending, without printing it; the rest as before."""

    def hook(unraisable: Any) -> None:
        if _command is not None and _command.signum is not None and stop_in(unraisable.exc_value) is not None:
            _command.taken = False  # nobody acts on it: the next check does, or the watcher
            return
        previous(unraisable)

    return hook


def _watch(read: int, command: _Command) -> None:
    """End the process when a stop is not taken in time (the watcher thread's loop)."""
    first = None  # the first signal seen
    untaken_since = second_at = None
    echoes = 0  # the bytes our own interrupt_main calls will write
    while True:
        ready, _, _ = select.select([read], [], [], None if first is None else POLL_S)
        now = time.monotonic()
        for signum in os.read(read, 512) if ready else b"":
            if signum not in DEFERRED:
                continue
            if echoes:
                echoes -= 1
            elif first is None:
                first = signum
            elif second_at is None:
                second_at = now
        if first is None or command.ending:
            continue
        untaken_since = None if command.taken else (untaken_since or now)
        late = untaken_since is not None and now - untaken_since >= GRACE_S
        if late or (second_at is not None and now - second_at >= SECOND_GRACE_S):
            _end_now(command.signum or first)
        if command.again and command.signum is not None:  # asked during an import: ask again
            echoes += 1
            interrupt_main(command.signum)


class StopRequest:
    """Whether a stop was asked for (Ctrl-C, or SIGTERM); :meth:`check` acts on it where it is safe to."""

    def __init__(self, previous: dict[int, Handler] | None = None) -> None:
        self.signum: int | None = asked()  # the signal that asked, until it is acted on
        if self.signum is not None and _command is not None:
            _command.again = False  # a stop asked for while loading is this block's to take now
        self.forced = False  # a second signal interrupted at once: the step it hit may be cut
        self._previous = previous or {}  # the handlers the signals were kept from

    @property
    def requested(self) -> bool:
        """Whether a stop was asked for; read by the run at a safe point, where it acts on it
        (so the ``fred`` command's watcher leaves it the time to keep a last checkpoint)."""
        if self.signum is None:
            return False
        _taking()
        return True

    def check(self) -> None:
        if self.signum is not None:
            signum, self.signum = self.signum, None
            # Python's own SIGINT handler raises KeyboardInterrupt; the fred command's raises Terminated for
            # SIGTERM.
            self._previous.get(signum, signal.default_int_handler)(signum, None)


@contextmanager
def between_steps() -> Iterator[StopRequest]:
    """Defer SIGINT and SIGTERM to :meth:`StopRequest.check` for the block's length, and check at its end.

    In the main thread only (other threads cannot take signals), and only a signal whose
    handler is a Python function (not one ignored or left to the system: a sweep's pool
    workers ignore SIGINT, and SIGTERM is the system's outside the ``fred`` command).
    Nested, an inner block hands a request on to the outer one's when it ends. In the
    ``fred`` command a stop asked for before the block is pending in it from the start.
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
        _record(signum)
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
