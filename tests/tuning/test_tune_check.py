"""`tracker tune` refuses what `tracker check` refuses, before anything is stored or measured,
with the same message and exit status (one function: tracker.tuning.preflight.check_study)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.support.models import multi_input
from tests.support.tune import write_spec
from tracker.cli import cli


def test_tune_refuses_what_check_refuses_before_any_trial(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # INPUT2 is [batch, seq, 3]: a variable dimension, and the spec gives no load.input_data
    spec = write_spec(tmp_path, multi_input(tmp_path / "model.onnx"),
                      {"instance_group.count": [1, 2]}, n_trials=3)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    runner = CliRunner()

    checked = runner.invoke(cli, ["check", str(spec)])
    tuned = runner.invoke(cli, ["tune", str(spec), "--no-bar"])

    assert checked.exit_code == tuned.exit_code == 1, (checked.output, tuned.output)
    assert "'INPUT2' has variable dims [-1, 3]" in checked.output
    assert tuned.output.endswith(checked.output)  # the same message (MLflow's own log before)
    assert not (tmp_path / "optuna.db").exists()  # no study, so no trial
    assert "Creating" not in checked.output and "MLflow parent run" not in tuned.output
    assert list((tmp_path / ".tracker" / "work").iterdir()) == []  # its work folder removed
