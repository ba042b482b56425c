"""A measurement that fails says why, all the way to the user: the levels' own reasons (error
share and first error) and the server log's last error lines reach `tracker profile`'s error,
the failed trial's note (Optuna fail_reason and the MLflow run's description) and the
progress line. The failure is real: a shim whose stub process crashes on every request."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from mlflow import MlflowClient
from optuna.trial import TrialState

from tests.support.tune import build_quickstart, trials, write_spec
from tracker.cli import cli
from tracker.session.context import TuneOptions
from tracker.session.measured import log_errors
from tracker.workflow.tune import tune

# the stub process dies inside execute(): Triton answers "Stub process ... is not healthy",
# logs an error line and restarts the stub, which dies again on the next request
CRASHING_SHIM = '''
import ctypes


class TritonPythonModel:
    def initialize(self, args):
        pass

    def execute(self, requests):
        ctypes.string_at(0)  # a segmentation fault in the stub process
'''

LOG = """I1201 08:00:13.9 1 server.cc:674] Model READY
Error: Failed to initialize NVML
W1201 08:00:13.9 1 metrics.cc:798] "DCGM unable to start: DCGM initialization error"
E1201 08:00:14.0 1 python_be.cc:2457] Stub process is unhealthy and it will be restarted.
Traceback (most recent call last):
  File "/repo/quickstart/1/model.py", line 9, in execute
RuntimeError: onnxruntime session is gone
E1201 08:00:14.1 1 python_be.cc:2457] Stub process is unhealthy and it will be restarted.
"""


def test_log_errors_are_triton_errors_and_stub_exceptions_without_gpu_noise() -> None:
    assert log_errors(LOG) == ["Stub process is unhealthy and it will be restarted.",
                               "RuntimeError: onnxruntime session is gone"]
    assert log_errors("I1201 all fine\nW1201 metrics.cc] DCGM unable to start\n") == []


@pytest.fixture()
def crashing_shim(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shim = tmp_path / "crashing_shim.py"
    shim.write_text(CRASHING_SHIM)
    monkeypatch.setattr("tracker.triton.formats.onnx.SHIM", shim)


@pytest.mark.triton
def test_profile_exits_1_with_the_stubs_error(tmp_path: Path, mlflow_uri: str,
                                              crashing_shim: None) -> None:
    model = build_quickstart(tmp_path)
    spec = write_spec(tmp_path, model, {}, n_trials=1)
    result = CliRunner().invoke(cli, ["profile", str(spec), "--concurrency", "1,4"])
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    message = result.output.split("error: ", 1)[1]
    assert "no load level measured the objective `perf_throughput`" in message
    # the level's own reason and the stub's error in Triton's words. Which words depends on
    # the wheel: nvidia-pytriton 0.7.0 keeps serving and answers every request with "Stub
    # process 'quick_0' is not healthy"; 0.5.7's server goes away after the crash, so the
    # level names the first failed request, then the server log's "Stub process is unhealthy"
    assert "concurrency 1: " in message
    assert "requests failed" in message or "request error: " in message
    assert ("Stub process 'quick_0' is not healthy" in message
            or "server log: Stub process is unhealthy and it will be restarted." in message)


@pytest.mark.triton
def test_a_trial_fails_with_the_cause_in_its_note(tmp_path: Path, mlflow_uri: str,
                                                  crashing_shim: None,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    model = build_quickstart(tmp_path)
    spec = write_spec(tmp_path, model, {"instance_group.count": [1]}, n_trials=1)
    tune(spec, TuneOptions(bar=False))
    got = trials(f"sqlite:///{tmp_path / 'optuna.db'}")
    assert got and all(t.state == TrialState.FAIL for t in got)
    reason = got[0].user_attrs["fail_reason"]
    assert reason.startswith("measurement failed: no load level measured")
    assert "Stub process" in reason
    run = MlflowClient(mlflow_uri).get_run(got[0].user_attrs["mlflow_run_id"])
    assert run.info.status == "FAILED"
    assert "Stub process" in run.data.tags["mlflow.note.content"]
    # the progress line carries the cause too (its first line, within 400 characters)
    progress = [line for line in capsys.readouterr().out.splitlines() if "FAIL" in line]
    assert progress and ("requests failed" in progress[0] or "request error: " in progress[0]), \
        progress
