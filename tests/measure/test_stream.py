"""Streaming measurement against a real tritonserver (the wheel's) with decoupled
Python-backend models: one server for the module.

- `gen`: a prompt (INT32 [-1]) and a number of tokens to generate (MAX_TOKENS); it sleeps
  PREFILL_S per prompt token before the first token, then TOKEN_S before each token, one
  token per response, then the final flag alone;
- `chunks`: the same, but CHUNK tokens per response (output TOKENS of shape [CHUNK]) and the
  final flag on the last response;
- `broken`: one token, then an error response.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.support.levels import pick
from tracker.errors import MeasurementError
from tracker.measure.kinds.streaming import inter_token_ns
from tracker.measure.sweep import EntryLoad, sweep
from tracker.measure.types import Measurement
from tracker.spec import LoadSection, ServerSection
from tracker.triton import model_config
from tracker.triton.server.local import LocalTritonServer

pytestmark = pytest.mark.triton

PREFILL_S, TOKEN_S, CHUNK = 0.00005, 0.002, 4

GEN = """
import time
import numpy as np
import triton_python_backend_utils as pb_utils

PREFILL_S, TOKEN_S, CHUNK = @COSTS@

class TritonPythonModel:
    def initialize(self, args):
        self.chunked = args["model_name"] == "chunks"

    def execute(self, requests):
        for r in requests:
            sender = r.get_response_sender()
            prompt = pb_utils.get_input_tensor_by_name(r, "PROMPT").as_numpy()
            n = int(pb_utils.get_input_tensor_by_name(r, "MAX_TOKENS").as_numpy().ravel()[0])
            time.sleep(PREFILL_S * prompt.size)
            for i in range(n):
                time.sleep(TOKEN_S)
                size = CHUNK if self.chunked else 1
                out = pb_utils.InferenceResponse(
                    [pb_utils.Tensor("TOKENS", np.full([size], i, dtype=np.int32))])
                last = self.chunked and i == n - 1
                sender.send(out, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
                            if last else 0)
            if not self.chunked:
                sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
""".replace("@COSTS@", repr((PREFILL_S, TOKEN_S, CHUNK)))

BROKEN = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        for r in requests:
            sender = r.get_response_sender()
            sender.send(pb_utils.InferenceResponse(
                [pb_utils.Tensor("TOKENS", np.zeros([1], dtype=np.int32))]))
            sender.send(pb_utils.InferenceResponse(
                error=pb_utils.TritonError("broken: generation failed after one token")),
                flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""

IO = ('max_batch_size: 0\nmodel_transaction_policy { decoupled: true }\n'
      'input [{ name: "PROMPT" data_type: TYPE_INT32 dims: [-1] },\n'
      '       { name: "MAX_TOKENS" data_type: TYPE_INT32 dims: [1] }]\n'
      'output [{ name: "TOKENS" data_type: TYPE_INT32 dims: [-1] }]')
MODELS = {"gen": GEN, "chunks": GEN, "broken": BROKEN}
FAST = {"window_ms": 400, "warmup_requests": 5, "max_tries": 6, "stability_pct": 50}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalTritonServer]:
    repo = tmp_path_factory.mktemp("stream_repo")
    for name, code in MODELS.items():
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "1" / "model.py").write_text(code)
        (repo / name / "config.pbtxt").write_text(
            f'name: "{name}" backend: "python"\n'
            f'instance_group [{{ count: 2 kind: KIND_CPU }}]\n{IO}\n')
    with LocalTritonServer(ServerSection(startup_timeout_s=90)) as srv:
        srv.start(repo)
        yield srv


def cfg(name: str) -> object:
    return model_config.parse(f'name: "{name}" backend: "python"\n{IO}')


def data_file(tmp_path: Path, rows: list[tuple[int, int]]) -> Path:
    """perf_analyzer's JSON layout: a prompt of `length` token ids and a token count."""
    path = tmp_path / "prompts.json"
    path.write_text(json.dumps({"data": [
        {"PROMPT": {"content": list(range(length)), "shape": [length]}, "MAX_TOKENS": [tokens]}
        for length, tokens in rows]}))
    return path


def test_streams_record_first_token_gaps_and_tokens(server: LocalTritonServer,
                                                    tmp_path: Path) -> None:
    load = LoadSection(concurrency=[1, 4], input_data=data_file(tmp_path, [(32, 8), (64, 8)]),
                       **FAST)
    res = sweep(server.endpoints, {"gen": EntryLoad(cfg("gen"), load)})
    assert [m.concurrency for m in res.measurements] == [1, 4]
    for m in res.measurements:
        assert m.valid and m.errors == 0, m.invalid_reason
        assert m.streaming and m.output_tokens_avg == 8  # every token of every request
        # requests/s and end-to-end latency ride on the unary names
        assert m.throughput == pytest.approx(m.requests / m.duration_s)
        assert m.output_token_throughput == pytest.approx(8 * m.throughput)
        assert m.ttft_p50_ms is not None and m.latency_p50_ms is not None
        assert m.ttft_p50_ms >= TOKEN_S * 1000 and m.ttft_p50_ms < m.latency_p50_ms
        assert m.ttft_p50_ms <= m.ttft_p90_ms <= m.ttft_p95_ms <= m.ttft_p99_ms  # type: ignore[operator]
        # 7 gaps of one sleep each, plus the stub's and the stream's overhead
        assert m.itl_p50_ms is not None and TOKEN_S * 1000 <= m.itl_p50_ms < 4 * TOKEN_S * 1000
        # e2e >= TTFT + 7 gaps
        assert m.latency_p50_ms >= m.ttft_p50_ms + 7 * TOKEN_S * 1000 * 0.9
        # the server counts the same requests (one stream = one request to Triton)
        assert m.server_requests is not None
        assert abs(m.requests - m.server_requests) <= max(6, 0.02 * m.requests)
        names = m.metrics()
        for key in ("perf_time_to_first_token_p99", "perf_inter_token_latency_p50",
                    "perf_output_token_throughput", "perf_throughput", "perf_latency_p99"):
            assert key in names
    low, high = res.measurements
    assert high.ttft_p50_ms > low.ttft_p50_ms  # type: ignore[operator]  # 4 streams, 2 instances
    choice = pick(res.measurements, {"perf_time_to_first_token_p99": {"max": 1e6}},
                             {"perf_output_token_throughput": "maximize"})
    assert choice.feasible and choice.metrics["perf_output_token_throughput"] > 0


def test_drawn_prompt_lengths_move_time_to_first_token(server: LocalTritonServer) -> None:
    """Prefill costs PREFILL_S per prompt token: 400 tokens add ~19 ms over 16 to the first
    token and nothing to the gaps after it; output lengths are drawn from a range."""
    def measure(prompt: int) -> Measurement:
        load = LoadSection.model_validate({
            "concurrency": [1], **FAST, "stream": {
                "input_tokens": {"input": "PROMPT", "length": prompt},
                "output_tokens": {"input": "MAX_TOKENS", "length": {"low": 4, "high": 12}},
                "samples": 40}})
        (m,) = sweep(server.endpoints, {"gen": EntryLoad(cfg("gen"), load)}).measurements
        assert m.valid, m.invalid_reason
        return m

    short, long = measure(16), measure(400)
    assert long.ttft_p50_ms is not None and short.ttft_p50_ms is not None
    extra = long.ttft_p50_ms - short.ttft_p50_ms
    assert 0.5 * 384 * PREFILL_S * 1000 < extra < 3 * 384 * PREFILL_S * 1000 + 5
    assert short.output_tokens_avg is not None and 4 <= short.output_tokens_avg <= 12
    assert short.output_tokens_avg != pytest.approx(4)  # drawn from a range, not fixed


def test_tokens_counted_by_a_named_output(server: LocalTritonServer, tmp_path: Path) -> None:
    path = data_file(tmp_path, [(8, 5)])
    by_output = LoadSection.model_validate({"concurrency": [2], "input_data": str(path), **FAST,
                                            "stream": {"tokens": "TOKENS"}})
    (m,) = sweep(server.endpoints, {"chunks": EntryLoad(cfg("chunks"), by_output)}).measurements
    assert m.valid and m.output_tokens_avg == 5 * CHUNK, m.invalid_reason
    # 20 tokens in 5 responses: the gaps are per token, a quarter of the response gaps
    by_response = LoadSection(concurrency=[2], input_data=path, **FAST)
    (r,) = sweep(server.endpoints, {"chunks": EntryLoad(cfg("chunks"), by_response)}).measurements
    assert r.output_tokens_avg == 5
    assert m.itl_p50_ms < r.itl_p50_ms / 2  # type: ignore[operator]
    with pytest.raises(MeasurementError, match=r"load\.stream\.tokens names output 'NOPE'"):
        sweep(server.endpoints, {"chunks": EntryLoad(cfg("chunks"), LoadSection.model_validate(
            {"concurrency": [1], "stream": {"tokens": "NOPE"}}))})


def test_streams_at_a_poisson_rate_over_two_processes(server: LocalTritonServer,
                                                      tmp_path: Path) -> None:
    load = LoadSection(request_rate=[40], arrival="poisson", processes=2,
                       input_data=data_file(tmp_path, [(8, 4)]), **FAST | {"window_ms": 800})
    (m,) = sweep(server.endpoints, {"gen": EntryLoad(cfg("gen"), load)}).measurements
    assert m.valid and m.streaming and m.request_rate == 40, m.invalid_reason
    assert m.throughput == pytest.approx(40, rel=0.35)
    assert m.output_tokens_avg == 4 and m.ttft_p50_ms is not None


def test_an_error_response_fails_the_request(server: LocalTritonServer, tmp_path: Path) -> None:
    load = LoadSection(concurrency=[2, 4], input_data=data_file(tmp_path, [(4, 1)]), **FAST)
    res = sweep(server.endpoints, {"broken": EntryLoad(cfg("broken"), load)})
    (m,) = res.measurements
    assert not m.valid and m.errors > 0
    assert "broken: generation failed after one token" in (m.first_error or "")
    assert res.stop_reason.startswith("broken at concurrency 2 invalid")


def test_a_decoupled_model_cannot_be_sent_unary_requests(server: LocalTritonServer,
                                                         tmp_path: Path) -> None:
    path = data_file(tmp_path, [(4, 1)])
    off = LoadSection.model_validate({"concurrency": [1], "input_data": str(path),
                                      "stream": {"enabled": False}})
    with pytest.raises(MeasurementError, match=r"load\.stream\.enabled is false, but model 'gen'"):
        sweep(server.endpoints, {"gen": EntryLoad(cfg("gen"), off)})
    http = LoadSection(concurrency=[1], input_data=path, protocol="http")
    with pytest.raises(MeasurementError, match=r"load\.protocol must be 'grpc'"):
        sweep(server.endpoints, {"gen": EntryLoad(cfg("gen"), http)})


def test_inter_token_latency_is_aipers_per_request_rule() -> None:
    span = np.array([90, 10, 0, 50], dtype=np.int64)
    tokens = np.array([10, 2, 1, 0], dtype=np.int64)
    # (last - first) / (tokens - 1); requests of fewer than 2 tokens have none
    assert inter_token_ns(span, tokens).tolist() == [10, 10]
