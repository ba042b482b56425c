"""Files MLflow cannot store, and a tracking server that does not answer: one line each, naming
the path (or the server) and the fix. Real disks (a full tmpfs, a read-only one, a file size
limit), a real MLflow sqlite store and a real closed port."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from tests.support import disks
from tracker.errors import TrackingError
from tracker.tracking import runs

FIX = "free space on that disk and run the same command again: the study resumes"


def _client(tmp: Path, artifacts: Path) -> tuple[MlflowClient, str]:
    client = MlflowClient(f"sqlite:///{tmp / 'mlflow.db'}")
    exp = client.create_experiment("e", artifact_location=artifacts.as_uri())
    return client, client.create_run(exp).info.run_id


def test_a_full_artifact_store_is_one_line_with_the_path_and_the_fix(tmp_path: Path) -> None:
    with disks.full_folder(tmp_path / "store") as store:
        client, run_id = _client(tmp_path, store)
        runs.log_files(client, run_id, {"before.txt": "fits"})  # the store works
        disks.fill(store)
        with pytest.raises(TrackingError) as caught:
            runs.log_files(client, run_id, {"config.pbtxt": "x" * 50_000, "perf.csv": "a,b\n"})
        message = str(caught.value)
        assert "\n" not in message
        assert f"the artifacts config.pbtxt, perf.csv of run {run_id}" in message
        assert str(store) in message and "No space left on device" in message
        assert message.endswith(FIX)
        disks.free(store)
        runs.log_files(client, run_id, {"config.pbtxt": "x"})  # freed: the same call works
        assert {f.path for f in client.list_artifacts(run_id)} >= {"before.txt", "config.pbtxt"}


def test_a_read_only_artifact_store_says_make_it_writable(tmp_path: Path) -> None:
    with disks.read_only_folder(tmp_path / "store") as store:
        client, run_id = _client(tmp_path, store)
        with pytest.raises(TrackingError) as caught:
            runs.log_files(client, run_id, {"config.pbtxt": "x"})
    message = str(caught.value)
    assert "\n" not in message and str(store) in message
    assert "make it writable" in message and "choose another artifact location" in message


def test_the_file_size_limit_is_named_too(tmp_path: Path) -> None:
    """RLIMIT_FSIZE (``ulimit -f``) in a child process: EFBIG, the stand-in for a full disk
    that needs no mount."""
    script = textwrap.dedent(f"""
        import resource, signal
        from mlflow import MlflowClient
        from tracker.errors import TrackingError
        from tracker.tracking import runs
        client = MlflowClient("sqlite:///{tmp_path / 'mlflow.db'}")
        exp = client.create_experiment("e", artifact_location="{(tmp_path / 'a').as_uri()}")
        run_id = client.create_run(exp).info.run_id
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
        try:
            runs.log_files(client, run_id, {{"big.bin": b"0" * (2 << 20)}})
        except TrackingError as exc:
            print(exc)
        """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    line = done.stdout.strip()
    assert "\n" not in line and "File too large" in line, line
    assert "big.bin" in line and "ulimit -f" in line, line


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_tracking_server_that_does_not_answer_is_said_in_one_line(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    port = _closed_port()
    with pytest.raises(MlflowException) as caught:
        MlflowClient(f"http://127.0.0.1:{port}").search_experiments()
    raw = str(caught.value)
    assert "Max retries exceeded" in raw  # MLflow's own wording: the request and its history
    said = runs.unreachable(raw)
    assert said == (f"MLflow at http://127.0.0.1:{port} does not answer: "
                    "[Errno 111] Connection refused")
    assert runs.unreachable("no such experiment") == "no such experiment"
