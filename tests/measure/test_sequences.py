"""Sequence loads against a real tritonserver (the wheel's) with stateful Python-backend
models made here: one server for the module.

`acc` keeps a running sum per correlation ID (START resets it, END forgets it) and answers
the sum and the number of steps so far; a step of a sequence it has not seen start, or a START
on a sequence still open, is an error response, so mixed or unflagged sequences show as
request errors. `acc` batches (max_batch_size 8, oldest strategy, 2 instances); `acc_direct`
does not batch (direct strategy). Both take uint64 IDs: tritonserver 2.51 (the wheel's) refuses
every request to a Python model whose CORRID control is TYPE_STRING ("unexpected number of
string elements 2 for inference input 'CORRID'", tritonclient's own client too), so string IDs
are checked here on the wire format.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tracker.errors import MeasurementError
from tracker.measure.entry import EntryLoad
from tracker.measure.inputs import input_specs
from tracker.measure.kinds import Sequences, kinds_for
from tracker.measure.level import LevelSettings, measure_level
from tracker.measure.loadgen import Level, LocalLoad
from tracker.measure.procs import InProcessLoad
from tracker.measure.sequence_steps import (
    CorrelationIds,
    SequencePlan,
    check_sequence_load,
    run_sequence,
    sequence_plan,
    sequence_samples,
    with_sequence,
)
from tracker.measure.sweep import sweep
from tracker.measure.transport import make_transport
from tracker.measure.windows import WindowSettings
from tracker.spec import LoadSection, ServerSection
from tracker.triton import model_config
from tracker.triton.server.local import LocalTritonServer

pytestmark = pytest.mark.triton

ACC = """
import numpy as np
import triton_python_backend_utils as pb_utils


def _one(r, name):
    v = pb_utils.get_input_tensor_by_name(r, name).as_numpy().ravel()[0]
    return v.decode() if isinstance(v, bytes) else v


class TritonPythonModel:
    def initialize(self, args):
        self.sums = {}

    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "INPUT").as_numpy()
            cid = _one(r, "CORRID")
            if _one(r, "START"):
                if cid in self.sums:
                    out.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(
                        f"sequence {cid} started twice")))
                    continue
                self.sums[cid] = [0, 0]
            if cid not in self.sums:
                out.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(
                    f"sequence {cid} was never started")))
                continue
            state = self.sums[cid]
            state[0] += int(x.ravel()[0])
            state[1] += 1
            if _one(r, "END"):
                del self.sums[cid]
            shape = x.shape
            out.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("SUM", np.full(shape, state[0], dtype=np.int64)),
                pb_utils.Tensor("COUNT", np.full(shape, state[1], dtype=np.int64))]))
        return out
"""


def controls(corrid: str) -> str:
    flags = "int32_false_true: [0, 1]"
    return ("control_input ["
            f'{{ name: "START" control [{{ kind: CONTROL_SEQUENCE_START {flags} }}] }},'
            f' {{ name: "END" control [{{ kind: CONTROL_SEQUENCE_END {flags} }}] }},'
            f' {{ name: "CORRID" control [{{ kind: CONTROL_SEQUENCE_CORRID '
            f'data_type: {corrid} }}] }}]')


IO = ('input [{ name: "INPUT" data_type: TYPE_INT32 dims: [1] }]\n'
      'output [{ name: "SUM" data_type: TYPE_INT64 dims: [1] },'
      ' { name: "COUNT" data_type: TYPE_INT64 dims: [1] }]\n')
CONFIGS = {
    "acc": (f'name: "acc" backend: "python" max_batch_size: 8\n'
            f'sequence_batching {{ oldest {{ max_candidate_sequences: 16 }}\n'
            f'{controls("TYPE_UINT64")} }}\n'
            f'instance_group [{{ count: 2 kind: KIND_CPU }}]\n{IO}'),
    "acc_direct": (f'name: "acc_direct" backend: "python" max_batch_size: 0\n'
                   f'sequence_batching {{ direct {{ }} {controls("TYPE_UINT64")} }}\n'
                   f'instance_group [{{ count: 2 kind: KIND_CPU }}]\n{IO}'),
}
STREAMED = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.sums = {}

    def execute(self, requests):
        for r in requests:
            sender = r.get_response_sender()
            get = lambda n: pb_utils.get_input_tensor_by_name(r, n).as_numpy().ravel()[0]
            cid = int(get("CORRID"))
            if get("START"):
                self.sums[cid] = 0
            if cid not in self.sums:
                sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(
                    f"sequence {cid} was never started")),
                    flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                continue
            for _ in range(2):  # each step streams two partial sums, then the final flag
                self.sums[cid] += int(get("INPUT"))
                sender.send(pb_utils.InferenceResponse(
                    [pb_utils.Tensor("SUM", np.array([self.sums[cid]], dtype=np.int64))]))
            if get("END"):
                del self.sums[cid]
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""
CONFIGS["acc_stream"] = (
    'name: "acc_stream" backend: "python" max_batch_size: 0\n'
    'model_transaction_policy { decoupled: true }\n'
    f'sequence_batching {{ direct {{ }} {controls("TYPE_UINT64")} }}\n'
    'input [{ name: "INPUT" data_type: TYPE_INT32 dims: [1] }]\n'
    'output [{ name: "SUM" data_type: TYPE_INT64 dims: [1] }]\n')
PLAIN = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUT", pb_utils.get_input_tensor_by_name(r, "X").as_numpy())]) for r in requests]
"""
CONFIGS["plain"] = ('name: "plain" backend: "python" max_batch_size: 8\n'
                    'dynamic_batching { }\n'
                    'input [{ name: "X" data_type: TYPE_FP32 dims: [4] }]\n'
                    'output [{ name: "OUT" data_type: TYPE_FP32 dims: [4] }]\n')
MODEL_PY = {"acc_stream": STREAMED, "plain": PLAIN}
FAST = {"window_ms": 300, "warmup_requests": 10, "max_tries": 5, "stability_pct": 80}
VALUES = [3, 5, 7, 11, 13, 17, 19, 23]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalTritonServer]:
    repo = tmp_path_factory.mktemp("seq_repo")
    for name, text in CONFIGS.items():
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "1" / "model.py").write_text(MODEL_PY.get(name, ACC))
        (repo / name / "config.pbtxt").write_text(text)
    with LocalTritonServer(ServerSection(startup_timeout_s=90)) as srv:
        srv.start(repo)
        yield srv


def data(tmp_path: Path, rows: list[Any]) -> Path:
    path = tmp_path / "steps.json"
    path.write_text(json.dumps({"data": rows}))
    return path


def _outputs(response: bytes) -> dict[str, int]:
    from tritonclient.grpc import service_pb2

    msg = service_pb2.ModelInferResponse.FromString(response)
    return {o.name: int(np.frombuffer(raw, dtype=np.int64)[0])
            for o, raw in zip(msg.outputs, msg.raw_output_contents, strict=True)}


@pytest.mark.parametrize("name", ["acc", "acc_direct"])
def test_each_sequence_ends_with_the_state_of_its_own_steps(server: LocalTritonServer,
                                                            tmp_path: Path, name: str) -> None:
    """8 sequences in flight on 2 instances, lengths 1-6 drawn per sequence: every finished
    sequence's last answer is the sum of exactly its own steps, and no request failed."""
    load = LoadSection(concurrency=[8], input_data=data(tmp_path, [{"INPUT": [v]} for v in VALUES]),
                       sequence={"length": {"low": 1, "high": 6}, "seed": 3}, **FAST)
    cfg = model_config.parse(CONFIGS[name])
    finished: list[tuple[int, tuple[int, ...], object]] = []

    async def run() -> Any:
        url = server.endpoints.grpc
        assert url is not None
        transport = make_transport("grpc", url, name, 10.0)
        plan = sequence_plan(cfg, load)
        assert plan is not None and not plan.string_ids
        assert kinds_for(cfg, load) == (Sequences(plan),)
        kind = Sequences(plan, on_sequence=lambda *a: finished.append(a))
        steps, _ = sequence_samples(cfg, load)
        payloads = transport.payloads(steps, {s.name: s.datatype for s in input_specs(cfg)})
        local = LocalLoad(transport, payloads, (kind,))
        settings = LevelSettings(windows=WindowSettings(**{k: v for k, v in FAST.items()
                                                           if k != "warmup_requests"}),
                                 warmup_requests=10, kinds=(kind,))
        try:
            return await measure_level(InProcessLoad(local), Level(concurrency=8), settings,
                                       transport.stats)
        finally:
            await local.close()

    m = asyncio.run(run())
    assert m.valid and m.errors == 0, (m.invalid_reason, m.first_error)
    assert len(finished) > 20
    assert {len(steps) for _, steps, _ in finished} == set(range(1, 7))
    assert len({cid for cid, _, _ in finished}) == len(finished)  # one ID per sequence
    for _, steps, response in finished:
        assert isinstance(response, bytes)
        assert _outputs(response) == {"SUM": sum(VALUES[i] for i in steps), "COUNT": len(steps)}
    assert m.sequence_throughput is not None and m.sequence_throughput > 0
    assert m.sequence_latency_p50_ms is not None and m.latency_p50_ms is not None
    assert m.sequence_latency_p99_ms >= m.sequence_latency_p50_ms >= m.latency_p50_ms  # type: ignore[operator]


def test_sweep_sends_sequences_over_processes_rates_and_http(
        server: LocalTritonServer, tmp_path: Path) -> None:
    """perf_analyzer's sequence layout; two load processes (their IDs must not collide: the
    model fails a START on an open sequence), request-rate mode, and HTTP: no request fails
    and the sequence metrics are in the catalog's names."""
    rows = [[{"INPUT": [1]}, {"INPUT": [2]}, {"INPUT": [3]}], [{"INPUT": [4]}]]
    for extra in ({"concurrency": [2, 6], "processes": 2}, {"request_rate": [100.0]},
                  {"concurrency": [3], "protocol": "http"}):
        load = LoadSection(input_data=data(tmp_path, rows), **FAST, **extra)  # type: ignore[arg-type]
        res = sweep(server.endpoints, {"acc": EntryLoad(model_config.parse(CONFIGS["acc"]), load)})
        for m in res.measurements:
            assert m.valid and m.errors == 0, (m.invalid_reason, m.first_error)
            names = m.metrics()
            for key in ("perf_sequence_throughput", "perf_sequence_latency_p50",
                        "perf_sequence_latency_p90", "perf_sequence_latency_p99"):
                assert key in names


def test_a_stateful_entry_among_several_is_sent_sequences(server: LocalTritonServer) -> None:
    """Entry models measured together (model.name a list): each entry's load kind follows its
    own config, so the stateful ones get sequences (a step outside its sequence fails on
    them) while the plain one gets plain requests, in the same windows."""
    entries = {name: EntryLoad(model_config.parse(CONFIGS[name]),
                               LoadSection(concurrency=[2, 4], **FAST,  # type: ignore[arg-type]
                                           sequence={"length": 3} if name != "plain" else None))
               for name in ("acc", "acc_direct", "plain")}
    assert [k.name for k in entries["acc"].kinds()] == ["sequences"]
    assert [k.name for k in entries["plain"].kinds()] == ["concurrency"]
    res = sweep(server.endpoints, entries)
    assert res.names == ["acc", "acc_direct", "plain"] and len(res.levels) == 2
    for level in res.levels:
        for name, m in level.measurements.items():
            assert m.valid and m.errors == 0, (name, m.invalid_reason, m.first_error)
            has_sequences = "perf_sequence_throughput" in m.metrics()
            assert has_sequences == (name != "plain"), name


def test_a_decoupled_sequence_model_streams_each_step(server: LocalTritonServer) -> None:
    """Each step of a decoupled stateful model is one gRPC stream read to its final flag (two
    responses, the tokens): the per-request figures are the streaming ones, the sequence
    figures are there, and no step failed (a step sent outside its sequence would)."""
    load = LoadSection(concurrency=[4], sequence={"length": {"low": 2, "high": 5}}, **FAST)
    res = sweep(server.endpoints,
                {"acc_stream": EntryLoad(model_config.parse(CONFIGS["acc_stream"]), load)})
    (m,) = res.measurements
    assert m.valid and m.errors == 0, (m.invalid_reason, m.first_error)
    assert m.streaming and m.output_tokens_avg == 2
    assert m.sequence_throughput is not None and m.sequence_throughput > 0
    assert m.sequence_latency_p50_ms is not None


def test_requests_without_a_sequence_fail_with_the_servers_message(
        server: LocalTritonServer) -> None:
    """What the load avoids: a request without a correlation ID fails, and the message is
    Triton's; run_sequence (a probe's whole sequence) answers with the running state."""
    url = server.endpoints.grpc
    assert url is not None
    steps = [{"INPUT": np.array([[v]], dtype=np.int32)} for v in (2, 3, 4)]
    got = run_sequence(url, "acc", steps, CorrelationIds().next())
    assert [int(o["SUM"].ravel()[0]) for o in got] == [2, 5, 9]
    with pytest.raises(Exception, match="correlation ID"):
        run_sequence(url, "acc", steps[:1], 0)


@pytest.mark.parametrize("name", ["acc", "acc_direct"])
def test_predict_sends_the_inputs_first_axis_as_the_steps_of_one_sequence(
        server: LocalTritonServer, name: str) -> None:
    """What `mlflow deployments predict` sends a stateful model: the rows of its inputs as the
    steps of one sequence (a fresh ID, start on the first, end on the last), over gRPC and
    HTTP, batching or not; each output is every step's, in order. A sequence_py-like model
    refuses a request that starts and ends a sequence at once, so one step per row is the one
    way a single predict call can ask it."""
    from tracker.deploy.inference import infer_version, to_arrays
    from tracker.errors import DeployError
    from tracker.triton.client import TritonClient
    from tracker.triton.http_client import HttpTritonClient

    cfg = model_config.parse(CONFIGS[name])
    steps = to_arrays(cfg, {"INPUT": np.array([[2], [3], [4]], dtype=np.int32)})
    http = (server.endpoints.http or "").split("://", 1)[-1]
    with TritonClient(server.endpoints) as grpc_client, HttpTritonClient(http) as http_client:
        for client in (grpc_client, http_client):
            out = infer_version(client, name, cfg, steps)  # type: ignore[arg-type]
            assert out["SUM"].ravel().tolist() == [2, 5, 9]
            assert out["COUNT"].ravel().tolist() == [1, 2, 3]
            assert out["SUM"].shape == (3, 1)
            one = infer_version(client, name, cfg, {"INPUT": steps["INPUT"][:1]})
            assert out["SUM"].ravel()[0] == one["SUM"].ravel()[0] == 2  # a fresh ID each call
        with pytest.raises(DeployError, match="the same number for every input"):
            infer_version(grpc_client, name, cfg, {"INPUT": steps["INPUT"][:0]})


def test_correlation_ids_are_unique_across_starts_and_processes() -> None:
    seen: set[int] = set()
    for process in (0, 1, 63):
        for _ in range(3):
            ids = CorrelationIds(process)
            batch = [ids.next() for _ in range(1000)]
            assert min(batch) > 0 and max(batch) < 2**63
            assert not seen.intersection(batch)
            seen.update(batch)
    with pytest.raises(MeasurementError, match="at most 64 load processes"):
        CorrelationIds(64)


def test_string_ids_go_as_string_parameters_over_grpc_and_http() -> None:
    from tritonclient.grpc import service_pb2

    plan = SequencePlan(protocol="grpc", string_ids=True)
    msg = service_pb2.ModelInferRequest.FromString(with_sequence(plan, b"", 42, True, False))
    assert msg.parameters["sequence_id"].string_param == "42"
    assert msg.parameters["sequence_start"].bool_param
    assert not msg.parameters["sequence_end"].bool_param
    head = b'{"inputs":[]}'
    http = SequencePlan(protocol="http")
    body, size = with_sequence(http, (head + b"RAW", len(head)), 7, False, True)
    assert body.endswith(b"RAW") and size is not None
    assert json.loads(body[:size])["parameters"] == {"sequence_id": 7, "sequence_start": False,
                                                     "sequence_end": True}


def test_load_sequence_on_a_model_without_a_sequence_batcher_is_refused() -> None:
    cfg = model_config.parse(f'name: "plain" backend: "python" max_batch_size: 8\n{IO}')
    load = LoadSection(sequence={"length": 4})
    with pytest.raises(MeasurementError, match="has no sequence batcher"):
        check_sequence_load(cfg, load)
