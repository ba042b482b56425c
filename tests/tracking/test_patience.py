"""The wait for a tracking server that does not answer (tracking/patience.py), on a real closed
port with MLflow's own retries off, so each try fails at once; and the wait's settings."""

from __future__ import annotations

import socket
import time

import pytest
from mlflow.exceptions import MlflowException

from tracker.errors import TrackingError
from tracker.tracking import patience


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_command_waits_then_stops_and_then_fails_at_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setattr(patience, "RETRY_S", 0.2)
    monkeypatch.setattr(patience, "REPORT_S", 0.5)
    uri = f"http://127.0.0.1:{_closed_port()}"
    client = patience.client(uri)
    with pytest.raises(MlflowException):  # outside a wait: MLflow's own error, at once
        client.search_experiments()
    lines: list[str] = []
    with patience.waiting(1.5, lines.append, lambda: "trial 3's records kept in X"):
        started = time.monotonic()
        with pytest.raises(patience.TrackingUnavailable) as caught:
            client.search_experiments()
        waited = time.monotonic() - started
        assert 1.5 <= waited < 10
        assert str(caught.value).startswith(f"MLflow at {uri} did not answer for 0:0")
        assert lines[0] == (f"MLflow at {uri} does not answer; waiting (0:00 of 0:01), "
                            "trial 3's records kept in X")
        started = time.monotonic()
        with pytest.raises(patience.TrackingUnavailable):  # the wait is over: no new wait
            client.get_run("0" * 32)
        assert time.monotonic() - started < 0.5
    with pytest.raises(MlflowException):  # the block is over: the rule is gone with it
        client.search_experiments()


def test_the_wait_comes_from_the_spec_then_the_environment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(patience.WAIT_ENV, raising=False)
    assert patience.wait_seconds(None) == patience.DEFAULT_WAIT_S == 300
    monkeypatch.setenv(patience.WAIT_ENV, "90")
    assert patience.wait_seconds(None) == 90 and patience.wait_seconds(20) == 20
    monkeypatch.setenv(patience.WAIT_ENV, "soon")
    with pytest.raises(TrackingError, match="TRACKER_MLFLOW_WAIT_S must be a number of "
                                            "seconds >= 0, but got 'soon'"):
        patience.wait_seconds(None)
