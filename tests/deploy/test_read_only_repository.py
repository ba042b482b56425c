"""A serving Triton whose model repository this user cannot write (a read-only file system;
tests/support/disks.py): `tracker promote` and `tracker watch --once` end with one line that
names the repository's lock file and the fix, and status 1, no traceback. Real Triton
(explicit model control, over the read-only folder), real sqlite registry and Optuna study."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import mlflow
import pytest
from click.testing import CliRunner

from tests.support import disks, models
from tests.support.deploy import NAME, V1, Study
from tracker.cli import cli
from tracker.deploy.publish import LOCK_FILE
from tracker.spec import ServerSection
from tracker.triton.server.local import LocalTritonServer

pytestmark = pytest.mark.triton
REG = "ro-reg"


@pytest.fixture()
def read_only_serving(tmp_path: Path, mlflow_uri: str,
                      monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    with disks.read_only_folder(tmp_path / "serving") as repo:
        server = LocalTritonServer(ServerSection(startup_timeout_s=60))
        with server:
            server.start(repo, explicit=True)
            monkeypatch.setenv("TRACKER_TRITON_URL", server.endpoints.grpc)
            monkeypatch.setenv("TRACKER_TRITON_REPOSITORY", str(repo))
            monkeypatch.setenv("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
            yield repo


def _error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def test_promote_and_watch_say_the_repository_is_not_writable(
        tmp_path: Path, mlflow_uri: str, read_only_serving: Path) -> None:
    study = Study(tmp_path, models.dynamic_batch(tmp_path / "tiny.onnx"), mlflow_uri)
    study.add(V1, 100.0)
    promoted = CliRunner().invoke(cli, ["promote", "--study", NAME, "--storage", study.storage,
                                        "--registered-model", REG, "--name", NAME])
    assert promoted.exit_code == 1, promoted.output
    line = _error_line(promoted.stderr)
    assert str(read_only_serving / LOCK_FILE) in line, line
    assert "Read-only file system" in line or "Permission denied" in line, line
    assert "writable" in line, line

    # the registry UI's alias edit, then one poll of the watcher: the same reason, status 1
    mlflow.MlflowClient().set_registered_model_alias(REG, "production", "1")
    watched = CliRunner().invoke(cli, ["watch", "--once", "--model", REG])
    assert watched.exit_code == 1, watched.output
    line = _error_line(watched.stderr)
    assert line.startswith("error: the poll failed: "), line
    assert str(read_only_serving / LOCK_FILE) in line, line
    assert list(read_only_serving.iterdir()) == []  # nothing was written
