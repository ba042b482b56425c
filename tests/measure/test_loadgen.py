"""The load generator against a real tritonserver (the wheel's, Python-backend models).

One server for the module: `mm` (a batched matmul), `alltypes` (checks every input's dtype
and shape, and fails the request when one is wrong), `flaky` (fails every 5th request).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.support.levels import pick
from tracker.errors import MeasurementError
from tracker.measure.monitors import default_monitors
from tracker.measure.sweep import EntryLoad, sweep
from tracker.spec import LoadSection, ServerSection
from tracker.triton import model_config
from tracker.triton.server.local import LocalTritonServer

pytestmark = pytest.mark.triton

MM = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        self.w = np.random.default_rng(0).standard_normal((64, 16)).astype(np.float32)

    def execute(self, requests):
        xs = [pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy() for r in requests]
        y = np.concatenate(xs) @ self.w
        out, start = [], 0
        for x in xs:
            out.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUTPUT0", y[start:start + len(x)])]))
            start += len(x)
        return out
"""

TYPES = {"BOOL": "bool", "UINT8": "uint8", "UINT16": "uint16", "UINT32": "uint32",
         "UINT64": "uint64", "INT8": "int8", "INT16": "int16", "INT32": "int32",
         "INT64": "int64", "FP16": "float16", "FP32": "float32", "FP64": "float64"}
# No TYPE_STRING here: the wheel's Python-backend stub mis-decodes every BYTES tensor
# (tritonclient's own client fails the same way); test_measure_inputs checks our encoding.

ALLTYPES = """
import numpy as np
import triton_python_backend_utils as pb_utils

TYPES = @TYPES@

class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            bad = []
            for t, dt in TYPES.items():
                x = pb_utils.get_input_tensor_by_name(r, "I_" + t).as_numpy()
                if x.dtype != np.dtype(dt) or x.shape != (2, 3, 2):
                    bad.append(f"{t}: {x.dtype} {x.shape}")
            if bad:
                out.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(str(bad))))
            else:
                out.append(pb_utils.InferenceResponse(
                    [pb_utils.Tensor("OK", np.ones((2, 1), dtype=np.int32))]))
        return out
""".replace("@TYPES@", repr(TYPES))

FLAKY = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        self.n = 0

    def execute(self, requests):
        out = []
        for r in requests:
            self.n += 1
            if self.n %% 5 == 0:
                out.append(pb_utils.InferenceResponse(
                    error=pb_utils.TritonError(f"flaky: request {self.n} refused")))
            else:
                x = pb_utils.get_input_tensor_by_name(r, "X").as_numpy()
                out.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x)]))
        return out
""".replace("%%", "%")

# answers only the two rows the user's data file holds: random inputs fail every request
# (tensors through DLPack when the stub's numpy-1 glue cannot carry them, as the shim does:
# this tests the client's data, not the wheel's stub)
EXPECT = """
import numpy as np
import triton_python_backend_utils as pb_utils

ROWS = ([0.0, 1.0, 2.0, 3.0], [4.0, 5.0, 6.0, 7.0])
GLUE = int(np.__version__.split(".")[0]) < 2

class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            t = pb_utils.get_input_tensor_by_name(r, "X")
            x = np.asarray(t.as_numpy()) if GLUE else np.array(np.from_dlpack(t))  # writable
            if x.tolist() in ROWS:
                y = pb_utils.Tensor("Y", x) if GLUE else pb_utils.Tensor.from_dlpack("Y", x)
                out.append(pb_utils.InferenceResponse([y]))
            else:
                out.append(pb_utils.InferenceResponse(
                    error=pb_utils.TritonError(f"not the user's data: {x.tolist()}")))
        return out
"""

CONFIGS = {
    "mm": ('max_batch_size: 64 dynamic_batching { }\n'
           'input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [64] }]\n'
           'output [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [16] }]', MM),
    "alltypes": ('max_batch_size: 4\n'
                 + "".join(f'input {{ name: "I_{t}" data_type: TYPE_{t} dims: [3, 2] }}\n'
                           for t in TYPES)
                 + 'output [{ name: "OK" data_type: TYPE_INT32 dims: [1] }]', ALLTYPES),
    "flaky": ('max_batch_size: 0\n'
              'input [{ name: "X" data_type: TYPE_FP32 dims: [4] }]\n'
              'output [{ name: "Y" data_type: TYPE_FP32 dims: [4] }]', FLAKY),
    "expect": ('max_batch_size: 0\n'
               'input [{ name: "X" data_type: TYPE_FP32 dims: [4] }]\n'
               'output [{ name: "Y" data_type: TYPE_FP32 dims: [4] }]', EXPECT),
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalTritonServer]:
    repo = tmp_path_factory.mktemp("measure_repo")
    for name, (cfg, code) in CONFIGS.items():
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "1" / "model.py").write_text(code)
        (repo / name / "config.pbtxt").write_text(
            f'name: "{name}" backend: "python"\n'
            f'instance_group [{{ count: 1 kind: KIND_CPU }}]\n{cfg}\n')
    with LocalTritonServer(ServerSection(startup_timeout_s=90)) as srv:
        srv.start(repo)
        yield srv


def cfg(srv: LocalTritonServer, name: str) -> object:
    return model_config.parse(f'name: "{name}" backend: "python"\n{CONFIGS[name][0]}')


FAST = {"window_ms": 300, "warmup_requests": 10, "max_tries": 6, "stability_pct": 50}


def test_closed_loop_counts_agree_with_the_server(server: LocalTritonServer) -> None:
    load = LoadSection(concurrency=[1, 4], **FAST)
    mons = default_monitors(server.gpu_set(), server.endpoints.metrics, pids=server.pids)
    res = sweep(server.endpoints, {"mm": EntryLoad(cfg(server, "mm"), load)}, monitors=mons)
    assert [m.concurrency for m in res.measurements] == [1, 4]
    for m in res.measurements:
        assert m.valid and m.errors == 0, m.invalid_reason
        assert m.requests > 50 and m.server_requests is not None
        # client and server count the same span (in-flight requests at the edges only)
        assert abs(m.requests - m.server_requests) <= max(8, 0.01 * m.server_requests)
        assert m.latency_p50_ms <= m.latency_p90_ms <= m.latency_p95_ms <= m.latency_p99_ms
        assert m.server_compute_infer_ms is not None and m.server_compute_infer_ms > 0
        assert m.server_queue_ms is not None
        assert m.throughput == pytest.approx(m.requests / m.duration_s)
        assert m.client_overhead_pct is not None and 0 < m.client_overhead_pct <= 100
        assert m.monitors["cpu_used_ram"] > 10  # the server's resident memory
        assert not any(k.startswith("gpu") for k in m.monitors)  # no GPU: absent, not 0
    assert pick(res.measurements, {}, {"perf_throughput": "maximize"}).feasible


def test_every_input_dtype_reaches_the_model(server: LocalTritonServer) -> None:
    load = LoadSection(concurrency=[2], batch_size=2, **FAST)
    (m,) = sweep(server.endpoints, {
                     "alltypes": EntryLoad(cfg(server, "alltypes"), load)}).measurements
    assert m.errors == 0, m.first_error
    assert m.valid and m.throughput == pytest.approx(2 * m.requests / m.duration_s)


def test_errors_are_counted_and_make_the_level_invalid(server: LocalTritonServer) -> None:
    load = LoadSection(concurrency=[2, 4], **FAST)
    res = sweep(server.endpoints, {"flaky": EntryLoad(cfg(server, "flaky"), load)})
    (m,) = res.measurements  # the sweep stops at the invalid level
    assert not m.valid and m.errors > 0
    assert "flaky: request" in (m.first_error or "")
    assert "max_error_pct 1%" in (m.invalid_reason or "")
    assert res.stop_reason.startswith("flaky at concurrency 2 invalid")
    with pytest.raises(MeasurementError, match="no load level"):  # no level to judge by
        pick(res.measurements, {}, {"perf_throughput": "maximize"})
    tolerant = LoadSection(concurrency=[2], max_error_pct=30, **FAST)
    (ok,) = sweep(server.endpoints, {
                      "flaky": EntryLoad(cfg(server, "flaky"), tolerant)}).measurements
    assert ok.valid and ok.errors > 0 and ok.errors == pytest.approx(ok.requests / 4, rel=0.3)


@pytest.mark.parametrize(("arrival", "processes"), [("constant", 1), ("poisson", 2)])
def test_open_loop_holds_the_request_rate(server: LocalTritonServer, arrival: str,
                                          processes: int) -> None:
    load = LoadSection(request_rate=[200], arrival=arrival, processes=processes,
                       **FAST | {"window_ms": 500})
    (m,) = sweep(server.endpoints, {"mm": EntryLoad(cfg(server, "mm"), load)}).measurements
    assert m.valid and m.request_rate == 200 and m.concurrency is None
    assert m.throughput == pytest.approx(200, rel=0.15 if arrival == "constant" else 0.3)


def test_count_windows_and_http(server: LocalTritonServer) -> None:
    load = LoadSection(concurrency=[2], window_requests=150, protocol="http",
                       **{k: v for k, v in FAST.items() if k != "window_ms"})
    (m,) = sweep(server.endpoints, {"mm": EntryLoad(cfg(server, "mm"), load)}).measurements
    assert m.valid and m.errors == 0
    assert m.requests >= 3 * 150
    assert abs(m.requests - (m.server_requests or 0)) <= 8


def test_several_processes_share_the_load(server: LocalTritonServer) -> None:
    load = LoadSection(concurrency=[4], processes=2, **FAST)
    (m,) = sweep(server.endpoints, {"mm": EntryLoad(cfg(server, "mm"), load)}).measurements
    assert m.valid and m.errors == 0
    # Both processes' records are counted: one lost would miss about half the server's count.
    # The edges are looser than in one process (requests that end while the statistics call
    # is in flight, a few ms at ~2000 requests/s on a busy machine), so the bound is 10%.
    assert abs(m.requests - (m.server_requests or 0)) <= max(8, 0.1 * m.requests)


def test_user_data_is_sent(server: LocalTritonServer, tmp_path: Path) -> None:
    """`expect` fails every request that is not one of the file's rows: with the file every
    request succeeds, with random inputs (the same model, no file) none does."""
    path = tmp_path / "in.npz"
    np.savez(path, X=np.arange(8, dtype=np.float32).reshape(2, 4))
    load = LoadSection(concurrency=[1], input_data=path, **FAST)
    (m,) = sweep(server.endpoints, {"expect": EntryLoad(cfg(server, "expect"), load)}).measurements
    assert m.valid and m.requests > 0 and m.errors == 0, m.invalid_reason
    random = LoadSection(concurrency=[1], **FAST)
    (r,) = sweep(server.endpoints, {
                     "expect": EntryLoad(cfg(server, "expect"), random)}).measurements
    assert not r.valid and "not the user's data" in (r.first_error or r.invalid_reason or "")


def test_a_server_that_stops_answering_ends_with_a_timeout(server: LocalTritonServer) -> None:
    load = LoadSection(concurrency=[2, 4], request_timeout_s=1.0, **FAST)
    pids = server.pids()
    start = time.monotonic()
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        res = sweep(server.endpoints, {"mm": EntryLoad(cfg(server, "mm"), load)})
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
    assert time.monotonic() - start < 15
    (m,) = res.measurements
    assert not m.valid and "timeout" in (m.invalid_reason or "")
