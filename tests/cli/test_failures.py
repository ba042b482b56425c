"""What reaches the command line's boundary: an OSError (a read-only or full disk) is one line
naming the path and the fix, exit 1; a signal that stopped a deployment is one line and
128 + its number; MLflow's HTTP retries are bounded while a command runs, unless the user set
them. Real file systems (tests/support/disks.py), the real ``tracker`` group."""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from tests.support import disks
from tracker.cli import cli
from tracker.cli.group import _Group, os_error_line
from tracker.cli.params import MLFLOW_HTTP_DEFAULTS
from tracker.lifecycle import Interrupted


def _one_error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    assert "Traceback" not in stderr
    return lines[0]


def test_a_read_only_path_is_one_line_with_the_path_and_the_fix(tmp_path: Path) -> None:
    with disks.read_only_folder(tmp_path / "ro") as folder:
        result = CliRunner().invoke(cli, ["serve", str(folder / "serving")])
        assert result.exit_code == 1, result.output
        line = _one_error_line(result.stderr)
        assert f"{folder / 'serving'}: " in line
        assert "choose another path" in line and "make it writable" in line
        # --debug keeps the traceback: the OSError itself
        debug = CliRunner().invoke(cli, ["--debug", "serve", str(folder / "serving")])
        assert isinstance(debug.exception, OSError)


def test_a_full_disk_names_the_destination_and_says_the_command_resumes(
        tmp_path: Path) -> None:
    source = tmp_path / "source"
    source.mkdir()
    (source / "perf.csv").write_text("x" * 100_000)
    with disks.full_folder(tmp_path / "full") as full:
        disks.fill(full)
        with pytest.raises(OSError) as copied:  # a whole folder: shutil.Error, a list
            shutil.copytree(source, full / "copy")
        with pytest.raises(OSError) as single:  # one file: the source and the destination
            shutil.copyfile(source / "perf.csv", full / "perf.csv")
    for exc, path in ((copied.value, full / "copy" / "perf.csv"),
                      (single.value, full / "perf.csv")):
        line = os_error_line(exc)
        assert line.startswith(f"{path}: "), line
        assert "No space left on device" in line and "\n" not in line
        assert line.endswith("free space on that disk and run the same command again: "
                             "the study resumes"), line


def _probe_group() -> click.Group:
    """A group of the ``tracker`` kind with commands that show what a command sees."""

    @click.group(cls=_Group)
    def group() -> None:
        pass

    @group.command("env")
    def env() -> None:
        click.echo(" ".join(f"{k}={os.environ.get(k, '-')}" for k in MLFLOW_HTTP_DEFAULTS))

    @group.command("interrupted")
    def interrupted() -> None:
        raise Interrupted(signal.SIGTERM)

    return group


def test_mlflow_retries_are_bounded_unless_the_user_set_them(
        monkeypatch: pytest.MonkeyPatch) -> None:
    for key in MLFLOW_HTTP_DEFAULTS:
        monkeypatch.delenv(key, raising=False)
    seen = CliRunner().invoke(_probe_group(), ["env"])
    assert seen.exit_code == 0, seen.output
    assert seen.output.split() == [f"{k}={v}" for k, v in MLFLOW_HTTP_DEFAULTS.items()]
    assert not any(k in os.environ for k in MLFLOW_HTTP_DEFAULTS)  # gone after the command

    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "7")  # the user's value wins
    seen = CliRunner().invoke(_probe_group(), ["env"])
    assert "MLFLOW_HTTP_REQUEST_MAX_RETRIES=7" in seen.output.split()
    assert f"MLFLOW_HTTP_REQUEST_TIMEOUT={MLFLOW_HTTP_DEFAULTS['MLFLOW_HTTP_REQUEST_TIMEOUT']}" \
        in seen.output.split()
    assert os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == "7"


def test_a_signal_that_stopped_a_deployment_is_one_line_and_its_status() -> None:
    result = CliRunner().invoke(_probe_group(), ["interrupted"])
    assert result.exit_code == 128 + signal.SIGTERM
    assert result.stderr.strip() == "stopped by SIGTERM"
