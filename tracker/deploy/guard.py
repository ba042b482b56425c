"""Signals during a deployment: a deployment is rolled back, never left half-done.

SIGTERM's default action ends the process at once, between any two steps of a switch, and
SIGINT's raises a KeyboardInterrupt anywhere, including inside a rollback. While a
deployment runs (:func:`interruptible`), both raise :class:`Interrupted` (a
KeyboardInterrupt, so code that stops on Ctrl-C stops on it too) at the step they arrive
in; the switch then rolls every model back inside :func:`shielded`, where a further signal is
held and raised only once the rollback is done. Outside the main thread (where Python
delivers no signals) both are no-ops.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any

_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_state = {"shielded": 0, "installed": 0}
_held: list[int] = []


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM arrived during a deployment; ``signum`` says which."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"stopped by {signal.Signals(signum).name}")

    @property
    def exit_status(self) -> int:
        """The shell's status for a process ended by this signal: 128 + its number."""
        return 128 + self.signum


def _handler(signum: int, _frame: FrameType | None) -> None:
    if _state["shielded"]:
        _held.append(signum)
        return
    raise Interrupted(signum)


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """SIGINT and SIGTERM raise :class:`Interrupted` inside the block; the previous handlers
    come back after it (nested blocks keep the outermost's)."""
    if not _main_thread() or _state["installed"]:
        yield
        return
    previous: dict[int, Any] = {s: signal.getsignal(s) for s in _SIGNALS}
    for sig in _SIGNALS:
        signal.signal(sig, _handler)
    _state["installed"] = 1
    try:
        yield
    finally:
        _state["installed"] = 0
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextlib.contextmanager
def shielded() -> Iterator[None]:
    """Signals that arrive inside the block wait for its end, then raise :class:`Interrupted`
    (once, for the first of them); an exception leaving the block goes first."""
    _state["shielded"] += 1
    try:
        yield
    except BaseException:
        _held.clear()  # already unwinding: the exception says the work stopped
        raise
    finally:
        _state["shielded"] -= 1
    if not _state["shielded"] and _held:
        first = _held[0]
        _held.clear()
        raise Interrupted(first)
