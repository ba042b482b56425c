"""How long a command waits for a tracking server that does not answer: the one rule.

``tracker tune`` (a scale-out worker is one) and ``tracker confirm`` run for hours and hold
measurements that MLflow only mirrors, so they wait inside :func:`waiting` for a tracking
server that does not answer (refused or reset connections, timeouts, 5xx answers after
MLflow's own retries) up to ``mlflow.wait_s`` of the spec, else ``$TRACKER_MLFLOW_WAIT_S``,
else :data:`DEFAULT_WAIT_S` (a pod restart takes a minute or two), saying so on a progress
line. ``tracker watch`` polls again at its interval whatever a poll met. Every other command
(``promote``, ``status``, ``check``, ``watch --once``) fails at once with the cause, after
MLflow's own bounded retries (tracker/cli/params.py; the ``MLFLOW_HTTP_REQUEST_*`` variables
a user sets decide each attempt, inside the wait too).

A wait counts from the first unanswered request of an outage: any answer ends the outage.
Once a wait is over, every later request of the command fails at once
(:class:`TrackingUnavailable`), so that the command stops without waiting again.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from tracker.errors import TrackingError
from tracker.lifecycle import seconds_from_env
from tracker.redact import redact_url

WAIT_ENV = "TRACKER_MLFLOW_WAIT_S"
DEFAULT_WAIT_S = 300.0
#: seconds between two tries while waiting (each try also takes MLflow's own retries)
RETRY_S = 3.0
#: seconds between two "waiting" lines
REPORT_S = 30.0

_REQUEST = re.compile(r"API request to \S+ failed with (?:timeout )?exception")
_DOWN = re.compile(r"refused|reset by peer|aborted|timed out|RemoteDisconnected|"
                   r"error responses|name resolution|Name or service not known", re.I)


class TrackingUnavailable(TrackingError):
    """The tracking server did not answer for the whole wait (or the wait is already over)."""


def unanswered(exc: BaseException) -> bool:
    """The error is MLflow's for a request the tracking server did not answer (not an
    answer that refuses the request)."""
    if not isinstance(exc, MlflowException):
        return False
    text = str(exc)
    request = _REQUEST.search(text)
    return request is not None and _DOWN.search(text, request.end()) is not None


def wait_seconds(spec_value: float | None) -> float:
    """The wait of a long-running command: the spec's ``mlflow.wait_s``, else
    ``$TRACKER_MLFLOW_WAIT_S``, else :data:`DEFAULT_WAIT_S`."""
    if spec_value is not None:
        return float(spec_value)
    return seconds_from_env(WAIT_ENV, DEFAULT_WAIT_S, error=TrackingError)


def clock(seconds: float) -> str:
    """``130`` -> ``2:10``."""
    whole = int(seconds)
    return f"{whole // 60}:{whole % 60:02d}"


class Wait:
    """The wait of one command: ``report`` prints a progress line, ``kept`` says what is kept
    locally meanwhile ("1 trial's records kept in PATH", or "")."""

    def __init__(self, wait_s: float, report: Callable[[str], None],
                 kept: Callable[[], str]) -> None:
        self.wait_s = wait_s
        self.report = report
        self.kept = kept
        self.down_since: float | None = None
        self.reported = 0.0
        self.over = False
        self.waited = 0.0

    def answered(self, server: str) -> None:
        if self.down_since is not None:
            self.report(f"MLflow at {server} answers again after "
                        f"{clock(time.monotonic() - self.down_since)}")
            self.down_since = None

    def check(self, server: str) -> None:
        """TrackingUnavailable at once, without a request, once the wait is over."""
        if self.over:
            raise TrackingUnavailable(f"MLflow at {server} did not answer for "
                                      f"{clock(self.waited)}")

    def unanswered(self, server: str, exc: MlflowException, tried: float) -> None:
        """Wait before the next try (``tried``: when the request that got no answer was
        sent); TrackingUnavailable when the wait is over."""
        now = time.monotonic()
        if self.down_since is None:
            self.down_since, self.reported = tried, tried - REPORT_S
        waited = now - self.down_since
        if waited >= self.wait_s:
            self.over, self.waited = True, waited
            raise TrackingUnavailable(f"MLflow at {server} did not answer for "
                                      f"{clock(waited)}") from exc
        if now - self.reported >= REPORT_S:
            kept = self.kept()
            self.report(f"MLflow at {server} does not answer; waiting ({clock(waited)} of "
                        f"{clock(self.wait_s)})" + (f", {kept}" if kept else ""))
            self.reported = now
        time.sleep(min(RETRY_S, max(0.0, self.wait_s - waited)))


_active: Wait | None = None
_lock = threading.Lock()


@contextlib.contextmanager
def waiting(wait_s: float, report: Callable[[str], None],
            kept: Callable[[], str] = lambda: "") -> Iterator[Wait]:
    """Requests of :func:`client` clients wait in the block (see the module's rule)."""
    global _active
    with _lock:
        before, _active = _active, Wait(wait_s, report, kept)
        wait = _active
    try:
        yield wait
    finally:
        with _lock:
            _active = before


def _call(server: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    while True:
        tried = time.monotonic()
        if _active is not None:
            _active.check(server)
        try:
            result = fn(*args, **kwargs)
        except MlflowException as exc:
            wait = _active
            if wait is None or not unanswered(exc):
                raise
            wait.unanswered(server, exc, tried)
            continue
        wait = _active
        if wait is not None:
            wait.answered(server)
        return result


class PatientClient(MlflowClient):
    """An MlflowClient whose public methods wait as the rule says (inside :func:`waiting`;
    elsewhere it is MLflow's own client)."""

    def __getattribute__(self, name: str) -> Any:
        found = super().__getattribute__(name)
        if name.startswith("_") or not callable(found):
            return found
        server = redact_url(str(super().__getattribute__("tracking_uri")))

        def patient(*args: Any, **kwargs: Any) -> Any:
            return _call(server, found, *args, **kwargs)

        return patient


def client(tracking_uri: str | None = None) -> MlflowClient:
    """The MLflow client of a study's commands: one that waits inside :func:`waiting`."""
    return PatientClient(tracking_uri=tracking_uri)
