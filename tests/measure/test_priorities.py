"""Request priorities (load.priorities): which request goes at which level, the level written
into gRPC and HTTP requests as Triton reads it, read back per answered request, and the figures
split per level (``<metric>/priority_<level>``)."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
from tritonclient.grpc import service_pb2

from tracker.errors import MeasurementError
from tracker.feasibility import stops_sweep
from tracker.measure.kinds import Priorities, kinds_for
from tracker.measure.priorities import MIN_PASS, level_of, level_order, prioritized
from tracker.measure.transport import grpc_payloads, http_payloads
from tracker.measure.windows import Window, WindowRun, WindowSettings, merge
from tracker.metrics import lookup, priority_level
from tracker.spec.sections import LoadSection
from tracker.triton import model_config

SHARES = {1: 0.25, 2: 0.75}


def _samples(n: int) -> list[dict[str, np.ndarray]]:
    return [{"INPUT0": np.full((1, 4), i, dtype=np.float32)} for i in range(n)]


def test_every_pass_sends_each_level_its_share_and_every_slot_about_it() -> None:
    order = level_order(MIN_PASS, SHARES)
    assert Counter(order) == {1: 252, 2: 757}  # largest remainder of 252.25 and 756.75
    assert level_order(MIN_PASS, SHARES) == order  # seeded
    for slots in (2, 4, 8, 16):  # a closed-loop slot's stride through the pass
        share = Counter(order[0::slots])[1] / len(order[0::slots])
        assert 0.15 < share < 0.35, (slots, share)
    assert set(order[:40]) == {1, 2}  # interleaved, not one block per level


def test_a_grpc_request_carries_its_level_as_triton_reads_it() -> None:
    payloads = grpc_payloads("m", _samples(3), {"INPUT0": "FP32"})
    sent = prioritized(payloads, SHARES, "grpc")
    assert len(sent) == 3 * -(-MIN_PASS // 3)  # whole passes of the three requests
    assert len({id(p) for p in sent}) == 6  # one copy per request and level, not per position
    for k, payload in enumerate(sent[:12]):
        req = service_pb2.ModelInferRequest.FromString(payload)
        level = req.parameters["priority"].uint64_param
        assert level in (1, 2) and level_of(payload, (1, 2), "grpc") == level
        assert req.model_name == "m"  # the request as it was, plus its level
        assert req.raw_input_contents[0] == np.full((1, 4), k % 3, np.float32).tobytes()
    assert Counter(level_of(p, (1, 2), "grpc") for p in sent) == Counter(
        level_order(len(sent), SHARES))
    assert level_of(payloads[0], (1, 2), "grpc") == 0  # a request sent without a level


def test_an_http_request_carries_its_level_in_its_json_parameters() -> None:
    (body, size), = http_payloads(_samples(1), {"INPUT0": "FP32"})
    sent = prioritized([(body, size)], {1: 0.5, 12: 0.5}, "http")
    levels = set()
    for new_body, new_size in sent[:20]:
        header = json.loads(new_body[:new_size])
        assert header["parameters"]["binary_data_output"] is True  # tritonclient's own kept
        levels.add(header["parameters"]["priority"])
        assert new_body[new_size:] == body[size:]  # the tensor bytes as they were
        assert level_of((new_body, new_size), (1, 12), "http") == header["parameters"][
            "priority"]
    assert levels == {1, 12}
    assert level_of((body, size), (1, 12), "http") == 0


def test_the_figures_are_split_per_level() -> None:
    ms = 1_000_000
    lat = np.array([1, 2, 3, 4, 10, 20, 30, 40], dtype=np.int64) * ms
    level = np.array([1, 1, 1, 1, 2, 2, 2, 2], dtype=np.int64)
    windows = [Window(start_ns=0, end_ns=10**9, latencies_ns=lat, fields={"priority": level})
               for _ in range(3)]
    m = merge(WindowRun(windows, stable=True), settings=WindowSettings(), batch_size=2,
              concurrency=8, kinds=[Priorities(priority_levels=(1, 2, 3))])
    got = m.metrics()
    assert got["perf_throughput/priority_1"] == pytest.approx(8.0)  # 4 requests x 2 / 1 s
    assert got["perf_latency_avg/priority_1"] == pytest.approx(2.5)
    assert got["perf_latency_p99/priority_2"] > 30
    assert got["perf_latency_p50/priority_1"] < got["perf_latency_p50/priority_2"]
    assert got["perf_throughput/priority_3"] == 0.0  # nothing sent at 3: no latency either
    assert "perf_latency_p99/priority_3" not in got
    assert got["perf_throughput"] == pytest.approx(16.0)  # the whole load as before


def test_per_level_names_resolve_like_their_metric() -> None:
    for name in ("perf_latency_p99/priority_1", "a/perf_throughput/priority_12"):
        found = lookup(name)
        assert found is not None and found.unit in ("ms", "infer/s")
    assert lookup("perf_latency_p99/priority_1").better == "minimize"  # type: ignore[union-attr]
    assert lookup("gpu_utilization/priority_1") is None  # not split per level
    assert lookup("perf_latency_p99/priority_0") is None  # levels start at 1
    assert priority_level("a/perf_latency_p99/priority_3") == 3
    bound = {"a/perf_latency_p99/priority_3": {"max": 10}}  # a level's latency stops a sweep
    assert stops_sweep({"a/perf_latency_p99/priority_3": 12.0}, bound)


def test_the_kind_applies_to_a_load_with_priorities_and_refuses_a_stateful_model() -> None:
    cfg = model_config.parse('name: "m" max_batch_size: 4 dynamic_batching {} '
                             'input [{name: "x" data_type: TYPE_FP32 dims: [2]}]')
    plain = LoadSection()
    assert not any(isinstance(k, Priorities) for k in kinds_for(cfg, plain))
    load = LoadSection(priorities=SHARES, protocol="http")
    (kind,) = [k for k in kinds_for(cfg, load) if isinstance(k, Priorities)]
    assert kind == Priorities(priority_levels=(1, 2), protocol="http")
    assert "priority" in kind.perf_analyzer_lacks
    cfg.sequence_batching.SetInParent()
    with pytest.raises(MeasurementError, match="stateful"):
        kinds_for(cfg, load)
