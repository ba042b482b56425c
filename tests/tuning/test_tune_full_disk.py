"""A disk that fills up in the middle of a study (the artifact store: a real tmpfs, filled to
its last byte while trial 0 ends; tests/support/disks.py): `tracker tune` stops with one line
naming the path and the fix, status 1, no traceback; once space is freed, the same command
resumes the study and completes it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from optuna.trial import TrialState

from tests.support import disks
from tests.support.tune import (
    TRACKER,
    all_runs,
    build_quickstart,
    env_for,
    trials,
    wait_for,
    write_spec,
)

pytestmark = [pytest.mark.triton, pytest.mark.slow]
FIX = "free space on that disk and run the same command again: the study resumes"


def _done(storage: str, number: int) -> bool:
    try:
        return any(t.number == number and t.state.is_finished() for t in trials(storage))
    except Exception:  # the study does not exist yet
        return False


def test_a_full_disk_stops_the_study_in_one_line_and_the_same_command_resumes(
        tmp_path: Path) -> None:
    model = build_quickstart(tmp_path)
    spec = write_spec(tmp_path, model, {"instance_group.count": [1, 2, 3]}, n_trials=3)
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    env = env_for(tmp_path)
    cmd = [TRACKER, "tune", str(spec), "--no-bar"]
    # MLflow's default artifact root for a sqlite store: ./mlruns, in the folder of the command
    with disks.full_folder(tmp_path / "mlruns", size_kib=64 * 1024) as store:
        proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        try:
            wait_for(lambda: _done(storage, 0), 300, "trial 0 to finish", proc)
            disks.fill(store)
            out, err = proc.communicate(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        assert proc.returncode == 1, out[-2000:] + err[-3000:]
        assert "Traceback" not in err, err[-3000:]
        errors = [line for line in err.splitlines() if line.startswith("error: ")]
        assert len(errors) == 1, err[-3000:]
        assert str(store) in errors[0] and "No space left on device" in errors[0], errors[0]
        assert errors[0].endswith(FIX), errors[0]

        disks.free(store)
        done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    complete = [t for t in trials(storage) if t.state == TrialState.COMPLETE]
    assert len([t for t in complete if "duplicate_of" not in t.user_attrs]) == 3
    assert [r.info.run_name for r in all_runs(env["MLFLOW_TRACKING_URI"])
            if r.info.status == "RUNNING"] == []
