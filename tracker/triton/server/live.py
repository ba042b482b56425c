"""The servers this process has running, so that nothing outlives it.

A launcher registers itself before it launches and leaves when stopped; :func:`stop_all`
runs at exit (atexit), and the CLI's signal handling unwinds into it.
"""

from __future__ import annotations

import atexit
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tracker.triton.server.base import TritonServer

_LIVE: set[TritonServer] = set()
_LOCK = threading.Lock()


def register(server: TritonServer) -> None:
    with _LOCK:
        _LIVE.add(server)


def discard(server: TritonServer) -> None:
    with _LOCK:
        _LIVE.discard(server)


def live_servers() -> list[TritonServer]:
    """Servers of this process that are running (started and not yet stopped)."""
    with _LOCK:
        return list(_LIVE)


def stop_all(timeout_s: float = 5.0) -> None:
    """Stop every server this process started. Registered with atexit; the CLI also calls it
    (through normal unwinding) when it receives SIGINT or SIGTERM."""
    for server in live_servers():
        try:
            server.stop(timeout_s=timeout_s)
        except Exception:  # best effort at exit: try the others too
            continue


atexit.register(stop_all)
