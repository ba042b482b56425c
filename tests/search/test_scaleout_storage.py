"""The shared study storage (tracker/search/storage.py, workers.py) against a real PostgreSQL:
bad URLs and passwords, the study-wide budget with two worker processes, a SIGKILLed worker's
trial reclaimed by heartbeat and retried, duplicates measured once, the cross-process lock.

The workers here are tests/support/scaleout_worker.py (the tuner's ask/tell loop with a sleep
in place of Triton); the same rules with `tracker tune` and Triton are in
tests/tuning/test_scaleout_tune.py.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from tracker.errors import StudyError
from tracker.search.storage import make_storage, safe_url, storage_lock, worker_identity
from tracker.search.workers import ask_within_budget, budget, wait_for_duplicate

REPO = Path(__file__).resolve().parents[2]
WORKER = REPO / "tests" / "support" / "scaleout_worker.py"


def _spawn(*args: object) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(WORKER), *map(str, args)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def _finish(proc: subprocess.Popen[str], timeout: float = 90) -> str:
    try:
        out, _ = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, out
    return out


def _study(url: str, name: str) -> optuna.Study:
    return optuna.load_study(study_name=name, storage=make_storage(url, heartbeat_interval=None))


# ---- URLs and passwords -------------------------------------------------------------------

@pytest.mark.parametrize("url, words", [
    ("just-a-name", "database URL"),
    ("redis://localhost:6379/0", "must be one of postgresql, mysql, sqlite"),
])
def test_bad_storage_url_is_a_study_error(url: str, words: str) -> None:
    with pytest.raises(StudyError, match=words):
        make_storage(url)


def test_unreachable_database_hides_the_password() -> None:
    url = "postgresql://tracker:Sup3rS3cret@127.0.0.1:1/optuna"
    with pytest.raises(StudyError) as err:
        make_storage(url)
    assert "Sup3rS3cret" not in str(err.value)
    assert "tracker:***@127.0.0.1:1/optuna" in str(err.value)
    assert "cannot open the study storage" in str(err.value)


@pytest.mark.postgres
def test_wrong_password_hides_both_passwords(postgres, pg_url: str) -> None:
    bad = pg_url.replace(postgres.password, "WrongPassw0rd")
    with pytest.raises(StudyError, match="password authentication failed") as err:
        make_storage(bad)
    assert "WrongPassw0rd" not in str(err.value)
    assert postgres.password not in str(err.value)


@pytest.mark.postgres
def test_password_from_pgpassword_keeps_it_out_of_the_url(postgres, pg_url: str,
                                                          monkeypatch) -> None:
    bare = pg_url.replace(f":{postgres.password}@", "@")
    monkeypatch.delenv("PGPASSWORD", raising=False)
    with pytest.raises(StudyError, match="no password supplied"):
        make_storage(bare)
    monkeypatch.setenv("PGPASSWORD", postgres.password)
    storage = make_storage(bare)
    assert optuna.create_study(storage=storage, study_name="pgpass").study_name == "pgpass"


def test_safe_url_and_argument_rules() -> None:
    assert safe_url("postgresql://u:p%40ss@h:5432/db") == "postgresql://u:***@h:5432/db"
    assert safe_url("sqlite:///optuna.db") == "sqlite:///optuna.db"
    with pytest.raises(StudyError, match="grace_period must be longer"):
        make_storage("sqlite://", heartbeat_interval=5, grace_period=5)
    with pytest.raises(StudyError, match="heartbeat_interval must be a positive"):
        make_storage("sqlite://", heartbeat_interval=0)


def test_worker_identity_prefers_the_spec_gpus() -> None:
    env = {"CUDA_VISIBLE_DEVICES": "3", "TRACKER_WORKER_HOST": "node-7"}
    assert worker_identity(None, env).tags()["worker.gpu"] == "3"
    me = worker_identity([0, 1], env)
    assert (me.host, me.gpus, me.pid) == ("node-7", "0,1", os.getpid())
    assert me.tags() == {"worker.host": "node-7", "worker.gpu": "0,1",
                         "worker.pid": str(os.getpid()), "worker.id": f"node-7:{os.getpid()}"}
    assert worker_identity(None, {}).gpus == "none"


# ---- several processes on one study ---------------------------------------------------------

@pytest.mark.postgres
def test_two_workers_share_one_budget_and_measure_each_config_once(pg_url: str) -> None:
    procs = [_spawn(pg_url, "shared", 8, 0.6) for _ in range(2)]
    outs = [_finish(p) for p in procs]
    study = _study(pg_url, "shared")
    counts = budget(study)
    assert (counts.complete, counts.running, counts.waiting, counts.failed) == (8, 0, 0, 0)
    assert all("asked" in out for out in outs), outs  # both workers took trials
    measured: list[str] = []
    for out in outs:
        asked = dict(re.findall(r"^asked (\d+) (\{.*\})$", out, re.M))
        measured += [asked[n] for n in re.findall(r"^measured (\d+)$", out, re.M)]
    assert len(measured) == len(set(measured)), f"a configuration was measured twice: {outs}"
    # x has 4 values: every trial beyond the distinct ones reused a result
    assert len(measured) == len({str(t.params) for t in study.trials})


@pytest.mark.postgres
def test_killed_worker_trial_is_failed_by_heartbeat_and_retried(pg_url: str) -> None:
    victim = _spawn(pg_url, "killed", 3, 60)
    assert victim.stdout is not None
    line = victim.stdout.readline()
    assert line.startswith("asked 0"), line
    os.killpg(victim.pid, signal.SIGKILL)
    victim.wait()
    victim.stdout.close()
    started = time.monotonic()
    out = _finish(_spawn(pg_url, "killed", 3, 0.2, 1, 2))
    study = _study(pg_url, "killed")
    first = study.trials[0]
    assert first.state == TrialState.FAIL
    assert f"stale 0 of {first.user_attrs['worker']}" in out
    retried = [t for t in study.trials if t.system_attrs.get("failed_trial") == 0]
    assert len(retried) == 1 and retried[0].state == TrialState.COMPLETE
    assert retried[0].params == first.params
    assert budget(study).complete == 3
    assert time.monotonic() - started < 30


def test_duplicate_waits_for_the_earlier_trial(tmp_path: Path) -> None:
    storage = make_storage(f"sqlite:///{tmp_path / 'o.db'}", heartbeat_interval=1)
    study = optuna.create_study(storage=storage, study_name="dup")
    for _ in range(3):
        study.enqueue_trial({"x": 1})
    first = ask_within_budget(study, storage, 10)
    second = ask_within_budget(study, storage, 10)
    assert first is not None and second is not None
    for trial in (first, second):
        trial.suggest_int("x", 0, 3)
    found: list[object] = []
    waiter = threading.Thread(target=lambda: found.append(
        wait_for_duplicate(study, second.number, second.params, poll_s=0.05)))
    waiter.start()
    time.sleep(0.3)
    assert waiter.is_alive(), "the later trial must wait for the running earlier one"
    assert wait_for_duplicate(study, first.number, first.params) is None  # the earlier measures
    study.tell(first, 5.0)
    waiter.join(5)
    assert [t.number for t in found] == [first.number]  # type: ignore[attr-defined]
    # a failed earlier trial: the later one measures itself
    third = ask_within_budget(study, storage, 10)
    assert third is not None
    third.suggest_int("x", 0, 3)
    study.tell(second, state=TrialState.FAIL)
    assert wait_for_duplicate(study, third.number, {"x": 2}) is None


def test_duplicate_waits_for_an_earlier_trial_still_being_suggested(tmp_path: Path) -> None:
    """The race seen with two workers: the later trial checks before the earlier one has its
    params; without waiting both would measure the same configuration."""
    storage = make_storage(f"sqlite:///{tmp_path / 'o.db'}", heartbeat_interval=1)
    study = optuna.create_study(storage=storage, study_name="race")
    study.enqueue_trial({"x": 2})
    study.enqueue_trial({"x": 2})
    first = ask_within_budget(study, storage, 10)
    second = ask_within_budget(study, storage, 10)
    assert first is not None and second is not None
    second.suggest_int("x", 0, 3)
    found: list[object] = []
    waiter = threading.Thread(target=lambda: found.append(
        wait_for_duplicate(study, second.number, second.params, poll_s=0.05)))
    waiter.start()
    time.sleep(0.3)
    assert waiter.is_alive(), "must wait while the earlier trial has no params yet"
    first.suggest_int("x", 0, 3)  # now it is a duplicate, and the earlier one measures
    time.sleep(0.2)
    assert waiter.is_alive()
    study.tell(first, 1.0)
    waiter.join(5)
    assert [t.number for t in found] == [first.number]  # type: ignore[attr-defined]


@pytest.mark.postgres
def test_storage_lock_excludes_other_connections(pg_url: str) -> None:
    storage = make_storage(pg_url)
    events: list[str] = []

    def hold(tag: str, seconds: float) -> None:
        with storage_lock(storage, "L"):
            events.append(f"{tag}+")
            time.sleep(seconds)
            events.append(f"{tag}-")

    first = threading.Thread(target=hold, args=("a", 0.5))
    first.start()
    time.sleep(0.1)
    hold("b", 0)
    first.join()
    assert events == ["a+", "a-", "b+", "b-"]
