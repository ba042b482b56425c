"""A study outlives its tracking server: a real `mlflow server` (sqlite, artifacts served by
it) stopped in the middle of `tracker tune` and started again on the same port and store.

One server serves the module (one xdist unit: tests/conftest.py splits by file). Outages are
started when a given trial's run appears in MLflow, not after a guessed time."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from mlflow import MlflowClient
from optuna.trial import TrialState

from tests.support.mlflow_restart import RestartableMlflow
from tests.support.postgres import ServiceUnavailable
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
from tracker import tags
from tracker.cli import cli
from tracker.tracking import outbox

pytestmark = pytest.mark.triton

SPACE = {"instance_group.count": [1, 2], "max_batch_size": [1, 4, 8]}


@pytest.fixture(scope="module")
def tracking() -> Iterator[RestartableMlflow]:
    server = RestartableMlflow()
    try:
        server.start()
    except ServiceUnavailable as exc:
        server.close()
        pytest.skip(f"mlflow server unavailable: {exc}")
    yield server
    left = server.close()
    if left:
        pytest.fail(f"mlflow server processes survived stop: {left}", pytrace=False)


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_quickstart(tmp_path_factory.mktemp("quickstart"))


def _env(tmp: Path, uri: str) -> dict[str, str]:
    return {**env_for(tmp), "MLFLOW_TRACKING_URI": uri, "PYTHONFAULTHANDLER": "1"}


class _Tune:
    """`tracker tune` in the background, its output in files."""

    def __init__(self, spec: Path, cwd: Path, env: dict[str, str], name: str) -> None:
        self.out, self.err = cwd / f"{name}.out", cwd / f"{name}.err"
        with open(self.out, "w") as out, open(self.err, "w") as err:
            self.proc = subprocess.Popen([TRACKER, "tune", str(spec), "--no-bar"], cwd=cwd,
                                         env=env, stdout=out, stderr=err)

    def text(self) -> str:
        return self.out.read_text() + self.err.read_text()

    def finish(self, timeout_s: float) -> int:
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.send_signal(signal.SIGABRT)  # PYTHONFAULTHANDLER: its stacks
            self.proc.wait(timeout=30)
            pytest.fail(f"tracker tune did not end in {timeout_s:g} s:\n{self.text()[-8000:]}")

    def kill(self) -> None:
        pid = self.proc.pid
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for server in owned_servers(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(server, signal.SIGKILL)


def _trial_runs(uri: str, study: str) -> dict[int, Any]:
    return {int(r.data.tags[tags.TRIAL]): r for r in all_runs(uri)
            if r.data.tags.get(tags.ROLE) == "trial" and r.data.tags.get(tags.STUDY) == study}


def _run_of(uri: str, study: str, number: int) -> bool:
    return number in _trial_runs(uri, study)


def _outage(server: RestartableMlflow, tune: _Tune, study: str, number: int,
            down_s: float) -> None:
    """Stop the server once trial ``number``'s run is in MLflow; start it ``down_s`` later."""
    wait_for(lambda: _run_of(server.uri, study, number), 300,
             f"trial {number}'s run in MLflow", tune.proc)
    server.stop()
    time.sleep(down_s)
    server.start()


def _assert_recorded(uri: str, storage: str, study: str, n_trials: int) -> None:
    """Every trial COMPLETE in Optuna has a FINISHED run with its metrics and config.pbtxt;
    no run of the server is left RUNNING."""
    complete = [t.number for t in trials(storage, study) if t.state == TrialState.COMPLETE]
    assert len(complete) >= n_trials
    found = _trial_runs(uri, study)
    client = MlflowClient(uri)
    for number in complete:
        run = found[number]
        assert run.info.status == "FINISHED", number
        assert "perf_throughput" in run.data.metrics, number
        names = {a.path for a in client.list_artifacts(run.info.run_id)}
        assert "config.pbtxt" in names, (number, names)
    assert [r.info.run_name for r in all_runs(uri) if r.info.status == "RUNNING"] == []


def test_study_waits_through_a_15_s_and_a_90_s_outage(tmp_path: Path, model: Path,
                                                       tracking: RestartableMlflow) -> None:
    """Down for 15 s while trial 1 is measured, for 90 s while trial 4 is: the study waits,
    saying so, and completes its 6 trials with exit 0, each run whole."""
    spec = write_spec(tmp_path, model, SPACE, n_trials=6, name="outage")
    tune = _Tune(spec, tmp_path, _env(tmp_path, tracking.uri), "tune")
    try:
        _outage(tracking, tune, "outage", 1, 15)
        _outage(tracking, tune, "outage", 4, 90)
        rc = tune.finish(600)
    finally:
        tune.kill()
        if tracking.proc is None:
            tracking.start()
    out = tune.text()
    assert rc == 0, out[-4000:]
    assert f"MLflow at {tracking.uri} does not answer; waiting (" in out
    assert f"MLflow at {tracking.uri} answers again after" in out
    _assert_recorded(tracking.uri, f"sqlite:///{tmp_path / 'optuna.db'}", "outage", 6)
    assert outbox.pending(tmp_path / outbox.folder("outage")) == []


def test_an_outage_past_the_wait_stops_and_the_next_run_writes_what_was_kept(
        tmp_path: Path, model: Path, tracking: RestartableMlflow,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``mlflow.wait_s: 5`` and the server down from trial 1 on: the study stops with one
    line naming the kept records and the command; `tracker promote` meanwhile fails fast
    naming the server; the same command, once it is back, writes them and completes."""
    # 1 s windows: trial 1 is still being measured when the server is stopped
    spec = write_spec(tmp_path, model, SPACE, n_trials=3, name="kept",
                      load={"window_ms": 1000}, mlflow={"wait_s": 5})
    env = _env(tmp_path, tracking.uri)
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    kept = tmp_path / outbox.folder("kept")
    tune = _Tune(spec, tmp_path, env, "tune")
    try:
        wait_for(lambda: _run_of(tracking.uri, "kept", 1), 300, "trial 1's run", tune.proc)
        tracking.stop()
        rc = tune.finish(300)
        monkeypatch.chdir(tmp_path)  # in this process: the time is the command's, no imports
        monkeypatch.setenv("MLFLOW_TRACKING_URI", tracking.uri)
        started = time.monotonic()
        promote = CliRunner().invoke(cli, ["promote", str(spec), "--force", "--no-deploy"])
        promote_s = time.monotonic() - started
        shutil.copytree(kept, tmp_path / "kept-copy")
    finally:
        tune.kill()
        tracking.start()
    errors = [line for line in tune.err.read_text().splitlines() if line.startswith("error:")]
    assert rc == 1 and len(errors) == 1, tune.text()[-4000:]
    assert f"MLflow at {tracking.uri} did not answer for" in errors[0]
    assert (f"trial 1's records and the study run's end kept in {outbox.folder('kept')}"
            in errors[0])
    assert "run `tracker tune study.yaml` when it answers again" in errors[0]
    assert [t.state for t in trials(storage, "kept")][:2] == [TrialState.COMPLETE] * 2
    assert promote.exit_code == 1 and promote_s < 20, (promote_s, promote.output)
    assert f"MLflow at {tracking.uri} does not answer" in promote.stderr

    done = subprocess.run([TRACKER, "tune", str(spec), "--no-bar"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert ("wrote what was kept to MLflow: trial 1's records and the study run's end"
            in done.stdout)
    assert outbox.pending(kept) == []
    _assert_recorded(tracking.uri, storage, "kept", 3)

    # written twice: nothing doubles
    client = MlflowClient(tracking.uri)
    run_id = _trial_runs(tracking.uri, "kept")[1].info.run_id
    before = (len(all_runs(tracking.uri)),
              len(client.get_metric_history(run_id, "sweep/perf_throughput")))
    assert outbox.replay(client, tmp_path / "kept-copy", print) >= 1
    assert (len(all_runs(tracking.uri)),
            len(client.get_metric_history(run_id, "sweep/perf_throughput"))) == before
