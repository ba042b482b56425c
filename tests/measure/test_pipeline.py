"""Where the time goes in a pipeline, on a real tritonserver (the wheel's): an ensemble of two
Python-backend steps, ``step_a`` (slow: sleeps 4 ms per execution, dynamic batching) then
``step_b`` (fast). The load drives the ensemble; each step's split comes from the same
all-models statistics request at every window boundary (EntryLoad.models)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tracker import metrics as catalog
from tracker.errors import MeasurementError
from tracker.feasibility import named_violations
from tracker.measure.sweep import EntryLoad, sweep
from tracker.spec import LoadSection, ServerSection
from tracker.triton import model_config
from tracker.triton.server.local import LocalTritonServer

pytestmark = pytest.mark.triton

STEP = """
import time
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        time.sleep(@SLEEP@)
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "@IN@").as_numpy()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("@OUT@", x + 1)]))
        return out
"""

ENSEMBLE = """name: "ensemble" platform: "ensemble" max_batch_size: 8
input [{ name: "IN" data_type: TYPE_FP32 dims: [4] }]
output [{ name: "OUT" data_type: TYPE_FP32 dims: [4] }]
ensemble_scheduling { step [
  { model_name: "step_a" model_version: -1
    input_map { key: "A_IN" value: "IN" } output_map { key: "A_OUT" value: "mid" } },
  { model_name: "step_b" model_version: -1
    input_map { key: "B_IN" value: "mid" } output_map { key: "B_OUT" value: "OUT" } } ] }
"""

STEPS = {"step_a": (0.004, "A_IN", "A_OUT"), "step_b": (0.0, "B_IN", "B_OUT")}
FAST = {"window_ms": 400, "warmup_requests": 20, "max_tries": 6, "stability_pct": 50}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalTritonServer]:
    repo = tmp_path_factory.mktemp("pipeline_repo")
    for name, (sleep, inp, out) in STEPS.items():
        (repo / name / "1").mkdir(parents=True)
        code = STEP.replace("@SLEEP@", str(sleep)).replace("@IN@", inp).replace("@OUT@", out)
        (repo / name / "1" / "model.py").write_text(code)
        (repo / name / "config.pbtxt").write_text(
            f'name: "{name}" backend: "python" max_batch_size: 8 dynamic_batching {{ }}\n'
            'instance_group [{ count: 1 kind: KIND_CPU }]\n'
            f'input [{{ name: "{inp}" data_type: TYPE_FP32 dims: [4] }}]\n'
            f'output [{{ name: "{out}" data_type: TYPE_FP32 dims: [4] }}]\n')
    (repo / "ensemble" / "1").mkdir(parents=True)
    (repo / "ensemble" / "config.pbtxt").write_text(ENSEMBLE)
    with LocalTritonServer(ServerSection(startup_timeout_s=90)) as srv:
        srv.start(repo)
        yield srv


def test_each_step_is_measured_in_the_entry_models_windows(server: LocalTritonServer) -> None:
    load = LoadSection(concurrency=[1, 4], **FAST)
    res = sweep(server.endpoints, {"ensemble": EntryLoad(model_config.parse(ENSEMBLE), load,
                models=["step_a", "step_b"])})
    assert [m.concurrency for m in res.measurements] == [1, 4]
    for m in res.measurements:
        assert m.valid, m.invalid_reason
        print(f"\n{m.level}: {m.throughput:.1f} infer/s, avg {m.latency_avg_ms:.2f} ms, "
              f"p99 {m.latency_p99_ms:.2f} ms; ensemble queue {m.server_queue_ms:.3f} "
              f"infer {m.server_compute_infer_ms:.3f}")
        for name, s in m.steps.items():
            print(f"  {name}: {s.requests_per_s:.1f} req/s queue {s.queue_ms:.3f} "
                  f"in {s.compute_input_ms:.3f} infer {s.compute_infer_ms:.3f} "
                  f"out {s.compute_output_ms:.3f} batch {s.batch_size:.2f}")
        assert list(m.steps) == ["step_a", "step_b"]
        a, b = m.steps["step_a"], m.steps["step_b"]
        # every request of the ensemble passed through both steps in the same windows
        for s in (a, b):
            assert s.requests == pytest.approx(m.requests, abs=max(8, 0.02 * m.requests))
            assert s.requests_per_s == pytest.approx(m.throughput, rel=0.05)
            assert s.failures == 0 and s.executions > 0
            assert s.batch_size is not None and 1.0 <= s.batch_size <= 8.0
        # the slow step is where the time goes: 4 ms of sleep per execution
        assert a.compute_infer_ms is not None and b.compute_infer_ms is not None
        assert a.compute_infer_ms > 3.5 and a.compute_infer_ms > 3 * b.compute_infer_ms
        # the steps' server times account for the ensemble's latency (the rest is the
        # ensemble's own scheduling and the network), never more than it
        steps_ms = a.server_ms + b.server_ms
        assert m.latency_avg_ms is not None
        assert 0.6 * m.latency_avg_ms <= steps_ms <= 1.05 * m.latency_avg_ms
        # names of the catalog's patterns, and they judge as constraints like any metric
        got = m.metrics()
        for figure in catalog.STEP_METRICS:
            assert catalog.step_metric("step_a", figure.name) in got
        assert got["model/step_a/compute_infer_ms"] == a.compute_infer_ms
        assert named_violations(got, {"model/step_a/compute_infer_ms": {"max": 1.0}})[
            "model/step_a/compute_infer_ms.max"] > 0
    # under concurrency 4 the slow step's dynamic batcher batches; at 1 it cannot
    one, four = res.measurements
    assert one.steps["step_a"].batch_size == pytest.approx(1.0, abs=0.05)
    assert four.steps["step_a"].batch_size is not None
    assert four.steps["step_a"].batch_size > 1.3


def test_an_unknown_step_is_named_before_any_load(server: LocalTritonServer) -> None:
    load = LoadSection(concurrency=[1], **FAST)
    with pytest.raises(MeasurementError, match=r"no model 'no_such_step'.*step_a"):
        sweep(server.endpoints, {"ensemble": EntryLoad(model_config.parse(ENSEMBLE), load,
              models=["step_a", "no_such_step"])})


def test_the_split_over_http_reads_the_same_counters(server: LocalTritonServer) -> None:
    load = LoadSection(concurrency=[2], protocol="http", **FAST)
    (m,) = sweep(server.endpoints, {"ensemble": EntryLoad(model_config.parse(ENSEMBLE), load,
                 models=["step_b", "step_a"])}).measurements
    assert m.valid, m.invalid_reason
    assert list(m.steps) == ["step_b", "step_a"]  # in the order asked
    for s in m.steps.values():
        assert s.requests_per_s == pytest.approx(m.throughput, rel=0.05)
    assert (m.steps["step_a"].compute_infer_ms or 0) > 3.5
