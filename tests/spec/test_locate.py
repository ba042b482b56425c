"""Where a spec given on the command line is found (tracker/spec/locate.py): the current
folder (under `mlflow run`, the project's), then the folder `mlflow run` was started in."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from tracker.cli import cli
from tracker.spec import load_spec
from tracker.spec.locate import CALLER_DIR_ENV, SpecNotFoundError, locate_spec

SPEC = "model: {name: m, path: model.onnx}\n"


@pytest.fixture()
def folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """(the project folder, the current one; the caller's folder, TRACKER_CALLER_DIR)."""
    project, caller = tmp_path / "project", tmp_path / "caller"
    project.mkdir()
    caller.mkdir()
    monkeypatch.chdir(project)
    monkeypatch.setenv(CALLER_DIR_ENV, str(caller))
    monkeypatch.setenv("MLFLOW_RUN_ID", "0123")
    return project, caller


def test_the_project_folder_first_then_the_callers(folders: tuple[Path, Path]) -> None:
    project, caller = folders
    (caller / "mine.yaml").write_text(SPEC)
    spec = load_spec("mine.yaml")
    assert spec.source == caller / "mine.yaml" and spec.model.path == caller / "model.onnx"
    (project / "mine.yaml").write_text(SPEC)
    assert locate_spec("mine.yaml") == project / "mine.yaml"


def test_the_same_name_in_both_says_which_was_used(folders: tuple[Path, Path],
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    project, caller = folders
    (project / "s.yaml").write_text(SPEC)
    (caller / "s.yaml").write_text(SPEC)
    assert locate_spec("s.yaml") == project / "s.yaml"
    assert capsys.readouterr().err == ""  # the same file twice: nothing to say
    (caller / "s.yaml").write_text(SPEC + "# mine\n")
    assert locate_spec("s.yaml") == project / "s.yaml"
    assert capsys.readouterr().err == (f"note: spec s.yaml: using {project / 's.yaml'} (the "
                                       f"project folder `mlflow run` runs in), not "
                                       f"{caller / 's.yaml'}; give an absolute path to use "
                                       "the other\n")


def test_found_nowhere_is_one_line_naming_each_place(folders: tuple[Path, Path],
                                                     tmp_path: Path) -> None:
    project, caller = folders
    result = CliRunner().invoke(cli, ["check", "no/such.yaml"])
    assert result.exit_code == 1
    assert result.stderr == (f"error: spec file not found: no/such.yaml; looked in {project} "
                             f"(the project folder `mlflow run` runs in) and in {caller} (the "
                             "folder `mlflow run` was started in)\n")
    with pytest.raises(SpecNotFoundError, match=r"^spec file not found: /nope\.yaml$"):
        locate_spec("/nope.yaml")


def test_outside_mlflow_run_only_the_current_folder(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(CALLER_DIR_ENV, raising=False)
    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
    with pytest.raises(SpecNotFoundError) as err:
        locate_spec("s.yaml")
    assert str(err.value) == f"spec file not found: s.yaml; looked in {tmp_path} (the current " \
                             "folder)"
