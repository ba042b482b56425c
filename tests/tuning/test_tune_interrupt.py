"""Ctrl-C and SIGTERM in the middle of a trial, then the same command resumes the study."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest
from optuna.trial import TrialState

from tests.support.tune import (
    TRACKER,
    all_runs,
    build_quickstart,
    env_for,
    owned_servers,
    trials,
    wait_for,
    write_spec,
)
from tracker.tracking import runs

pytestmark = pytest.mark.triton


def _measuring(storage: str, first: int, pid: int, seen: list[int]) -> bool:
    """A trial numbered >= ``first`` is RUNNING and a server was started for it (a duplicate
    of an earlier config is reused in no time and would not be interrupted)."""
    try:
        running = [t for t in trials(storage)
                   if t.number >= first and t.state == TrialState.RUNNING]
    except Exception:  # the study does not exist yet
        return False
    for trial in running:
        started = trial.datetime_start.timestamp() if trial.datetime_start else time.time()
        for server in owned_servers(pid):
            with contextlib.suppress(psutil.Error):
                # create_time rests on the boot time in whole seconds: allow 1 s
                if psutil.Process(server).create_time() >= started - 1.0:
                    seen.append(trial.number)
                    return True
    return False


def _interrupt(cmd: list[str], cwd: Path, env: dict[str, str], storage: str, first: int,
               sig: int) -> tuple[int, str, int, int]:
    """Run ``cmd``, send ``sig`` while a trial numbered >= ``first`` is being measured;
    (exit status, output, pid, the interrupted trial's number)."""
    # PYTHONFAULTHANDLER: a run that does not stop is sent SIGABRT, and the failure shows
    # where each of its threads was
    proc = subprocess.Popen(cmd, cwd=cwd, env={**env, "PYTHONFAULTHANDLER": "1"},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen: list[int] = []
    try:
        wait_for(lambda: _measuring(storage, first, proc.pid, seen), 180,
                 f"a trial >= {first} to be measured", proc)
        time.sleep(0.5)  # inside the trial: Triton starting or the sweep measuring
        proc.send_signal(sig)
        try:
            out, _ = proc.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)
            out, _ = proc.communicate(timeout=30)
            pytest.fail(f"{signal.Signals(sig).name} did not stop the run in 90 s; its "
                        f"output and stacks:\n{out[-12000:]}")
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        if proc.stdout is not None:  # not read when the wait failed: close it all the same
            proc.stdout.close()
    return proc.returncode, out, proc.pid, seen[-1]


def _check_clean_stop(uri: str, storage: str, number: int, pid: int) -> None:
    assert owned_servers(pid) == []
    got = {t.number: t for t in trials(storage)}
    cut = got[number]
    assert cut.state == TrialState.FAIL and cut.user_attrs["interrupted"] is True
    assert any(t.state == TrialState.WAITING and t.system_attrs.get("fixed_params") == cut.params
               for t in got.values())  # queued again: the rerun measures it first
    found = all_runs(uri)
    assert [r.info.run_name for r in found if r.info.status == "RUNNING"] == []
    killed = {r.info.run_id: r for r in found if r.info.status == "KILLED"}
    assert cut.user_attrs["mlflow_run_id"] in killed
    assert any(runs.PARENT_TAG not in r.data.tags for r in killed.values())  # the parent


def test_interrupt_and_resume_without_repeating_finished_trials(tmp_path: Path) -> None:
    model = build_quickstart(tmp_path)
    # 1 s windows: a trial the guided sweep starts at the best trial's level may measure one
    # level only, and must still last long enough to be caught in the middle
    spec = write_spec(tmp_path, model, {"instance_group.count": [1, 2, 3]}, n_trials=3,
                      load={"window_ms": 1000})
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    env = env_for(tmp_path)
    uri = env["MLFLOW_TRACKING_URI"]
    cmd = [TRACKER, "tune", str(spec), "--no-bar"]

    rc, out, pid, cut = _interrupt(cmd, tmp_path, env, storage, 1, signal.SIGINT)
    assert rc == 130, out
    assert "run the same command to resume" in out
    _check_clean_stop(uri, storage, cut, pid)

    first_cut = {t.number: t for t in trials(storage)}[cut].params
    rc, out, pid, cut = _interrupt(cmd, tmp_path, env, storage, cut + 1, signal.SIGTERM)
    assert rc == 143, out
    _check_clean_stop(uri, storage, cut, pid)
    second_cut = {t.number: t for t in trials(storage)}[cut].params

    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    got = trials(storage)
    complete = [t for t in got if t.state == TrialState.COMPLETE]
    # a repeated configuration completes too, but does not use up n_trials
    assert len([t for t in complete if "duplicate_of" not in t.user_attrs]) == 3
    # trial 0 (the default config) ran once; the interrupted config was measured on resume
    assert [t.number for t in complete if t.user_attrs.get("baseline")] == [0]
    measured = [tuple(t.params.items()) for t in complete if t.user_attrs["measurements"] > 0]
    assert len(measured) == len(set(measured))  # no configuration was measured twice
    assert {tuple(first_cut.items()), tuple(second_cut.items())} <= {
        tuple(t.params.items()) for t in complete}
    found = all_runs(uri)
    assert [r.info.run_name for r in found if r.info.status == "RUNNING"] == []
    parents = [r for r in found if runs.PARENT_TAG not in r.data.tags]
    final = [p for p in parents if p.info.status == "FINISHED"]
    assert len(final) == 1
    kids = [r for r in found if r.data.tags.get(runs.PARENT_TAG) == final[0].info.run_id]
    assert len(kids) == len(found) - len(parents)  # earlier trials moved under the last parent
    assert sum(k.info.status == "FINISHED" for k in kids) == len(complete)
