"""`tracker watch` against a tracking server that does not answer (a real closed port), as a
real process: ``--once`` ends with status 1 and the reason in one line, soon; SIGTERM and
SIGINT stop the watcher within seconds, also while MLflow is retrying a request with its own
(minutes-long) retry settings. No Triton is needed: the registry is never reached."""

from __future__ import annotations

import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tracker.deploy.watch import reason


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _watch(tmp: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    repository = tmp / "serving"
    repository.mkdir(exist_ok=True)
    base = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    return subprocess.Popen(
        [sys.executable, "-m", "tracker.cli", "watch", "--tracking-uri",
         f"http://127.0.0.1:{_closed_port()}", "--repository", str(repository), *args],
        cwd=tmp, env={**base, **(env or {})}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True)


def _lines(stream: object) -> queue.Queue[str | None]:
    """The lines of ``stream`` as they come, read by a thread; None at its end."""
    found: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        for line in stream:  # type: ignore[attr-defined]
            found.put(line)
        found.put(None)

    threading.Thread(target=read, daemon=True).start()
    return found


@pytest.fixture()
def reaped() -> Iterator[list[subprocess.Popen[str]]]:
    """The processes a test started; any still running at its end is killed (its group)."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def test_once_exits_1_with_the_reason_in_one_line(
        tmp_path: Path, reaped: list[subprocess.Popen[str]]) -> None:
    proc = _watch(tmp_path, "--once")
    reaped.append(proc)
    out = _lines(proc.stdout)
    first = out.get(timeout=120)  # the process has started (imports are not timed)
    started = time.monotonic()
    assert first is not None and "watching " in first and "once" in first, first
    proc.wait(timeout=120)
    took = time.monotonic() - started
    err = proc.stderr.read() if proc.stderr is not None else ""
    assert proc.returncode == 1, err
    assert took < 30, f"--once took {took:.1f} s to report an unreachable tracking server"
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("error: the poll failed: ") and "does not answer: " in lines[0]
    assert "Connection refused" in lines[0]
    assert list(iter(lambda: out.get(timeout=30), None)) == []  # nothing after the first line


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_stops_the_watcher_while_mlflow_retries(
        tmp_path: Path, reaped: list[subprocess.Popen[str]], sig: signal.Signals) -> None:
    # MLflow's own retry settings (7 retries, backoff factor 2: minutes for one request), so
    # that only the signal can end the request in seconds
    proc = _watch(tmp_path, "--interval", "1", env={
        "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "7", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "2"})
    reaped.append(proc)
    out = _lines(proc.stdout)
    first = out.get(timeout=120)
    assert first is not None and "watching " in first, first
    time.sleep(1.5)  # inside the first registry request, which MLflow retries for minutes
    assert proc.poll() is None
    sent = time.monotonic()
    proc.send_signal(sig)
    proc.wait(timeout=60)
    took = time.monotonic() - sent
    assert took < 5, f"the watcher took {took:.1f} s to stop after {sig.name}"
    err = proc.stderr.read() if proc.stderr is not None else ""
    rest = list(iter(lambda: out.get(timeout=30), None))
    assert proc.returncode == 0, err
    assert "Traceback" not in err, err
    assert rest and rest[-1].rstrip().endswith(f"stopped by {sig.name}"), rest


def test_the_reason_of_a_failed_poll_is_one_line() -> None:
    assert reason(ValueError("cannot read\n  registered model 'x'")) == \
        "cannot read registered model 'x'"
