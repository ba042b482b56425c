"""tracker/tracking/scaleout.py against a real `mlflow server` process: joining the shared
parent run, and ending a dead worker's child run FAILED."""

from __future__ import annotations

import pytest
from mlflow import MlflowClient

from tracker.tracking.runs import PARENT_TAG, STATE, finish_run, open_study_run, start_trial_run
from tracker.tracking.scaleout import (
    DEAD_WORKER_TAG,
    attach_study_run,
    fail_dead_trial_run,
    mark_worker_run,
)

pytestmark = pytest.mark.slow  # the session's mlflow server takes ~10 s to start


def test_workers_join_the_running_parent_only(mlflow_server, monkeypatch) -> None:
    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
    parent = open_study_run(tracking_uri=mlflow_server.uri, experiment="scaleout-join",
                            study_name="s1", storage="postgresql://u:pw@db/optuna")
    joined = attach_study_run(mlflow_server.uri, parent.run_id, "s1")
    assert joined is not None
    assert (joined.run_id, joined.experiment_id) == (parent.run_id, parent.experiment_id)
    child = start_trial_run(joined, 0, {"max_batch_size": 4}, tags={"worker.gpu": "1"})
    client = MlflowClient(mlflow_server.uri)
    assert client.get_run(child).data.tags[PARENT_TAG] == parent.run_id
    assert attach_study_run(mlflow_server.uri, parent.run_id, "another-study") is None
    assert attach_study_run(mlflow_server.uri, "0" * 32, "s1") is None
    finish_run(client, child, "FINISHED", state="COMPLETE")
    finish_run(client, parent.run_id, "FINISHED")
    assert attach_study_run(mlflow_server.uri, parent.run_id, "s1") is None  # ended: open anew

    own = client.create_run(parent.experiment_id).info.run_id
    mark_worker_run(joined, own, {"worker.host": "n2"})
    tags = client.get_run(own).data.tags
    assert tags["tracker.role"] == "worker" and tags["tracker.study_run_id"] == parent.run_id
    assert PARENT_TAG not in tags


def test_dead_workers_child_run_ends_failed(mlflow_server, monkeypatch) -> None:
    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
    parent = open_study_run(tracking_uri=mlflow_server.uri, experiment="scaleout-dead",
                            study_name="s2", storage="sqlite:///o.db")
    child = start_trial_run(parent, 3, {"instance_group.count": 2})
    client = MlflowClient(mlflow_server.uri)
    assert fail_dead_trial_run(client, child, trial_number=3, worker="node-1:4242")
    run = client.get_run(child)
    assert run.info.status == "FAILED"
    assert run.data.tags[STATE] == "FAIL" and run.data.tags[DEAD_WORKER_TAG] == "node-1:4242"
    assert "node-1:4242 stopped sending heartbeats" in run.data.tags["mlflow.note.content"]
    # already ended, unknown or absent: left alone
    assert not fail_dead_trial_run(client, child, trial_number=3, worker="node-1:4242")
    assert not fail_dead_trial_run(client, "f" * 32, trial_number=3, worker=None)
    assert not fail_dead_trial_run(client, None, trial_number=3, worker=None)
