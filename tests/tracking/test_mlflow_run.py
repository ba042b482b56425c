"""Where the study's (or profile's) run goes under `mlflow run` (tracker/tracking/mlflow_run.py),
on a real sqlite MLflow store: `mlflow run`'s own run is made the way MLflow makes it."""

from __future__ import annotations

import pytest
from mlflow import MlflowClient

from tracker import tags
from tracker.errors import TrackingError
from tracker.tracking import mlflow_run


def _mlflow_run(client: MlflowClient, experiment_id: str,
                monkeypatch: pytest.MonkeyPatch) -> str:
    """A run as `mlflow run` leaves it before the entry point starts (params, source tags)."""
    run_id: str = client.create_run(experiment_id, tags={"mlflow.source.git.commit": "abc123",
                                                    "mlflow.project.entryPoint": "main"}
                               ).info.run_id
    client.log_param(run_id, "spec", "projects/quickstart/study.yaml")
    client.log_param(run_id, "n_trials", "2")
    monkeypatch.setenv("MLFLOW_RUN_ID", run_id)
    return run_id


def test_not_under_mlflow_run_a_new_run(mlflow_uri: str,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
    assert mlflow_run.place(MlflowClient(mlflow_uri), "quickstart") == mlflow_run.Placement(
        "", None, "")


def test_in_the_specs_experiment_it_is_the_run(mlflow_uri: str,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    client = MlflowClient(mlflow_uri)
    own = _mlflow_run(client, client.create_experiment("quickstart"), monkeypatch)
    assert mlflow_run.place(client, "quickstart") == mlflow_run.Placement(own, None, "")


def test_an_experiment_the_user_chose_wins_and_is_said(mlflow_uri: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    client = MlflowClient(mlflow_uri)
    own = _mlflow_run(client, client.create_experiment("mine"), monkeypatch)
    placed = mlflow_run.place(client, "quickstart")
    assert placed.run_id == own and placed.launcher is None
    assert placed.note == (f"note: the study's run is `mlflow run`'s run {own} in experiment "
                           "'mine', the one `mlflow run` was given, not the spec's 'quickstart'")


def test_in_default_a_new_run_in_the_specs_experiment_and_a_pointer(
        mlflow_uri: str, monkeypatch: pytest.MonkeyPatch) -> None:
    client = MlflowClient(mlflow_uri)
    own = _mlflow_run(client, "0", monkeypatch)
    placed = mlflow_run.place(client, "quickstart", what="profile")
    assert placed.run_id == "" and placed.launcher == own
    assert "the profile's run is a new run in the spec's experiment 'quickstart'" in placed.note
    # made beside Default's artifacts (the caller's mlruns/), not in the project's ./mlruns
    default, exp = client.get_experiment("0"), client.get_experiment_by_name("quickstart")
    assert exp is not None
    assert exp.artifact_location == default.artifact_location.removesuffix("0") + "quickstart"
    target = client.create_run(exp.experiment_id).info.run_id
    client.log_param(target, "n_trials", "2")  # already there: kept, not logged twice
    mlflow_run.point_at(client, own, target, study="quickstart", note=placed.note)
    got, mine = client.get_run(target).data, client.get_run(own).data
    assert got.params == {"spec": "projects/quickstart/study.yaml", "n_trials": "2"}
    assert got.tags["mlflow.source.git.commit"] == "abc123"
    assert got.tags["mlflow.project.entryPoint"] == "main"
    assert got.tags[tags.LAUNCHER] == own
    assert mine.tags[tags.ROLE] == "launcher" and mine.tags[tags.STUDY_RUN_ID] == target
    assert mine.tags[tags.NOTE] == placed.note.removeprefix("note: ")


def test_a_run_id_mlflow_does_not_know_is_one_message(mlflow_uri: str,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_RUN_ID", "0" * 32)
    with pytest.raises(TrackingError, match="could not find the run of `mlflow run`"):
        mlflow_run.place(MlflowClient(mlflow_uri), "quickstart")
