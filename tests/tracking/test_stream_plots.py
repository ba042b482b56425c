"""A streaming study's TTFT/ITL plot, read back from real MLflow runs (sqlite), and the view's
extra charts."""

from __future__ import annotations

from pathlib import Path

from mlflow import MlflowClient

from tracker.measure.types import Measurement
from tracker.tracking import runs, stream_plots, view
from tracker.tracking.entry_names import entry_names
from tracker.tracking.report import write_report
from tracker.trial_record import TrialRow
from tracker.triton.configuration import Configuration

ONE = entry_names(["storyteller"], Configuration((), ("storyteller",)).metric_name)


def _trial_run(client: MlflowClient, experiment: str, ttft: list[float]) -> str:
    run_id = client.create_run(experiment).info.run_id
    levels = [Measurement(concurrency=c, throughput=10.0 * c, latency_p99_ms=5.0,
                          ttft_p99_ms=t, itl_p50_ms=2.0 + c / 8, streaming=True)
              for c, t in zip((1, 4, 16), ttft, strict=True)]
    runs.log_metrics(client, run_id, levels[0].metrics(), extra=runs.sweep_metrics(levels))
    return run_id


def test_ttft_and_itl_against_concurrency_per_trial(mlflow_uri: str, tmp_path: Path) -> None:
    client = MlflowClient(mlflow_uri)
    exp = client.create_experiment("stream")
    rows = [TrialRow(0, "COMPLETE", {}, [1.0], {"perf_time_to_first_token_p99": 20.0},
                     True, baseline=True, run_id=_trial_run(client, exp, [20.0, 60.0, 250.0])),
            TrialRow(1, "COMPLETE", {}, [2.0], {"perf_time_to_first_token_p99": 9.0},
                     True, run_id=_trial_run(client, exp, [9.0, 30.0, 120.0])),
            TrialRow(2, "FAIL", {})]
    assert stream_plots.is_streaming(rows) and not stream_plots.is_streaming(rows[2:])
    curves = stream_plots.sweep_curves(client, rows)
    assert set(curves) == {"trial 0 (default)", "trial 1"}  # the failed trial has none
    assert curves["trial 1"][stream_plots.TTFT] == [(1, 9.0), (4, 30.0), (16, 120.0)]
    assert curves["trial 0 (default)"][stream_plots.ITL] == [(1, 2.125), (4, 2.5), (16, 4.0)]
    files = write_report(rows, {"perf_output_token_throughput": "maximize"},
                         {"perf_time_to_first_token_p99": {"max": 200}}, tmp_path / "r",
                         entries=ONE, curves=curves)
    assert files["plots/streaming.png"].read_bytes()[:4] == b"\x89PNG"
    assert "cdn.plot.ly" in files["plots/streaming.html"].read_text()
    assert "streaming" in files["report.html"].read_text()
    assert "plots/streaming.png" not in write_report(rows, {"perf_throughput": "maximize"}, {},
                                                     tmp_path / "plain", entries=ONE)


def test_view_adds_token_columns_and_charts_for_streams() -> None:
    plain = view.view_state("p", ["instance_group.count"], {"perf_throughput": "maximize"})
    stream = view.view_state("p", ["instance_group.count"],
                             {"perf_output_token_throughput": "maximize"}, streaming=True)
    keys = [c.get("metricKey") for c in stream["compareRunCharts"]]  # type: ignore[attr-defined]
    assert "sweep/perf_time_to_first_token_p99" in keys
    assert "sweep/perf_inter_token_latency_p50" in keys
    assert "metrics.`perf_time_to_first_token_p99`" in stream["selectedColumns"]  # type: ignore[operator]
    assert len(plain["compareRunCharts"]) + 2 == len(stream["compareRunCharts"])  # type: ignore[arg-type]


def test_the_report_and_view_read_what_each_load_kind_says_it_adds() -> None:
    """A load kind declares the metrics it adds (tracker/measure/kinds/load_kind.py); the report
    and the view draw and show what it declares, and the declaration is what it fills."""
    import numpy as np

    from tracker.measure.kinds import KINDS, Streaming
    from tracker.metrics import NAMES

    for kind in KINDS.values():
        assert set(kind.metrics) <= set(NAMES), kind.name
        assert set(kind.shown) | set(kind.plotted) <= set(kind.metrics), kind.name
    m = Measurement(concurrency=2, duration_s=1.0, latency_p99_ms=5.0)
    before = set(m.metrics())
    Streaming().add_metrics(m, {"ttft_ns": np.array([1_000_000, 3_000_000], dtype=np.int64),
                                "span_ns": np.array([4_000_000, 8_000_000], dtype=np.int64),
                                "tokens": np.array([5, 9], dtype=np.int64)})
    assert set(m.metrics()) - before == set(Streaming.metrics)
    assert Streaming.plotted == (stream_plots.TTFT, stream_plots.ITL)
    state = view.view_state("p", [], {"perf_throughput": "maximize"}, streaming=True)
    charted = [c.get("metricKey") for c in state["compareRunCharts"]]  # type: ignore[attr-defined]
    assert [f"sweep/{m}" for m in Streaming.plotted] == charted[-2:]
    # any metric the kind adds marks a streaming study, not TTFT alone
    row = TrialRow(0, "COMPLETE", {}, [1.0], {"perf_output_token_throughput": 50.0}, True)
    assert stream_plots.is_streaming([row])
