"""The deploy check of the model kinds whose requests are not one unary inference, each taken
through a real study (`tracker tune`, one trial, short windows), `tracker promote` and the
deployment to a serving Triton (one for the module), real MLflow and Optuna sqlite stores:

- a decoupled (streaming) model alone: its check request and the study's probes go over a
  gRPC stream (``ModelInfer`` refuses decoupled models), its served version streams (and
  ``predict`` answers the stream); a version whose stream differs from the study's is
  refused, the first keeps serving;
- a decoupled model among two entry models: the same, the other entry checked with a unary
  request;
- a stateful model written as Triton's own ``sequence_py`` is (qa/python_models): it keeps
  every sequence's state for its lifetime, refuses a start for an ID it holds and a step
  without a start for an ID it does not; its check is whole sequences, START on the first
  step, END on the last, under IDs that are new on the server; its decoupled form and an
  iterative sequence model take the check's request too;
- three of Triton's sequence kinds, each through ``tracker check`` and ``check --outputs``,
  a study of the default and one other configuration with the output check on, the promotion
  and the deploy check: the counter batching (``max_batch_size: 4``: the check's sequences
  sent together use correlation IDs of their own, so the model never sees a start for an ID
  it holds), its decoupled form (each step of each probe sequence streamed), and the
  iterative model (one streamed request per sequence, no ID or flags: the scheduler gives
  them).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import mlflow
import numpy as np
import pytest
import yaml
from click.testing import CliRunner
from mlflow.deployments import get_deploy_client

from tests.support.deploy import module_server as module_server  # the fixtures, re-exported
from tests.support.deploy import shared_serving as shared_serving
from tests.support.formats import prompts_file, python_model
from tracker import tags
from tracker.cli import cli
from tracker.deploy import first_request, service, verify
from tracker.deploy.settings import resolve_settings
from tracker.errors import DeployError, ServerError
from tracker.measure.sequence_steps import run_sequence
from tracker.outputs import probes
from tracker.tracking import flavor, registry, runs
from tracker.triton import model_config
from tracker.triton.http_client import HttpTritonClient
from tracker.triton.infer import Request
from tracker.triton.server.local import LocalTritonServer
from tracker.triton.stream_probe import stream_tensors

STREAMER = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        for r in requests:
            sender = r.get_response_sender()
            prompt = pb_utils.get_input_tensor_by_name(r, "PROMPT").as_numpy()
            n = int(pb_utils.get_input_tensor_by_name(r, "MAX_TOKENS").as_numpy().ravel()[0])
            for i in range(n):
                token = np.array([int(prompt.sum()) + i @SHIFT@], dtype=np.int32)
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("TOKEN", token)]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""
STREAMER_CONFIG = """name: "@NAME@"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
instance_group [{ count: 1 kind: KIND_CPU }]
input [{ name: "PROMPT" data_type: TYPE_INT32 dims: [-1] },
       { name: "MAX_TOKENS" data_type: TYPE_INT32 dims: [1] }]
output [{ name: "TOKEN" data_type: TYPE_INT32 dims: [1] }]
"""
ECHO = """
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse(
            [pb_utils.Tensor("Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy())])
            for r in requests]
"""
ECHO_CONFIG = """name: "@NAME@"
backend: "python"
max_batch_size: 0
instance_group [{ count: 1 kind: KIND_CPU }]
input [{ name: "X" data_type: TYPE_FP32 dims: [4] }]
output [{ name: "Y" data_type: TYPE_FP32 dims: [4] }]
"""
# Triton's qa/python_models/sequence_py, written again: the state of every sequence is kept
# for the model's lifetime (never dropped at END), so an ID is good for one sequence only; a
# request flagged START alone starts one, any other (START and END together too) continues one
COUNTER = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        self.sequences = {}

    def execute(self, requests):
        responses = []
        for r in requests:
            sid, flags = r.correlation_id(), r.flags()
            x = int(pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy().ravel()[0])
            if flags == pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START:
                if sid in self.sequences:
                    raise pb_utils.TritonModelException(
                        "Can't start a new sequence with existing ID")
                self.sequences[sid] = 0
            elif sid not in self.sequences:
                raise pb_utils.TritonModelException(
                    "Need START flag for a sequence ID that doesn't already exist.")
            self.sequences[sid] += x
            out = np.array([self.sequences[sid]], dtype=np.int32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", out)]))
        return responses
"""
COUNTER_CONFIG = """name: "counter"
backend: "python"
max_batch_size: 0
sequence_batching { max_sequence_idle_microseconds: 10000000 }
instance_group [{ count: 1 kind: KIND_CPU }]
input [{ name: "INPUT0" data_type: TYPE_INT32 dims: [1] }]
output [{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [1] }]
"""
# the same, decoupled: each step answered by a stream of one response
DCOUNTER = COUNTER.replace("""        responses = []
""", "").replace(
    """            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", out)]))
        return responses""",
    """            r.get_response_sender().send(
                pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", out)]),
                flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None""")
DCOUNTER_CONFIG = COUNTER_CONFIG.replace('"counter"', '"dcounter"').replace(
    "sequence_batching {", "model_transaction_policy { decoupled: true }\nsequence_batching {")
# an iterative sequence model (Triton's qa iterative_sequence, written again in Python): it
# counts INPUT down, one response per execution, rescheduling the request until 0
ITERATIVE = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        self.left = {}

    def execute(self, requests):
        for r in requests:
            sid, sender = r.correlation_id(), r.get_response_sender()
            if sid not in self.left:
                x = pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
                self.left[sid] = int(x.ravel()[0])
            self.left[sid] -= 1
            out = pb_utils.Tensor("OUTPUT0", np.array([self.left[sid]], dtype=np.int32))
            if self.left[sid] > 0:
                sender.send(pb_utils.InferenceResponse([out]))
                r.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
            else:
                del self.left[sid]
                sender.send(pb_utils.InferenceResponse([out]),
                            flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""
ITERATIVE_CONFIG = DCOUNTER_CONFIG.replace('"dcounter"', '"iterative"').replace(
    "max_sequence_idle_microseconds: 10000000", "iterative_sequence: true")
# the counter batching (the oldest strategy: batches of ready requests, never the direct
# strategy's null requests for empty slots): each request's input and output one batch item
BCOUNTER = COUNTER.replace("out = np.array([self.sequences[sid]], dtype=np.int32)",
                           "out = np.array([[self.sequences[sid]]], dtype=np.int32)")
BCOUNTER_CONFIG = COUNTER_CONFIG.replace('"counter"', '"bcounter"').replace(
    "max_batch_size: 0", "max_batch_size: 4").replace(
    "sequence_batching {", "sequence_batching { oldest { max_candidate_sequences: 8 }")
#: Triton's sequence kinds a study takes: (model.py, config.pbtxt, the spec's load)
SEQUENCE_KINDS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "bcounter": (BCOUNTER, BCOUNTER_CONFIG, {"sequence": {"length": 3}}),
    "dcounter": (DCOUNTER, DCOUNTER_CONFIG, {"sequence": {"length": 3}}),
    "iterative": (ITERATIVE, ITERATIVE_CONFIG, {}),
}
PROMPT = np.arange(5, dtype=np.int32)  # tokens 10, 11, 12 for MAX_TOKENS 3


def _spec(tmp: Path, uri: str, model: dict[str, Any], load: dict[str, Any],
          space: dict[str, Any], registered: str, trials: int = 1) -> Path:
    spec = tmp / "study.yaml"
    spec.write_text(yaml.safe_dump({
        "model": model,
        "load": {"concurrency": [1], "window_ms": 300, "max_tries": 4, "warmup_requests": 3,
                 "stability_pct": 50, **load},
        "search": {"sampler": "grid", "n_trials": trials, "seed": 1, "sweep": "full",
                   "storage": f"sqlite:///{tmp / 'optuna.db'}", "space": space},
        "confirm": {"enabled": False},
        "mlflow": {"tracking_uri": uri, "registered_model": registered},
    }, sort_keys=False))
    return spec


def _tune_and_promote(spec: Path) -> str:
    runner = CliRunner()
    tuned = runner.invoke(cli, ["tune", str(spec), "--no-bar"])
    assert tuned.exit_code == 0, tuned.output
    promoted = runner.invoke(cli, ["promote", str(spec), "--force"])
    assert promoted.exit_code == 0, promoted.output
    return promoted.output


def _tokens(server: LocalTritonServer, name: str) -> list[int]:
    got = stream_tensors(server.endpoints, Request(
        name, {"PROMPT": ("INT32", PROMPT), "MAX_TOKENS": ("INT32", np.array([3], np.int32))},
        ["TOKEN"]))
    return [int(r["TOKEN"].ravel()[0]) for r in got]


def _checked_version(name: str, version: int = 1) -> dict[str, str]:
    """The version's tags; it serves and carries the study's reference (its check ran)."""
    found = dict(mlflow.MlflowClient().get_model_version(name, str(version)).tags)
    assert found[registry.TAG_DEPLOY_STATUS] == "serving", found
    assert found.get(tags.CHECK_REFERENCE), found
    return found


def _reference(found: dict[str, str]) -> probes.ProbeSet:
    """The study's probes the version's deploy check sent."""
    return probes.loads(runs.read_file(mlflow.MlflowClient(), found[tags.CHECK_REFERENCE],
                                       verify.ARTIFACT))


def _ready(server: LocalTritonServer, name: str) -> list[str]:
    return sorted(m["version"] for m in server.client().repository_index()
                  if m["name"] == name and m.get("state") == "READY")


@pytest.mark.triton
def test_a_decoupled_model_is_deployed_over_a_stream_and_a_different_stream_refused(
        tmp_path: Path, mlflow_uri: str,
        shared_serving: tuple[LocalTritonServer, Path]) -> None:
    server, repo = shared_serving
    model_dir = python_model(tmp_path / "user", "streamer", STREAMER.replace("@SHIFT@", ""),
                       STREAMER_CONFIG)
    spec = _spec(tmp_path, mlflow_uri, {"name": "streamer", "path": str(model_dir)},
                 {"input_data": str(prompts_file(tmp_path))}, {"instance_group.count": [1]},
                 "streamer-reg")
    _tune_and_promote(spec)
    found = _checked_version("streamer-reg")
    assert _reference(found).stream  # the check streamed the study's probes
    assert _tokens(server, "streamer") == [10, 11, 12]  # streamed by the serving Triton
    assert not list(repo.glob("*.candidate"))  # the shadow is gone
    # `mlflow deployments predict` streams too: each output is its responses, stacked
    predicted = get_deploy_client("triton").predict("streamer", {
        "PROMPT": PROMPT, "MAX_TOKENS": np.array([3], dtype=np.int32)})
    assert predicted["outputs"]["TOKEN"] == [[10], [11], [12]]

    # version 2: the registered files altered after the study (every token one more), the
    # study's check tags kept: its streams differ from the study's probes, so it is refused
    altered = tmp_path / "altered" / "streamer"
    registered = flavor.load_model("models:/streamer-reg/1", tmp_path / "dl").entry
    shutil.copytree(registered.path, altered)
    (altered / "1" / "model.py").write_text(STREAMER.replace("@SHIFT@", "+ 1"))
    client = mlflow.MlflowClient()
    run = client.create_run(client.get_experiment_by_name("streamer").experiment_id)
    made = flavor.log_triton_model(altered, run.info.run_id)
    registry.register_version(client, "streamer-reg", registry.VersionRequest(
        source=made.model_uri, run_id=run.info.run_id, model_id=made.model_id,
        tags={k: found[k] for k in (tags.CHECK_REFERENCE, tags.CHECK_TOLERANCE)}))
    with pytest.raises(DeployError) as refused:
        service.deploy(resolve_settings(), "streamer", "models:/streamer-reg/2")
    message = str(refused.value)
    assert verify.STEP in message and "version 1 still serves" in message, message
    assert "output 'TOKEN' of probe 0" in message, message
    assert _ready(server, "streamer") == ["1"]
    assert _tokens(server, "streamer") == [10, 11, 12]


@pytest.mark.triton
def test_a_decoupled_entry_among_two_is_deployed_and_streams(
        tmp_path: Path, mlflow_uri: str,
        shared_serving: tuple[LocalTritonServer, Path]) -> None:
    server, _repo = shared_serving
    user = tmp_path / "user"
    python_model(user, "jstreamer", STREAMER.replace("@SHIFT@", ""), STREAMER_CONFIG)
    python_model(user, "jecho", ECHO, ECHO_CONFIG)
    spec = _spec(tmp_path, mlflow_uri, {"name": ["jstreamer", "jecho"], "path": str(user)},
                 {"models": {"jstreamer": {"input_data": str(prompts_file(tmp_path))}}},
                 {"jecho/instance_group.count": [1]}, "joint-reg")
    _tune_and_promote(spec)
    reference = _reference(_checked_version("joint-reg"))
    assert reference.stream and reference.outputs == ["TOKEN"]  # the first entry's probes
    assert _tokens(server, "jstreamer") == [10, 11, 12]
    x = np.array([1, 2, 3, 4], dtype=np.float32)
    answer = server.client().infer_tensors(Request("jecho", {"X": ("FP32", x)}, ["Y"]))
    np.testing.assert_array_equal(answer["Y"], x)
    assert _ready(server, "jstreamer") == ["1"] and _ready(server, "jecho") == ["1"]


@pytest.mark.triton
def test_a_stateful_model_is_deployed_with_whole_sequences_under_new_ids(
        tmp_path: Path, mlflow_uri: str,
        shared_serving: tuple[LocalTritonServer, Path]) -> None:
    server, repo = shared_serving
    model_dir = python_model(tmp_path / "user", "counter", COUNTER, COUNTER_CONFIG)
    spec = _spec(tmp_path, mlflow_uri, {"name": "counter", "path": str(model_dir)},
                 {"sequence": {"length": 3}}, {"instance_group.count": [1]}, "counter-reg")
    _tune_and_promote(spec)
    found = _checked_version("counter-reg")
    assert _reference(found).sequence == "uint"  # the deploy check sent these as whole sequences
    served = model_config.load(repo / "counter" / "config.pbtxt")
    assert served.HasField("sequence_batching")
    steps = [{"INPUT0": np.array([v], dtype=np.int32)} for v in (5, 7, 9)]
    answers = run_sequence(server.endpoints.grpc or "", "counter", steps,
                           corrid=int(first_request.fresh_id(served)))
    assert [int(a["OUTPUT0"].ravel()[0]) for a in answers] == [5, 12, 21]


def test_check_ids_are_new_and_of_the_controls_type() -> None:
    uint = model_config.parse(COUNTER_CONFIG)
    ids = [first_request.fresh_id(uint) for _ in range(1000)]
    assert all(isinstance(i, int) for i in ids)
    assert ids == sorted(set(ids)) and min(ids) > probes.ID_BASE * 10**6
    text = COUNTER_CONFIG.replace(
        "sequence_batching {", 'sequence_batching { control_input [{ name: "CORRID" control '
        "[{ kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_STRING }] }]")
    string_id = first_request.fresh_id(model_config.parse(text))
    assert isinstance(string_id, str) and int(string_id) > ids[-1]


def test_what_the_check_sends_each_kind() -> None:
    streamer = model_config.parse(STREAMER_CONFIG.replace("@NAME@", "s"))
    counter = model_config.parse(COUNTER_CONFIG)
    echo = model_config.parse(ECHO_CONFIG.replace("@NAME@", "e"))
    assert first_request.what_is_sent(streamer) == "checking one streamed inference"
    assert first_request.what_is_sent(counter) == "checking one whole sequence"
    assert first_request.what_is_sent(echo) == "checking one inference"
    for seed in range(20):  # a decoupled model's counts are never 0
        tokens = first_request.check_inputs(streamer, seed)["MAX_TOKENS"][1]
        assert tokens.dtype == np.int32 and int(tokens.min()) >= 1


@pytest.mark.triton
def test_a_decoupled_stateful_and_an_iterative_model_take_the_check_request(
        tmp_path: Path, module_server: tuple[LocalTritonServer, Path]) -> None:
    server, repo = module_server
    dcounter = model_config.parse(DCOUNTER_CONFIG)
    iterative = model_config.parse(ITERATIVE_CONFIG)
    python_model(repo, "dcounter", DCOUNTER, DCOUNTER_CONFIG)
    python_model(repo, "iterative", ITERATIVE, ITERATIVE_CONFIG)
    with server.client() as client:
        for name in ("dcounter", "iterative"):
            client.load_model(name)
        try:
            for _ in range(2):  # each check a new sequence: no ID is started twice
                first_request.send(client, "dcounter", 1, dcounter)
                first_request.send(client, "iterative", 1, iterative)
            inputs = first_request.check_inputs(dcounter)
            with pytest.raises(ServerError, match="Need START flag"):  # a one-step sequence
                stream_tensors(server.endpoints, Request(
                    "dcounter", inputs, ["OUTPUT0"], sequence_id=first_request.fresh_id(dcounter),
                    sequence_start=True, sequence_end=True))
            http = (server.endpoints.http or "").split("://", 1)[-1]
            with HttpTritonClient(http) as over_http, pytest.raises(
                    ServerError, match="stream over gRPC only"):  # the refusal, in words
                first_request.send(over_http, "dcounter", 1, dcounter)
        finally:  # a loaded machine can take over 30 s to stop a decoupled Python model
            for name in ("dcounter", "iterative"):
                client.unload_model(name, wait_s=120)
    assert first_request.what_is_sent(dcounter) == "checking one whole sequence"
    assert first_request.what_is_sent(iterative) == "checking one streamed inference"


def _served_answers(server: LocalTritonServer, name: str, cfg: Any) -> list[int]:
    """What the serving Triton answers a new sequence of 5, 7, 9 (the iterative model: one
    request counting down from 3)."""
    if name == "iterative":
        got = stream_tensors(server.endpoints, Request(
            name, {"INPUT0": ("INT32", np.array([3], np.int32))}, ["OUTPUT0"]))
        return [int(r["OUTPUT0"].ravel()[0]) for r in got]
    corrid, shape = first_request.fresh_id(cfg), [1, 1] if cfg.max_batch_size else [1]
    steps = [{"INPUT0": ("INT32", np.array([v], np.int32).reshape(shape))} for v in (5, 7, 9)]
    if name == "bcounter":
        answers = run_sequence(server.endpoints.grpc or "", name,
                               [{k: a for k, (_, a) in s.items()} for s in steps], corrid)
        return [int(a["OUTPUT0"].ravel()[0]) for a in answers]
    out = []
    for j, step in enumerate(steps):
        got = stream_tensors(server.endpoints, Request(
            name, step, ["OUTPUT0"], sequence_id=corrid, sequence_start=j == 0,
            sequence_end=j == 2))
        out += [int(r["OUTPUT0"].ravel()[0]) for r in got]
    return out


@pytest.mark.triton
@pytest.mark.parametrize("name", sorted(SEQUENCE_KINDS))
def test_tritons_sequence_kinds_are_checked_tuned_with_the_output_check_and_promoted(
        tmp_path: Path, mlflow_uri: str, shared_serving: tuple[LocalTritonServer, Path],
        name: str) -> None:
    server, _repo = shared_serving
    code, config, load = SEQUENCE_KINDS[name]
    cfg = model_config.parse(config)
    model_dir = python_model(tmp_path / "user", name, code, config)
    spec = _spec(tmp_path, mlflow_uri, {"name": name, "path": str(model_dir)}, load,
                 {"instance_group.count": [2]}, f"{name}-reg", trials=2)
    runner = CliRunner()
    checked = runner.invoke(cli, ["check", str(spec)])
    assert checked.exit_code == 0, checked.output
    probes_line = "output check: 1 probe (one streamed request each" if name == "iterative" \
        else "output check: 4 probes (whole sequences of 4 steps"
    assert probes_line in checked.output, checked.output
    twice = runner.invoke(cli, ["check", str(spec), "--outputs"])
    assert twice.exit_code == 0, twice.output
    assert " the same twice: its outputs ['OUTPUT0'] are checked" in twice.output, twice.output

    _tune_and_promote(spec)
    client = mlflow.MlflowClient()
    experiment = client.get_experiment_by_name(name)
    trials = [r for r in client.search_runs([experiment.experiment_id])
              if r.data.tags.get("mlflow.parentRunId")]
    assert len(trials) == 2, [r.data.tags.get(tags.CHECK) for r in trials]
    for run in trials:  # the default and the other both answered the probes, then measured
        assert run.data.metrics.get("check/passed") == 1, (run.data.params, run.data.tags)
        assert run.data.metrics["perf_throughput"] > 0
    assert [r.data.tags.get(tags.BASELINE) for r in trials].count("true") == 1
    reference = _reference(_checked_version(f"{name}-reg"))
    assert reference.stream == (name != "bcounter")
    assert reference.sequence == ("" if name == "iterative" else "uint")
    expected = [2, 1, 0] if name == "iterative" else [5, 12, 21]
    assert _served_answers(server, name, cfg) == expected
