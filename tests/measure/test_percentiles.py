"""Percentiles (perf_analyzer's rule) and the server-side split from statistics snapshots."""

from __future__ import annotations

import numpy as np
import pytest
from tritonclient.grpc import service_pb2

from tracker.errors import MeasurementError
from tracker.measure.percentiles import percentile_index, percentiles, summarize_latencies
from tracker.triton.statistics import ServerStats, stats_from_json, stats_from_proto


def test_percentile_index_is_perf_analyzers_rounding() -> None:
    # int(p/100*(n-1)+0.5): 100 samples -> p50 index 50 (49.5 rounds up), p99 index 98
    assert percentile_index(50, 100) == 50
    assert percentile_index(99, 100) == 98
    assert percentile_index(90, 11) == 9
    assert percentile_index(99, 1) == 0


def test_percentiles_pick_samples_not_interpolations() -> None:
    values = np.arange(1, 101)[::-1]  # 100..1, unsorted on purpose
    pct = percentiles(values)
    assert pct == {50: 51.0, 90: 90.0, 95: 95.0, 99: 99.0}


def test_percentile_rejects_empty_and_out_of_range() -> None:
    with pytest.raises(MeasurementError, match="at least one sample"):
        percentile_index(50, 0)
    with pytest.raises(MeasurementError, match=r"\[0, 100\].*p=101"):
        percentile_index(101, 10)


def test_summary_converts_ns_to_ms() -> None:
    lat = np.array([1_000_000, 2_000_000, 3_000_000, 10_000_000], dtype=np.int64)
    s = summarize_latencies(lat)
    assert s is not None
    assert s.count == 4
    assert s.avg_ms == pytest.approx(4.0)
    assert s.p50_ms == pytest.approx(3.0)  # index int(1.5+0.5)=2
    assert s.p99_ms == pytest.approx(10.0)
    assert summarize_latencies(np.array([], dtype=np.int64)) is None


def _json(count: int, queue_ns: int, infer_ns: int, name: str = "m", version: str = "1") -> dict:
    return {"model_stats": [{
        "name": name, "version": version, "inference_count": count, "execution_count": count // 2,
        "inference_stats": {
            "success": {"count": count, "ns": 10 * count},
            "fail": {"count": 1, "ns": 5},
            "queue": {"count": count, "ns": queue_ns},
            "compute_input": {"count": count, "ns": count * 1000},
            "compute_infer": {"count": count, "ns": infer_ns},
            "compute_output": {"count": count, "ns": count * 500},
        },
    }]}


def test_delta_of_two_snapshots_gives_ms_per_request() -> None:
    before = stats_from_json(_json(100, 1_000_000, 50_000_000), "m")
    after = stats_from_json(_json(300, 5_000_000, 250_000_000), "m")
    d = after - before
    assert d.success_count == 200
    assert d.queue_ms == pytest.approx(4_000_000 / 200 / 1e6)
    assert d.compute_infer_ms == pytest.approx(1.0)
    assert d.compute_input_ms == pytest.approx(0.001)
    assert d.compute_output_ms == pytest.approx(0.0005)
    assert d.fail_count == 0


def test_no_requests_means_no_server_figure_not_zero() -> None:
    assert ServerStats().queue_ms is None
    assert ServerStats().compute_infer_ms is None


def test_versions_are_summed_and_other_models_ignored() -> None:
    doc = _json(10, 100, 100)
    doc["model_stats"] += _json(30, 300, 300, version="2")["model_stats"]
    doc["model_stats"] += _json(999, 1, 1, name="other")["model_stats"]
    s = stats_from_json(doc, "m")
    assert s.success_count == 40
    assert s.queue_ns == 400


def test_unknown_model_is_an_error() -> None:
    with pytest.raises(MeasurementError, match="no statistics for model 'x'"):
        stats_from_json(_json(1, 1, 1), "x")


def test_proto_and_json_forms_agree() -> None:
    from google.protobuf import json_format

    doc = _json(42, 4200, 84000)
    resp = service_pb2.ModelStatisticsResponse()
    json_format.ParseDict(doc, resp)
    assert stats_from_proto(resp, "m") == stats_from_json(doc, "m")
    with pytest.raises(MeasurementError):
        stats_from_proto(resp, "nope")
