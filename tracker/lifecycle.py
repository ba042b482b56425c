"""SIGINT and SIGTERM, the one way for every command: this module alone installs handlers.

- :class:`Interrupted` says which signal stopped the work; a command it ends exits
  ``128 + signal`` (:data:`EXIT_CODES`: 130 for SIGINT, 143 for SIGTERM).
- :func:`interruptible`: inside the block both signals raise where the process is. SIGINT
  keeps Python's own handler, so a sweep's ``asyncio.run`` installs its handler (which cancels
  the sweep) over it, and SIGTERM takes SIGINT's path, whichever handler that is. A
  KeyboardInterrupt leaving the block leaves it as :class:`Interrupted` (the signal that
  arrived). The command line runs every command inside one (tracker/cli/group.py).
- :func:`held`: a critical section (a storage write, a switch past its commit point, a
  rollback, the cleanup after an interrupt) that no signal cuts short. A signal arriving inside
  waits for the outermost block's end and then goes to the handler in place (the first one
  only), also when the block raised an error (an interrupt the handler raises then takes the
  error's place, the error kept as its context). It is dropped when an interrupt is already on
  its way out:
  the block raised a KeyboardInterrupt, or the block is cleanup entered while one propagates
  (``except``/``finally``): the command is already stopping, so a second Ctrl-C neither cuts the
  cleanup short nor changes the exit code.
- :func:`seconds_from_env`: how long a long-running command waits for a service that went away
  (the tracking server, the study's database), read the same way for each.
- :func:`until_signal`: ``tracker serve`` and ``tracker watch`` run until a signal, which is
  their ordinary end: the first one sets the event yielded and raises :class:`Interrupted`
  where the process is (a wait, a request MLflow is retrying); the block ends quietly and the
  command exits 0. Later signals only find the event set, so the cleanup runs to its end.

Python delivers signals to the main thread only; on any other thread each block does nothing
but run its body (and :func:`interruptible` still turns a KeyboardInterrupt into
:class:`Interrupted`). Blocks nest: an :func:`interruptible` inside another, inside
:func:`until_signal` or inside :func:`held` keeps the handlers in place, and an inner
:func:`held` leaves the delivery to the outermost one.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator, Mapping
from types import FrameType
from typing import Any

from tracker.errors import TrackerError

SIGNALS = (signal.SIGINT, signal.SIGTERM)
EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}

_depth = {"raising": 0, "holding": 0}
_received: list[int] = []  # SIGTERMs that took SIGINT's path in the current interruptible block
_held: list[int] = []  # signals a held block waits to deliver


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM stopped the work (after cleaning up); ``signum`` says which, and
    ``exit_code`` is the command's status: 130 or 143."""

    def __init__(self, signum: int, message: str = "") -> None:
        self.signum = int(signum)
        name = signal.Signals(self.signum).name
        super().__init__(message or f"stopped by {name}")

    @property
    def exit_code(self) -> int:
        return EXIT_CODES.get(signal.Signals(self.signum), 128 + self.signum)


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _restore(previous: dict[int, Any]) -> None:
    for signum, handler in previous.items():  # None: a handler not set from Python
        signal.signal(signum, handler if handler is not None else signal.SIG_DFL)


def received_signal() -> int:
    """The signal behind the KeyboardInterrupt of the current :func:`interruptible` block
    (SIGINT unless a SIGTERM took its path)."""
    return _received[-1] if _received else int(signal.SIGINT)


def _on_sigterm(_signum: int, frame: FrameType | None) -> None:
    """SIGTERM takes SIGINT's path (a sweep's asyncio handler, else KeyboardInterrupt);
    :func:`received_signal` remembers which signal it was."""
    _received.append(int(signal.SIGTERM))
    handler = signal.getsignal(signal.SIGINT)
    if callable(handler):
        handler(signal.SIGINT, frame)  # raises, or cancels the running sweep
        return
    raise KeyboardInterrupt


@contextlib.contextmanager
def interruptible(note: str = "") -> Iterator[None]:
    """SIGINT and SIGTERM raise inside the block; a KeyboardInterrupt leaves it as
    :class:`Interrupted` (message: ``stopped by SIGINT``, then ``; note``). The previous
    handlers come back after it."""
    install = _main_thread() and not _depth["raising"] and not _depth["holding"]
    previous: dict[int, Any] = {}
    if install:
        _received.clear()
        previous = {signal.SIGINT: signal.signal(signal.SIGINT, signal.default_int_handler),
                    signal.SIGTERM: signal.signal(signal.SIGTERM, _on_sigterm)}
        _depth["raising"] += 1
    try:
        yield
    except KeyboardInterrupt as exc:
        if isinstance(exc, Interrupted):
            raise
        signum = received_signal()
        name = signal.Signals(signum).name
        _received.clear()
        raise Interrupted(signum, f"stopped by {name}; {note}" if note else "") from exc
    finally:
        if install:
            _depth["raising"] -= 1
            _restore(previous)


def _hold(signum: int, _frame: FrameType | None) -> None:
    _held.append(signum)


@contextlib.contextmanager
def held() -> Iterator[None]:
    """SIGINT and SIGTERM wait for the end of the block, then reach the handler in place
    (the module docstring says when they are dropped instead)."""
    if not _main_thread():
        yield
        return
    if _depth["holding"]:  # the outermost block delivers
        _depth["holding"] += 1
        try:
            yield
        finally:
            _depth["holding"] -= 1
        return
    stopping = isinstance(sys.exc_info()[1], KeyboardInterrupt)  # cleanup after an interrupt
    previous: dict[int, Any] = {s: signal.signal(s, _hold) for s in SIGNALS}
    _depth["holding"] += 1
    try:
        yield
    except KeyboardInterrupt:
        stopping = True
        raise
    finally:
        _depth["holding"] -= 1
        _restore(previous)
        first = _held[0] if _held else None
        _held.clear()
        if first is not None and not stopping:
            signal.raise_signal(first)


@contextlib.contextmanager
def until_signal() -> Iterator[threading.Event]:
    """Run the block until SIGINT or SIGTERM (the module docstring): the event is set by the
    first signal, which ends the block; the block's end is quiet."""
    stop = threading.Event()
    if not _main_thread():
        yield stop
        return

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        if stop.is_set():
            return  # the first signal is ending the block: let its cleanup finish
        stop.set()
        raise Interrupted(signum)

    previous: dict[int, Any] = {s: signal.signal(s, on_signal) for s in SIGNALS}
    _depth["raising"] += 1
    try:
        yield stop
    except KeyboardInterrupt:
        if not stop.is_set():
            raise
    finally:
        _depth["raising"] -= 1
        _restore(previous)


def seconds_from_env(name: str, default: float, environ: Mapping[str, str] | None = None,
                     error: type[TrackerError] = TrackerError) -> float:
    """A wait in seconds from the environment variable ``name`` (a number >= 0), else
    ``default``; ``error`` names the variable and the value it refuses."""
    text = (os.environ if environ is None else environ).get(name, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise error(f"{name} must be a number of seconds >= 0, but got {text!r}")
    return value
