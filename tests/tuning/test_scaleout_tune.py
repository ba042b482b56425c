"""Two `tracker tune` workers on one study, end to end: a real PostgreSQL for the Optuna study, a
real `mlflow server` process for tracking, a real Triton per worker (issue 7, docs/scale-out.md).

- two workers in parallel, 8 trials in total -> exactly 8 complete trials, no configuration
  measured twice, 8 finished child runs under one parent, each tagged with its worker;
- one worker SIGKILLed mid-trial -> its Triton dies with it, its trial is failed by the other
  worker's heartbeat check and retried, its child run ends FAILED, the study completes 8.

Both URLs carry real passwords; none may appear in any output, param or tag.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import optuna
import psutil
import pytest
import yaml
from mlflow import MlflowClient
from optuna.trial import TrialState

from tracker.search.storage import make_storage
from tracker.search.workers import budget
from tracker.spec import ensure_model, load_spec
from tracker.tracking import model_files

pytestmark = [pytest.mark.postgres, pytest.mark.triton, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "projects" / "quickstart"
N_TRIALS = 8
TRACKING_PASSWORD = "Tr4ckingPw"


def _spec(tmp_path: Path, experiment: str) -> Path:
    """The quickstart study with a tiny load: one concurrency level, short windows."""
    spec = {
        "model": {"name": "quickstart", "path": str(QUICKSTART / "model.onnx"),
                  "build": str(QUICKSTART / "make_model.py")},
        "server": {"mode": "local"},
        "load": {"concurrency": [4], "window_ms": 200, "max_tries": 3, "warmup_requests": 5},
        "objectives": {"perf_throughput": "maximize"},
        "search": {"sampler": "tpe", "n_trials": N_TRIALS, "seed": 7, "space": {
            "instance_group.count": [1, 2], "max_batch_size": [1, 8, 32],
            "dynamic_batching.max_queue_delay_microseconds": [0, 200]}},
        "mlflow": {"experiment": experiment},
        "confirm": {"enabled": False},
    }
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(spec))
    ensure_model(load_spec(path))  # once, before two workers could race to build it
    return path


class Worker:
    """One `tracker tune` process in its own process group, output to a file."""

    def __init__(self, tmp_path: Path, name: str, spec: Path, storage: str, study: str,
                 tracking_uri: str, *extra: str) -> None:
        self.log = tmp_path / f"{name}.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
        env.update(MLFLOW_TRACKING_URI=tracking_uri, PYTHONUNBUFFERED="1")
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tracker.cli", "tune", str(spec), "--storage", storage,
                 "--study-name", study, "--no-bar", *extra],
                cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True)
        self.id = f"{socket.gethostname()}:{self.proc.pid}"

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"worker did not finish in {timeout:.0f}s:\n{self.output()[-3000:]}")

    def tritons(self) -> list[psutil.Process]:
        try:
            kids = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []
        return [p for p in kids if _is_triton(p)]

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def _is_triton(proc: psutil.Process) -> bool:
    try:
        return proc.name() == "tritonserver"
    except psutil.Error:
        return False


@pytest.fixture()
def workers():
    started: list[Worker] = []
    yield started
    for w in started:  # a failed test must not leave workers (or their Tritons) behind
        w.kill()


def _tracking_uri(server) -> str:
    return server.uri.replace("http://", f"http://tuner:{TRACKING_PASSWORD}@")


def _load(url: str, name: str) -> optuna.Study:
    return optuna.load_study(study_name=name, storage=make_storage(url, heartbeat_interval=None))


def _runs(server, experiment: str, study: str):
    client = MlflowClient(server.uri)
    exp = client.get_experiment_by_name(experiment)
    assert exp is not None
    all_runs = client.search_runs([exp.experiment_id], max_results=1000)
    parents = [r for r in all_runs if r.data.tags.get("tracker.role") == "study"
               and r.data.tags.get("tracker.study") == study]
    assert len(parents) == 1, [r.info.run_id for r in parents]
    parent = parents[0]
    kids = [r for r in all_runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    return parent, kids


def _no_secrets(secrets: list[str], texts: list[str], runs) -> None:
    for run in runs:
        texts += [*run.data.params.values(), *run.data.tags.values()]
    for secret in secrets:
        leaks = [t[max(0, t.find(secret) - 60):t.find(secret) + 40] for t in texts if secret in t]
        assert not leaks, f"password leaked: {leaks[:3]}"


def test_two_workers_share_one_study(tmp_path, postgres, pg_url, mlflow_server, workers):
    spec = _spec(tmp_path, "scaleout-two")
    uri = _tracking_uri(mlflow_server)
    started = time.monotonic()
    for name, gpu in (("w0", "0"), ("w1", "1")):
        workers.append(Worker(tmp_path, name, spec, pg_url, "two", uri, "--gpus", gpu))
    codes = [w.wait(240) for w in workers]
    wall = time.monotonic() - started
    assert codes == [0, 0], [w.output()[-3000:] for w in workers]

    study = _load(pg_url, "two")
    counts = budget(study)
    assert (counts.complete, counts.running, counts.waiting) == (N_TRIALS, 0, 0), counts
    measured = [t for t in study.trials if t.user_attrs.get("measurements", 0) > 0]
    configs = [tuple(sorted(t.params.items())) for t in measured]
    assert len(configs) == len(set(configs)), ("a configuration was measured twice", [
        (t.number, t.user_attrs.get("baseline"), t.user_attrs.get("worker.id"), t.params)
        for t in measured])
    for t in study.get_trials(states=(TrialState.COMPLETE,)):
        assert t in measured or isinstance(t.user_attrs.get("duplicate_of"), int), t.number
    by_worker = {t.user_attrs.get("worker") for t in study.trials}
    assert by_worker == {w.id for w in workers}, "both workers must have run trials"

    parent, kids = _runs(mlflow_server, "scaleout-two", "two")
    assert parent.info.status == "FINISHED"
    finished = [r for r in kids if r.info.status == "FINISHED"]
    # a repeated configuration is a finished run too, but not counted against n_trials
    complete = study.get_trials(states=(TrialState.COMPLETE,))
    assert len(finished) == len(complete) and all(r.info.status != "RUNNING" for r in kids)
    assert {r.data.tags["worker.id"] for r in finished} == {w.id for w in workers}
    assert {r.data.tags["worker.gpu"] for r in finished} == {"0", "1"}
    assert all(r.data.tags["worker.host"] == socket.gethostname() for r in finished)
    # the model file is stored once for both workers: every measured trial names one upload
    stored = {r.data.tags.get(model_files.TAG_URI) for r in finished
              if "tracker.duplicate_of" not in r.data.tags}
    assert stored == {f"runs:/{parent.info.run_id}/{model_files.ARTIFACT_DIR}"}, stored
    assert study.user_attrs[model_files.STUDY_ATTR]["run_id"] == parent.info.run_id
    _no_secrets([postgres.password, TRACKING_PASSWORD], [w.output() for w in workers],
                [parent, *kids])
    print(f"two workers, {N_TRIALS} trials: {wall:.1f} s, "
          f"{len(measured)} measured, {N_TRIALS - len(measured)} reused")


def _running_trial_of(study_url: str, name: str, worker: Worker) -> optuna.trial.FrozenTrial:
    """Wait until ``worker`` has a RUNNING trial with its Triton up (mid-trial)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert worker.proc.poll() is None, worker.output()[-3000:]
        try:
            study = _load(study_url, name)
        except KeyError:  # the study is not created yet
            time.sleep(0.2)
            continue
        mine = [t for t in study.get_trials(states=(TrialState.RUNNING,))
                if t.user_attrs.get("worker") == worker.id and "mlflow_run_id" in t.user_attrs]
        if mine and worker.tritons():
            return mine[0]
        time.sleep(0.2)
    pytest.fail(f"worker never ran a trial:\n{worker.output()[-3000:]}")


def test_killed_worker_trial_is_reclaimed(tmp_path, postgres, pg_url, mlflow_server, workers):
    spec = _spec(tmp_path, "scaleout-killed")
    uri = _tracking_uri(mlflow_server)
    beats = ("--heartbeat-interval", "1", "--grace-period", "4")
    victim = Worker(tmp_path, "victim", spec, pg_url, "killed", uri, *beats)
    workers.append(victim)
    survivor = Worker(tmp_path, "survivor", spec, pg_url, "killed", uri, *beats)
    workers.append(survivor)

    trial = _running_trial_of(pg_url, "killed", victim)
    tritons = victim.tritons()
    os.kill(victim.proc.pid, signal.SIGKILL)  # the worker only: its Triton must follow it
    victim.proc.wait()
    killed_at = time.monotonic()
    gone = psutil.wait_procs(tritons, timeout=10)[1]
    assert not gone, f"the killed worker's Triton survived it: {[p.pid for p in gone]}"

    assert survivor.wait(240) == 0, survivor.output()[-3000:]
    study = _load(pg_url, "killed")
    dead = study.trials[trial.number]
    assert dead.state == TrialState.FAIL
    retried = [t for t in study.trials if t.system_attrs.get("failed_trial") == trial.number]
    assert len(retried) == 1, [t.system_attrs for t in study.trials]
    assert retried[0].state == TrialState.COMPLETE and retried[0].params == dead.params
    assert retried[0].user_attrs["worker"] == survivor.id
    counts = budget(study)
    assert (counts.complete, counts.running, counts.waiting) == (N_TRIALS, 0, 0), counts

    parent, kids = _runs(mlflow_server, "scaleout-killed", "killed")
    client = MlflowClient(mlflow_server.uri)
    dead_run = client.get_run(trial.user_attrs["mlflow_run_id"])
    assert dead_run.info.status == "FAILED"
    assert dead_run.data.tags["tracker.dead_worker"] == victim.id
    assert all(r.info.status != "RUNNING" for r in kids)
    complete = study.get_trials(states=(TrialState.COMPLETE,))  # repeats included
    assert sum(r.info.status == "FINISHED" for r in kids) == len(complete)
    assert parent.info.status == "FINISHED"
    _no_secrets([postgres.password, TRACKING_PASSWORD],
                [victim.output(), survivor.output()], [parent, *kids])
    print(f"killed worker: survivor done {time.monotonic() - killed_at:.1f} s after the kill")


def _first_complete(study_url: str, name: str, workers: list[Worker]) -> None:
    """Wait until the study has a COMPLETE trial (both workers are then mid-study)."""
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        for w in workers:
            assert w.proc.poll() is None, w.output()[-3000:]
        with contextlib.suppress(KeyError):  # the study is not created yet
            if _load(study_url, name).get_trials(states=(TrialState.COMPLETE,)):
                return
        time.sleep(0.2)
    pytest.fail(f"no trial completed:\n{workers[0].output()[-3000:]}")


def test_a_database_restart_mid_study_loses_no_trial(tmp_path, postgres, pg_url,
                                                     mlflow_server, workers):
    """PostgreSQL stopped (``-m fast``: every session ended) and started again 3 s later while
    two workers run: both wait for it (heartbeats every second make sure the outage is
    seen), the study completes its budget, nothing is failed or measured twice."""
    n_trials = 4
    spec = _spec(tmp_path, "scaleout-restart")
    uri = _tracking_uri(mlflow_server)
    beats = ("--heartbeat-interval", "1", "--grace-period", "15", "--n-trials", str(n_trials))
    for name in ("r0", "r1"):
        workers.append(Worker(tmp_path, name, spec, pg_url, "restart", uri, *beats))
    _first_complete(pg_url, "restart", workers)
    postgres.restart(down_s=3)
    codes = [w.wait(240) for w in workers]
    outputs = [w.output() for w in workers]
    assert codes == [0, 0], [o[-3000:] for o in outputs]
    assert any("does not answer; waiting up to 300 s (TRACKER_STORAGE_WAIT_S)" in o
               for o in outputs), [o[-2000:] for o in outputs]
    assert not any("Traceback" in o for o in outputs), [o[-3000:] for o in outputs]

    study = _load(pg_url, "restart")
    counts = budget(study)
    assert (counts.complete, counts.running, counts.waiting) == (n_trials, 0, 0), counts
    assert not study.get_trials(states=(TrialState.FAIL,))  # within the grace period
    measured = [t for t in study.trials if t.user_attrs.get("measurements", 0) > 0]
    configs = [tuple(sorted(t.params.items())) for t in measured]
    assert len(configs) == len(set(configs)), "a configuration was measured twice"
    parent, kids = _runs(mlflow_server, "scaleout-restart", "restart")
    assert parent.info.status == "FINISHED"
    assert all(r.info.status == "FINISHED" for r in kids), [r.info.status for r in kids]
    assert len(kids) == len(study.get_trials(states=(TrialState.COMPLETE,)))
    _no_secrets([postgres.password, TRACKING_PASSWORD], outputs, [parent, *kids])
