"""The output check of a stateful model on a real tritonserver (tracker/outputs/trials.py):
its probes are whole sequences, each under its own correlation ID, sent to every configuration
as sequences whatever its scheduler; and of a decoupled model: each probe's answer is its whole
response stream. One server for the module's direct checks; the study starts its own.

`mix` keeps a running sum per sequence, but adds 1000 for every other request in the same
``execute`` call: its answers change when the sequence batcher puts steps of different
sequences in one batch (what a batch-mixing custom op does). Its default config has one slot
(max_batch_size 1), so it never batches them. `mix_batched` is the same model with eight slots;
`mix_plain` is what ``dynamic_batching.max_queue_delay_microseconds`` would make of it (the
knob the spec refuses on a stateful model: in Triton's protobuf the dynamic batcher replaces
the sequence batcher, and the model no longer gets its control inputs).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from mlflow import MlflowClient
from optuna.trial import TrialState

from tests.support.tune import trials, write_spec
from tracker.invocation.session import TuneOptions
from tracker.outputs import probes
from tracker.outputs import trials as check_outputs
from tracker.outputs.probes import ProbeSet, Tolerance
from tracker.outputs.trials import check_answers, make_probes, sequence_kind
from tracker.spec import ServerSection, StudySpec, parse_spec
from tracker.triton import model_config
from tracker.triton.server.local import LocalTritonServer
from tracker.tuning.tune import tune

pytestmark = pytest.mark.triton

MIX = """
import numpy as np
import triton_python_backend_utils as pb_utils


def _one(r, name):
    return pb_utils.get_input_tensor_by_name(r, name).as_numpy().ravel()[0]


class TritonPythonModel:
    def initialize(self, args):
        self.sums = {}

    def execute(self, requests):
        out = []
        for r in requests:
            cid = int(_one(r, "CORRID"))
            if _one(r, "START"):
                self.sums[cid] = 0
            self.sums[cid] = self.sums.get(cid, 0) + int(_one(r, "INPUT"))
            total = self.sums[cid] + 1000 * (len(requests) - 1)
            if _one(r, "END"):
                self.sums.pop(cid, None)
            out.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("SUM", np.full((1, 1), total, dtype=np.int64))]))
        return out
"""
FLAGS = "int32_false_true: [0, 1]"
CONFIG = (
    'name: "mix" backend: "python" max_batch_size: 1\n'
    'sequence_batching { max_sequence_idle_microseconds: 10000000\n'
    ' direct { max_queue_delay_microseconds: 2000 } control_input ['
    f' {{ name: "START" control [{{ kind: CONTROL_SEQUENCE_START {FLAGS} }}] }},'
    f' {{ name: "END" control [{{ kind: CONTROL_SEQUENCE_END {FLAGS} }}] }},'
    ' { name: "CORRID" control [{ kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 }] }'
    '] }\n'
    'input [{ name: "INPUT" data_type: TYPE_INT32 dims: [1] }]\n'
    'output [{ name: "SUM" data_type: TYPE_INT64 dims: [1] }]\n'
    'instance_group [{ count: 1 kind: KIND_CPU }]\n')
EXACT = Tolerance(0.0, 0.0)
STREAM = """
import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        params = json.loads(args["model_config"])["parameters"]
        self.times = int(params["TIMES"]["string_value"])

    def execute(self, requests):
        for r in requests:
            sender = r.get_response_sender()
            x = pb_utils.get_input_tensor_by_name(r, "X").as_numpy()
            for k in range(1, self.times + 1):
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x * k)]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""


def _stream_model(folder: Path, name: str, times: int) -> Path:
    (folder / name / "1").mkdir(parents=True)
    (folder / name / "1" / "model.py").write_text(STREAM)
    (folder / name / "config.pbtxt").write_text(
        f'name: "{name}" backend: "python" max_batch_size: 0\n'
        'model_transaction_policy { decoupled: true }\n'
        'input [{ name: "X" data_type: TYPE_FP32 dims: [4] }]\n'
        'output [{ name: "Y" data_type: TYPE_FP32 dims: [4] }]\n'
        f'parameters {{ key: "TIMES" value: {{ string_value: "{times}" }} }}\n')
    return folder / name


def _write_model(folder: Path, name: str, values: dict[str, object]) -> Path:
    """The model with ``values`` set on its config; ``dynamic_batching.*`` set as protobuf
    does it (the project refuses that knob on a stateful model: the oneof drops the sequence
    batcher)."""
    cfg = model_config.parse(CONFIG)
    for path, value in values.items():
        if path.startswith("dynamic_batching."):
            setattr(cfg.dynamic_batching, path.partition(".")[2], value)
        else:
            cfg = model_config.apply(cfg, {path: value}, supports_batching=True)
    cfg.name = name
    (folder / name / "1").mkdir(parents=True)
    (folder / name / "1" / "model.py").write_text(MIX)
    (folder / name / "config.pbtxt").write_text(model_config.dumps(cfg))
    return folder / name


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalTritonServer]:
    repo = tmp_path_factory.mktemp("mix_repo")
    _write_model(repo, "mix", {})
    _write_model(repo, "mix_batched", {"max_batch_size": 8})
    _write_model(repo, "mix_plain", {"dynamic_batching.max_queue_delay_microseconds": 100})
    _stream_model(repo, "stream3", 3)
    _stream_model(repo, "stream2", 2)
    with LocalTritonServer(ServerSection(startup_timeout_s=90)) as srv:
        srv.start(repo)
        yield srv


def _spec(tmp_path: Path) -> StudySpec:
    model = _write_model(tmp_path, "mix", {})
    return parse_spec({"model": {"name": "mix", "path": str(model)}, "search": {"seed": 3}},
                      base_dir=tmp_path)


def test_a_stateful_model_is_probed_with_whole_sequences(server: LocalTritonServer,
                                                         tmp_path: Path) -> None:
    """The default answers each sequence with the running sum of its own steps (one
    correlation ID per probe, start and end flags); it passes its own check, one at a time
    and 32 sequences at once; the probe set keeps its kind through storage."""
    with server.client() as client:
        cfg = client.model_config("mix")
        made = ProbeSet(make_probes(_spec(tmp_path), cfg), ["SUM"], sequence=sequence_kind(cfg))
        assert made.sequence == "uint" and len(made.inputs) == 4
        assert made.requests(0) == check_outputs.STEPS
        reference = dataclasses.replace(made, answers=made.ask(client, "mix"))
        for tensors, answer in zip(reference.inputs, reference.answers, strict=True):
            assert isinstance(answer, dict), answer
            steps = tensors["INPUT"][1].astype(np.int64).ravel()
            np.testing.assert_array_equal(answer["SUM"].ravel(), np.cumsum(steps))
        assert check_answers(client, "mix", cfg, reference, EXACT).passed
    back = probes.loads(probes.dumps(reference))
    assert back.sequence == "uint" and back.inputs[0]["INPUT"][1].shape == (4, 1, 1)


def test_a_configuration_whose_sequence_answers_differ_fails(server: LocalTritonServer,
                                                             tmp_path: Path) -> None:
    """The scheduler replaced (the dynamic batcher in place of the sequence batcher), or
    sequences batched together by a model that mixes them: each fails, saying how."""
    with server.client() as client:
        cfg = client.model_config("mix")
        made = ProbeSet(make_probes(_spec(tmp_path), cfg), ["SUM"], sequence=sequence_kind(cfg))
        reference = dataclasses.replace(made, answers=made.ask(client, "mix"))
        plain = client.model_config("mix_plain")
        assert not plain.HasField("sequence_batching")
        replaced = check_answers(client, "mix_plain", plain, reference, EXACT)
        assert not replaced.passed
        assert "sequence probe 0 (sent one at a time): the default answered its outputs, " \
               "this configuration error" in replaced.detail
        batched = check_answers(client, "mix_batched", client.model_config("mix_batched"),
                                reference, EXACT)
        assert not batched.passed and batched.max_abs_diff >= 1000
        assert "output 'SUM' of sequence probe" in batched.detail
        assert f"{4 * probes.COPIES} sequences sent together" in batched.detail


def test_a_decoupled_model_is_probed_with_whole_response_streams(server: LocalTritonServer,
                                                                 tmp_path: Path) -> None:
    """Each probe's answer is its whole stream (three responses, stacked); a configuration
    that streams one response fewer fails, saying so by the shapes."""
    model = _stream_model(tmp_path, "stream3", 3)
    spec = parse_spec({"model": {"name": "stream3", "path": str(model)},
                       "search": {"seed": 3}}, base_dir=tmp_path)
    with server.client() as client:
        cfg = client.model_config("stream3")
        reference = check_outputs.answers_of(spec, client, "stream3", cfg)
        assert reference.stream and not reference.sequence
        for tensors, answer in zip(reference.inputs, reference.answers, strict=True):
            assert isinstance(answer, dict), answer
            x = tensors["X"][1]
            np.testing.assert_array_equal(answer["Y"], np.stack([x, 2 * x, 3 * x]))
        assert check_answers(client, "stream3", cfg, reference, EXACT).passed
        short = check_answers(client, "stream2", client.model_config("stream2"), reference,
                              EXACT)
    assert not short.passed and "shape [3, 4], got shape [2, 4]" in short.detail
    assert probes.loads(probes.dumps(reference)).stream


def test_a_study_never_ranks_a_configuration_whose_sequences_differ_best(
        tmp_path: Path, mlflow_uri: str) -> None:
    """max_batch_size 8 lets the sequence batcher batch steps of different sequences, which
    this model mixes: that trial fails its check before it is measured and the best is a
    configuration with one slot, which answers as the default does."""
    model = _write_model(tmp_path, "mix", {})
    spec = write_spec(tmp_path, model, {"max_batch_size": [1, 8]}, n_trials=3, name="mix",
                      load={"concurrency": [2], "sequence": {"length": {"low": 3, "high": 3}},
                            "window_ms": 300, "stability_pct": 80})
    result = tune(spec, TuneOptions(bar=False))
    got = trials(f"sqlite:///{tmp_path / 'optuna.db'}", "mix")
    batched = [t for t in got if t.params.get("max_batch_size") == 8]
    assert batched and all(t.state == TrialState.FAIL for t in batched)
    reason = batched[0].user_attrs["fail_reason"]
    assert "outputs differ from the default configuration's" in reason
    assert "max_batch_size=8" in reason and "output 'SUM' of sequence probe" in reason
    client = MlflowClient(mlflow_uri)
    run = client.get_run(batched[0].user_attrs["mlflow_run_id"])
    assert run.data.metrics[check_outputs.PASSED] == 0
    assert "perf_throughput" not in run.data.metrics  # never measured
    best = {t.number: t for t in got}[result.best_trial]
    assert best.state == TrialState.COMPLETE and best.params.get("max_batch_size", 1) == 1
    measured = client.get_run(best.user_attrs["mlflow_run_id"]).data.metrics
    assert measured[check_outputs.PASSED] == 1
    assert 0 < measured[check_outputs.WARMUP] <= measured[check_outputs.SECONDS]


def test_the_study_summary_says_what_the_check_left_out(tmp_path: Path) -> None:
    base = {"model": {"name": "mix", "path": str(_write_model(tmp_path, "mix", {}))}}
    assert check_outputs.summary_note(parse_spec(base, base_dir=tmp_path)) == ""
    ignored = parse_spec({**base, "check": {"outputs": {"ignore": ["SUM"]}}}, base_dir=tmp_path)
    assert "The output check ignored SUM (check.outputs.ignore)" in \
        check_outputs.summary_note(ignored)
    off = parse_spec({**base, "check": {"outputs": False}}, base_dir=tmp_path)
    assert "not checked" in check_outputs.summary_note(off)


def test_each_trial_s_probes_meet_a_fresh_load_with_the_reload_strategy(
        tmp_path: Path, mlflow_uri: str) -> None:
    """Triton's sequence_py keeps every sequence's state for the model's lifetime and refuses
    a START for an ID it holds. The probes use the same IDs in every trial, so with one
    server for the whole study (server.strategy: reload) each trial must load the model
    afresh, even when only the load differs and its config is the one already loaded: the
    second trial's check passes instead of 'Can't start a new sequence'."""
    from tests.deploy.test_deploy_kinds import COUNTER, COUNTER_CONFIG
    from tests.support.formats import python_model

    model = python_model(tmp_path / "user", "counter", COUNTER, COUNTER_CONFIG)
    spec = write_spec(tmp_path, model, {"concurrency": [1, 2]}, n_trials=2, name="counter",
                      load={"concurrency": [2], "sequence": {"length": {"low": 3, "high": 3}}},
                      server={"strategy": "reload"})
    tune(spec, TuneOptions(bar=False))
    got = trials(f"sqlite:///{tmp_path / 'optuna.db'}", "counter")
    assert len(got) == 2 and all(t.state == TrialState.COMPLETE for t in got), \
        [t.user_attrs.get("fail_reason") for t in got]
    client = MlflowClient(mlflow_uri)
    for t in got:
        assert client.get_run(t.user_attrs["mlflow_run_id"]).data.metrics[
            check_outputs.PASSED] == 1
