"""A measurement that fails says why, all the way to the user: the levels' own reasons (error
share and first error) and the server log's last error lines reach `tracker profile`'s error,
the failed trial's note (Optuna fail_reason and the MLflow run's description) and the
progress line. The failure is real: a shim whose stub process crashes on every request."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import optuna
import pytest
from click.testing import CliRunner
from mlflow import MlflowClient
from optuna.trial import TrialState

from tests.support.tune import build_quickstart, trials, write_spec
from tracker.cli import cli
from tracker.errors import ModelError
from tracker.invocation.session import TuneOptions
from tracker.triton.server.logs import log_errors
from tracker.triton.shim.model import numpy_glue_works
from tracker.tuning.tune import tune

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


# a model whose every request fails in onnxruntime, after which the wheel's server crashed
ORT_LOG = """I1206 19:12:03.5 1 server.cc:674] Model READY
\x1b[1;31m2026-12-06 19:12:03.609843185 [E:onnxruntime:, sequential_executor.cc:677 \
ExecuteKernel] Non-zero status code returned while running Reshape node. Name:'' Status \
Message: The input tensor cannot be reshaped to the requested shape. Input shape:{1,4}, \
requested shape:{-1,3}
\x1b[m
Signal (11) received.
 0# 0x000056265EFA652D in /venv/bin/tritonserver
terminate called after throwing an instance of 'boost::interprocess::lock_exception'
"""


def test_log_errors_name_onnxruntime_s_error_and_the_server_s_crash() -> None:
    found = log_errors(ORT_LOG)
    assert found[0].startswith("onnxruntime: Non-zero status code returned while running "
                               "Reshape node.")
    assert found[0].endswith("requested shape:{-1,3}")
    assert found[1:] == ["Signal (11) received.", "terminate called after throwing an "
                         "instance of 'boost::interprocess::lock_exception'"]


def test_the_line_a_model_printed_before_a_crash_comes_with_the_crash() -> None:
    log = ("I1207 13:37:35.9 31129 model_lifecycle.cc:839] \"successfully loaded 'killer'\"\n"
           "| killer | 1       | READY  |\n"
           "Error: Failed to initialize NVML\n"
           "killer: two instances cannot share the device\n"
           "Signal (11) received.\n"
           " 0# 0x000056265EFA652D in /venv/bin/tritonserver\n"
           "killer: two instances cannot share the device\n"
           "Signal (11) received.\n")
    assert log_errors(log) == ["killer: two instances cannot share the device",
                               "Signal (11) received."]
    # Triton's own lines, tables, backtrace frames and GPU-probe noise are not the model's
    assert log_errors("W1207 server.cc] a warning\nSignal (11) received.\n") == \
        ["Signal (11) received."]
    assert log_errors("Error: Failed to initialize NVML\nSignal (11) received.\n") == \
        ["Signal (11) received."]
    assert log_errors("killer: said before, then Triton went on\nI1207 x.cc] fine\n"
                      "Signal (11) received.\n") == ["Signal (11) received."]
    # a server killed outright leaves no crash line: its model's last printed line is told
    killed = "I1207 x.cc] fine\nkiller: out of memory\n"
    assert log_errors(killed) == [] and log_errors(killed, died=True) == \
        ["killer: out of memory"]


def test_how_a_server_process_ended_is_said_in_words() -> None:
    from tracker.triton.server.processes import exit_words

    assert exit_words("tritonserver", 1) == "tritonserver exited with status 1"
    assert exit_words("tritonserver", -11) == "tritonserver was killed by signal 11 (SIGSEGV)"
    assert exit_words("tritonserver", -200) == "tritonserver was killed by signal 200"


def _impossible_reshape(path: Path) -> Path:
    """An ONNX model that reshapes [batch, 4] to [-1, 4099]: every request fails, alone or
    batched (4 x batch is a multiple of the prime 4099 only for batches of 4099 requests)."""
    import onnx
    from onnx import TensorProto, helper

    shape = helper.make_tensor("shape", TensorProto.INT64, [2], [-1, 4099])
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["INPUT0", "shape"], ["OUTPUT0"])], "reshape",
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, [None, 4])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, [None, 4099])], [shape])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def _profile_error(model: Path, folder: Path, levels: str) -> str:
    """What `tracker profile` says when no level of ``model`` could be measured (it exits 1,
    with no traceback)."""
    spec = write_spec(folder, model, {}, n_trials=1)
    result = CliRunner().invoke(cli, ["profile", str(spec), "--concurrency", levels])
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    message = result.output.split("error: ", 1)[1]
    assert "no load level measured the objective `perf_throughput`" in message
    return message


@pytest.mark.triton
def test_a_model_whose_every_request_fails_is_reported_with_its_own_error(
        tmp_path: Path, mlflow_uri: str) -> None:
    message = _profile_error(_impossible_reshape(tmp_path / "reshape.onnx"), tmp_path, "1")
    assert "cannot be reshaped to the requested shape" in message      # the model's own words


@pytest.fixture()
def crashing_shim(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shim = tmp_path / "crashing_shim.py"
    shim.write_text(CRASHING_SHIM)
    monkeypatch.setattr("tracker.triton.formats.onnx.SHIM", shim)


@pytest.mark.triton
def test_profile_exits_1_with_the_stubs_error(tmp_path: Path, mlflow_uri: str,
                                              crashing_shim: None) -> None:
    message = _profile_error(build_quickstart(tmp_path), tmp_path, "1,4")
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
    # nvidia-pytriton 0.5.7's server dies of the crash (the plain-pip leg): said first
    assert re.match(r"measurement failed: (the server died during this measurement \(tritonserver "
                    r"was killed by signal 11 \(SIGSEGV\)\); )?no load level measured", reason), \
        reason
    assert "Stub process" in reason
    run = MlflowClient(mlflow_uri).get_run(got[0].user_attrs["mlflow_run_id"])
    assert run.info.status == "FAILED"
    assert "Stub process" in run.data.tags["mlflow.note.content"]
    # the progress line carries the cause too (its first line, within 400 characters)
    progress = [line for line in capsys.readouterr().out.splitlines() if "FAIL" in line]
    assert progress and ("requests failed" in progress[0] or "request error: " in progress[0]), \
        progress


# a Python-backend model whose second instance kills its own stub on its first request
SECOND_INSTANCE_CRASHES = '''
import ctypes

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.crash = args["model_instance_name"].endswith("_0_1")

    def execute(self, requests):
        if self.crash:
            ctypes.string_at(0)
        out = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", 2 * x)]))
        return out
'''
SECOND_INSTANCE_CONFIG = '''name: "crash"
backend: "python"
max_batch_size: 8
input [{ name: "X" data_type: TYPE_FP32 dims: [ 4 ] }]
output [{ name: "Y" data_type: TYPE_FP32 dims: [ 4 ] }]
instance_group [{ count: 1 kind: KIND_CPU }]
'''


def _tune_python_model(folder: Path, name: str, code: str, counts: list[int], *, n_trials: int,
                       **extra: Any) -> list[optuna.trial.FrozenTrial] | None:
    """A study of the Python model ``code`` (SECOND_INSTANCE_CONFIG's, named ``name``) over
    ``instance_group.count`` in ``counts``: its trials. None where numpy 2 sits beside a stub
    built for numpy 1 (the plain-pip leg): a Python-backend model is refused before it is
    served, which is asserted instead, as the behaviour there."""
    model = folder / name
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(SECOND_INSTANCE_CONFIG.replace('"crash"', f'"{name}"'))
    (model / "1" / "model.py").write_text(code)
    spec = write_spec(folder, model, {"instance_group.count": counts}, n_trials=n_trials,
                      name=name, **extra)
    if not numpy_glue_works():
        with pytest.raises(ModelError, match="would get wrong tensors"):
            tune(spec, TuneOptions(bar=False))
        return None
    tune(spec, TuneOptions(bar=False))
    return trials(f"sqlite:///{folder / 'optuna.db'}", name)


@pytest.mark.triton
def test_a_configuration_that_crashes_on_the_probes_is_said_to_have_crashed(
        tmp_path: Path, mlflow_uri: str) -> None:
    """The default (one instance) answers the probes; two instances crash the second one's
    stub when the probes are sent together: the trial fails as crashed, not as outputs that
    differ, with the client's error."""
    got = _tune_python_model(tmp_path, "crash", SECOND_INSTANCE_CRASHES, [2], n_trials=2)
    if got is None:
        return
    two = [t for t in got if t.params.get("instance_group.count") == 2]
    assert two and two[0].state == TrialState.FAIL
    reason = two[0].user_attrs["fail_reason"]
    assert "the configuration crashed on the output check's probes, which the default " \
        "configuration answered" in reason, reason
    assert "instance_group.count=2" in reason and "outputs differ" not in reason


# the same model, whose second instance hangs instead
SECOND_INSTANCE_HANGS = SECOND_INSTANCE_CRASHES.replace("import ctypes", "import time").replace(
    "ctypes.string_at(0)", "time.sleep(60)")


@pytest.mark.triton
def test_a_configuration_that_hangs_on_the_probes_is_said_to_have_timed_out(
        tmp_path: Path, mlflow_uri: str) -> None:
    """Two instances: the second never answers. The probes' deadline
    (check.outputs.timeout_s) ends the check with the words, not 'outputs differ'."""
    got = _tune_python_model(tmp_path, "crash", SECOND_INSTANCE_HANGS, [2], n_trials=2,
                             check={"outputs": {"timeout_s": 2}})
    if got is None:
        return
    two = [t for t in got if t.params.get("instance_group.count") == 2]
    assert two and two[0].state == TrialState.FAIL
    reason = two[0].user_attrs["fail_reason"]
    assert reason.startswith("the configuration timed out after 2 s on the output check's "
                             "probes, which the default configuration answered (knobs unlike "
                             "the default's: instance_group.count=2): "), reason
    assert "outputs differ" not in reason


def test_how_a_probe_failed_is_told_from_the_client_s_error() -> None:
    from tracker.outputs.trials import failure_words

    assert failure_words("Deadline Exceeded", 30) == "timed out after 30 s"
    assert failure_words("Stub process 'm_0_1' is not healthy.", 30) == "crashed"
    assert failure_words("[StatusCode.UNAVAILABLE] Socket closed", 30) == "crashed"
    assert failure_words("unexpected shape for input 'X'", 30) == "answered with an error"


# a Python-backend model whose second instance kills the whole server (SIGKILL to its parent,
# the tritonserver process, as the kernel's OOM killer would) on its first request when the
# configuration has two instances, after printing why. (A SIGSEGV sent from outside is not
# a fault: Triton's handler prints "Signal (11) received." and the server sometimes lives on.)
KILLS_THE_SERVER = '''
import json
import os
import signal
import sys

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        count = json.loads(args["model_config"])["instance_group"][0]["count"]
        self.kill = count == 2 and args["model_instance_name"].endswith("_0_1")

    def execute(self, requests):
        if self.kill:
            print("killer: two instances cannot share the device", file=sys.stderr, flush=True)
            os.kill(os.getppid(), signal.SIGKILL)
        out = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", 2 * x)]))
        return out
'''


@pytest.mark.triton
@pytest.mark.parametrize("strategy", ["reload", "restart"])
def test_a_trial_that_kills_the_server_is_named_and_the_next_gets_a_fresh_one(
        tmp_path: Path, mlflow_uri: str, strategy: str) -> None:
    """Two instances kill the server mid-measurement; three do not. The trial of two fails
    saying the server died, how, and the model's last words; the trial after it is measured
    on a fresh server, with either strategy (a reload strategy's server is otherwise started
    once)."""
    done = _tune_python_model(tmp_path, "killer", KILLS_THE_SERVER, [2, 3], n_trials=3,
                              server={"strategy": strategy}, check={"outputs": False})
    if done is None:
        return
    got = {t.params["instance_group.count"]: t for t in done}
    assert got[2].number < got[3].number, "the grid's order puts the killing trial first"
    assert got[2].state == TrialState.FAIL
    reason = got[2].user_attrs["fail_reason"]
    assert reason.startswith("measurement failed: the server died during this measurement "
                             "(tritonserver was killed by signal 9 (SIGKILL)); "), reason
    assert reason.endswith("; server log: killer: two instances cannot share the device"), \
        reason
    assert got[3].state == TrialState.COMPLETE and got[1].state == TrialState.COMPLETE
