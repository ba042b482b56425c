"""Two independent models on one real tritonserver (the wheel's), each with its own load,
measured in the same windows (tracker.measure.sweep.sweep), and the weighted objective
over them (tracker.search.objective)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tracker.errors import MeasurementError
from tracker.feasibility import for_models
from tracker.measure.sweep import EntryLoad, sweep
from tracker.metrics import WEIGHTED_GAIN
from tracker.search.objective import Scoring, pick_best_level, weighted_gain
from tracker.spec import LoadSection, ServerSection
from tracker.triton import model_config
from tracker.triton.server.local import LocalTritonServer

pytestmark = pytest.mark.triton

CODE = """
import time
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        time.sleep(@SLEEP@)
        return [pb_utils.InferenceResponse(
            [pb_utils.Tensor("Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy())])
            for r in requests]
"""
IO = ('max_batch_size: 0\ninput [{ name: "X" data_type: TYPE_FP32 dims: [4] }]\n'
      'output [{ name: "Y" data_type: TYPE_FP32 dims: [4] }]\n')
SLEEP = {"fast": 0.0, "slow": 0.003}
FAST = {"window_ms": 400, "warmup_requests": 10, "max_tries": 6, "stability_pct": 50}


def config(name: str) -> object:
    return model_config.parse(f'name: "{name}" backend: "python"\n{IO}')


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalTritonServer]:
    repo = tmp_path_factory.mktemp("multi_repo")
    for name, sleep in SLEEP.items():
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "1" / "model.py").write_text(CODE.replace("@SLEEP@", str(sleep)))
        (repo / name / "config.pbtxt").write_text(
            f'name: "{name}" backend: "python"\n'
            f'instance_group [{{ count: 1 kind: KIND_CPU }}]\n{IO}')
    with LocalTritonServer(ServerSection(startup_timeout_s=90)) as srv:
        srv.start(repo)
        yield srv


def loads(**load: object) -> dict[str, EntryLoad]:
    return {"fast": EntryLoad(config("fast"), LoadSection(concurrency=[1, 4], **FAST | load)),
            "slow": EntryLoad(config("slow"), LoadSection(concurrency=[2], **FAST | load))}


def test_each_model_is_measured_in_the_same_windows(server: LocalTritonServer) -> None:
    seen: list[str] = []
    res = sweep(server.endpoints, loads(), on_level=lambda j: seen.append(j.level))
    assert seen == ["fast: concurrency 1, slow: concurrency 2",  # the shorter list holds
                    "fast: concurrency 4, slow: concurrency 2"]
    assert res.stop_reason == "all levels measured"
    for joint in res.levels:
        fast, slow = joint.measurements["fast"], joint.measurements["slow"]
        for name, m in joint.measurements.items():
            print(f"\n{joint.level} | {name}: {m.throughput:.1f} infer/s, p99 "
                  f"{m.latency_p99_ms:.2f} ms, server {m.server_requests} of {m.requests}, "
                  f"span {(m.end_ns or 0) - (m.start_ns or 0)} ns")
            assert m.valid and m.errors == 0, m.invalid_reason
            assert m.throughput > 20 and m.latency_p99_ms is not None
            # the server answered each model's requests in the span its client counted
            assert m.server_requests is not None
            assert abs(m.requests - m.server_requests) <= max(8, 0.02 * m.requests)
        # one set of windows: the measured spans are the same span, so they overlap
        assert fast.start_ns is not None and slow.start_ns is not None
        assert fast.end_ns is not None and slow.end_ns is not None
        assert max(fast.start_ns, slow.start_ns) < min(fast.end_ns, slow.end_ns)
        assert (fast.start_ns, fast.end_ns) == (slow.start_ns, slow.end_ns)
        # 3 ms per request, 2 in flight on one instance: the slow model is the slow one
        assert slow.latency_avg_ms is not None and slow.latency_avg_ms > 3.0
        assert slow.throughput < 2000 / 3.0 * 1.1
        metrics = joint.metrics()
        assert metrics["slow/perf_throughput"] == slow.throughput
        assert metrics["fast/perf_latency_p99"] == fast.latency_p99_ms
    assert [m.concurrency for m in res.of("slow")] == [2, 2]
    assert [m.concurrency for m in res.of("fast")] == [1, 4]

    # the weighted objective: weights and metric weights normalized, each model's gain over
    # the reference relative to the mean of the two (Model Analyzer's weighting)
    ref, cur = res.levels[0].metrics(), res.levels[1].metrics()
    objectives = {"perf_throughput": 1.0, "perf_latency_p99": 1.0}
    weights = {"fast": 3.0, "slow": 1.0}
    by_hand = sum(w / 4 * 0.5 * (
        (cur[f"{n}/perf_throughput"] - ref[f"{n}/perf_throughput"])
        / ((cur[f"{n}/perf_throughput"] + ref[f"{n}/perf_throughput"]) / 2)
        - (cur[f"{n}/perf_latency_p99"] - ref[f"{n}/perf_latency_p99"])
        / ((cur[f"{n}/perf_latency_p99"] + ref[f"{n}/perf_latency_p99"]) / 2))
        for n, w in weights.items())
    assert weighted_gain(cur, ref, weights, objectives) == pytest.approx(by_hand)
    assert weighted_gain(ref, ref, weights, objectives) == 0.0
    how = Scoring(["fast", "slow"], weights=weights, reference=ref)
    gain = {WEIGHTED_GAIN: "maximize"}
    choice = pick_best_level(res.levels, {}, gain, how)
    assert choice.feasible and choice.values[0] == max(
        weighted_gain(j.metrics(), ref, weights) for j in res.levels)
    # a per-model constraint through the one feasibility rule: the slow model's p99 bound
    p99 = min(j.measurements["slow"].latency_p99_ms or 0 for j in res.levels)
    bounded = pick_best_level(res.levels, for_models(
        {"slow/perf_latency_p99": {"max": p99 / 2}}, ["fast", "slow"]), gain, how)
    assert not bounded.feasible and bounded.violations["slow/perf_latency_p99.max"] > 0


def test_a_broken_latency_bound_of_one_model_stops_the_joint_sweep(
        server: LocalTritonServer) -> None:
    res = sweep(server.endpoints, loads(), {"slow/perf_latency_p99": {"max": 0.01}})
    assert len(res.levels) == 1
    assert res.stop_reason.startswith("latency constraint broken at fast: concurrency 1")
    assert "slow/perf_latency_p99" in res.stop_reason


def test_models_measured_together_share_their_window_settings(
        server: LocalTritonServer) -> None:
    mixed = loads()
    mixed["slow"] = EntryLoad(config("slow"), LoadSection(concurrency=[2], **FAST | {
        "window_ms": 900}))
    with pytest.raises(MeasurementError, match=r"load\.window_ms must be the same"):
        sweep(server.endpoints, mixed)
    with pytest.raises(MeasurementError, match="no model 'absent'"):
        sweep(server.endpoints, {**loads(), "absent": loads()["fast"]})

