"""Parent and child runs on a real MLflow sqlite store, and URL redaction."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow import MlflowClient

from tracker.errors import TrackingError
from tracker.measure.types import Measurement
from tracker.redact import redact_text, redact_url
from tracker.tracking import runs

PG = "postgresql://tuner:s3cr3t@db.example:5432/optuna"


def test_redact_url_hides_passwords_and_tokens_only() -> None:
    assert redact_url(PG) == "postgresql://tuner:***@db.example:5432/optuna"
    assert redact_url("sqlite:////tmp/optuna.db") == "sqlite:////tmp/optuna.db"
    assert redact_url("https://h/api?token=abc&x=1") == "https://h/api?token=***&x=1"
    assert redact_url("not a url") == "not a url"
    text = redact_text(f"cannot connect to {PG} (host=db password=hunter2)")
    assert "s3cr3t" not in text and "hunter2" not in text and "db.example" in text


def _study(uri: str, **kw: object) -> runs.StudyRun:
    args: dict[str, object] = dict(tracking_uri=uri, experiment="exp", study_name="s",
                                   storage=PG, params={"storage": PG, "n_trials": 3})
    args.update(kw)
    return runs.open_study_run(**args)  # type: ignore[arg-type]


def test_parent_and_child_runs(mlflow_uri: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
    study = _study(mlflow_uri)
    client = MlflowClient(mlflow_uri)
    parent = client.get_run(study.run_id)
    assert parent.data.tags[runs.ROLE] == "study"
    assert parent.data.params["storage"] == "postgresql://tuner:***@db.example:5432/optuna"
    assert "s3cr3t" not in str(parent.data.tags)

    child = runs.start_trial_run(study, 7, {"instance_group.count": 2})
    sweep = [Measurement(concurrency=c, throughput=100.0 * c, latency_p99_ms=float(c))
             for c in (1, 2, 4)]
    runs.log_metrics(client, child, sweep[1].metrics(), step=2,
                     extra=runs.sweep_metrics(sweep))
    runs.log_files(client, child, {"config.pbtxt": 'name: "m"\n', "perf.csv": "a,b\n"})
    runs.finish_run(client, child, "FINISHED", state="COMPLETE")

    got = client.get_run(child)
    assert got.info.run_name == "trial-7" and got.info.status == "FINISHED"
    assert got.data.tags[runs.PARENT_TAG] == study.run_id
    assert got.data.tags[runs.STATE] == "COMPLETE"
    assert got.data.params == {"instance_group.count": "2"}
    assert got.data.metrics["perf_throughput"] == 200.0
    history = client.get_metric_history(child, "sweep/perf_throughput")
    assert sorted((m.step, m.value) for m in history) == [(1, 100.0), (2, 200.0), (4, 400.0)]
    names = {a.path for a in client.list_artifacts(child)}
    assert names == {"config.pbtxt", "perf.csv"}
    assert runs.read_file(client, child, "perf.csv") == b"a,b\n"  # what log_files wrote
    with pytest.raises(TrackingError, match=f"check/reference.npz of run {child}"):
        runs.read_file(client, child, "check/reference.npz")  # a reference never stored


def test_mlflow_run_id_is_the_parent(mlflow_uri: str, monkeypatch: pytest.MonkeyPatch) -> None:
    client = MlflowClient(mlflow_uri)
    exp = client.create_experiment("project")
    outer = client.create_run(exp).info.run_id
    monkeypatch.setenv("MLFLOW_RUN_ID", outer)
    study = _study(mlflow_uri, run_name="s")
    assert study.run_id == outer and study.experiment_id == exp
    assert client.get_run(outer).info.run_name == "s"  # MLflow's made-up name is replaced
    named = client.create_run(exp, run_name="my run").info.run_id
    monkeypatch.setenv("MLFLOW_RUN_ID", named)
    _study(mlflow_uri, run_name="s")
    assert client.get_run(named).info.run_name == "my run"  # a name the user gave stays
    child = runs.start_trial_run(study, 0, {})
    assert client.get_run(child).info.experiment_id == exp


def test_rerun_adopts_the_earlier_trials(mlflow_uri: str, monkeypatch: pytest.MonkeyPatch,
                                         tmp_path: Path) -> None:
    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
    client = MlflowClient(mlflow_uri)
    first = _study(mlflow_uri)
    kids = [runs.start_trial_run(first, n, {}) for n in range(2)]
    runs.finish_run(client, kids[0], "FINISHED")
    assert runs.mark_unfinished(client, kids, "KILLED") == 1
    runs.finish_run(client, first.run_id, "KILLED")

    second = _study(mlflow_uri)
    assert second.run_id != first.run_id and second.adopted == 2
    assert sorted(runs.children(client, second.experiment_id, second.run_id)) == sorted(kids)
    assert client.get_run(first.run_id).data.tags[runs.SUPERSEDED_BY] == second.run_id
    # another study in the same experiment is left alone
    other = _study(mlflow_uri, study_name="other")
    assert other.adopted == 0
