"""MLflow side of several workers on one study (docs/scale-out.md).

- All workers log their trials under ONE parent run: the first worker opens it and records its
  id on the Optuna study (the runner does this under the storage lock); the others join it with
  :func:`attach_study_run` while it is RUNNING. A finished parent (an earlier invocation that
  ended) is not joined: the runner opens a new one, which adopts the earlier children.
- Each child run carries the worker's tags (``worker.host``, ``worker.gpu``, ``worker.pid``,
  ``worker.id``; search/storage.py ``Worker.tags``).
- A worker killed with SIGKILL leaves its trial RUNNING in Optuna and its child run RUNNING in
  MLflow. The worker that finds the trial stale (heartbeat older than the grace period) calls
  :func:`fail_dead_trial_run` from the storage's stale-trial hook: the child run ends FAILED
  with a note naming the dead worker, before the trial's parameters are retried.
"""

from __future__ import annotations

from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from tracker import tags
from tracker.tracking import patience
from tracker.tracking.runs import NOTE_TAG, ROLE, STATE, STUDY, StudyRun, set_tags

PARENT_RUN_ATTR = "mlflow_parent_run_id"  # Optuna study user attribute: the shared parent
DEAD_WORKER_TAG = tags.DEAD_WORKER
WORKER_ROLE = "worker"


def attach_study_run(tracking_uri: str, run_id: str, study_name: str) -> StudyRun | None:
    """The study's parent run ``run_id`` to log into, when it is still RUNNING and belongs to
    ``study_name``; None when it is gone, ended, or another study's (open a new one then)."""
    client = patience.client(tracking_uri)
    try:
        run = client.get_run(run_id)
    except MlflowException:
        return None
    if run.info.status != "RUNNING" or run.info.lifecycle_stage == "deleted":
        return None
    if run.data.tags.get(STUDY) != study_name:
        return None
    return StudyRun(client, run_id, str(run.info.experiment_id), study_name)


def fail_dead_trial_run(client: MlflowClient, run_id: str | None, *, trial_number: int,
                        worker: str | None) -> bool:
    """End a dead worker's child run FAILED (tags ``tracker.state=FAIL``,
    ``tracker.dead_worker``, a note). True when the run was RUNNING and is now FAILED; a run
    that is missing or already ended is left alone (False)."""
    if not run_id:
        return False
    try:
        if client.get_run(run_id).info.status != "RUNNING":
            return False
    except MlflowException:
        return False
    who = worker or "an unknown worker"
    set_tags(client, run_id, {
        STATE: "FAIL", DEAD_WORKER_TAG: who,
        NOTE_TAG: (f"Trial {trial_number}: worker {who} stopped sending heartbeats (killed or "
                   "lost); another worker failed the trial and queued its parameters again."),
    })
    client.set_terminated(run_id, "FAILED")
    return True


def mark_worker_run(study: StudyRun, run_id: str, worker_tags: dict[str, str]) -> None:
    """Under ``mlflow run`` a second worker gets its own run from MLflow while its trials go
    under the shared parent: tag that run as a worker run pointing at the parent (not nested
    under it, so the parent's children stay the study's trials)."""
    set_tags(study.client, run_id, {ROLE: WORKER_ROLE, STUDY: study.study_name,
                                    tags.STUDY_RUN_ID: study.run_id, **worker_tags,
                                    NOTE_TAG: f"Worker of study {study.study_name}; its trials "
                                              f"are children of run {study.run_id}."})
