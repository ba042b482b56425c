"""perf_analyzer's CSV: our writer uses its columns; its files parse into Measurements."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from tracker.errors import MeasurementError
from tracker.measure.csvio import dumps, loads, read_csv, write_csv
from tracker.measure.types import Measurement

# The header perf_analyzer writes with -f FILE --verbose-csv (its report writer), in order.
PA_HEADER = ("Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,"
             "Server Compute Input,Server Compute Infer,Server Compute Output,Client Recv,"
             "p50 latency,p90 latency,p95 latency,p99 latency,Avg latency,request/response,"
             "response wait")

# A file in perf_analyzer's format, rows sorted by throughput as perf_analyzer does, with the
# --collect-metrics GPU columns Model Analyzer asks for.
PA_FILE = (
    PA_HEADER + ",Avg GPU Utilization,Avg GPU Power Usage,Max GPU Memory Usage,Total GPU Memory\n"
    "1,69.2,225,2148,64,206,11781,19,0,13891,18795,19753,21018,14443,225,14218,"
    "GPU-aa:0.5;GPU-bb:0.7;,GPU-aa:91.5;GPU-bb:100;,GPU-aa:1000000000;GPU-bb:2000000000;,"
    "GPU-aa:16000000000;\n"
    "4,84.2,279,1604,33669,233,11731,18,1,47045,56545,59225,64886,47535,280,47255,,,,\n"
)


def test_reads_perf_analyzer_file_into_measurements(tmp_path: Path) -> None:
    path = tmp_path / "perf.csv"
    path.write_text(PA_FILE)
    ms = read_csv(path)
    assert [m.concurrency for m in ms] == [1, 4]
    m = ms[0]
    assert m.source == "perf_analyzer" and m.request_rate is None
    assert m.throughput == pytest.approx(69.2)
    assert m.latency_p50_ms == pytest.approx(13.891)
    assert m.latency_p99_ms == pytest.approx(21.018)
    assert m.latency_avg_ms == pytest.approx(14.443)
    assert m.server_queue_ms == pytest.approx(0.064)
    assert m.server_compute_infer_ms == pytest.approx(11.781)
    assert m.client_send_ms == pytest.approx(0.225)
    assert m.monitors["gpu_utilization"] == pytest.approx(60.0)
    assert m.monitors["gpu_power_usage"] == pytest.approx(191.5)
    assert m.monitors["gpu_used_memory"] == pytest.approx(3000.0)
    assert ms[1].monitors == {}  # empty cells: not measured, not zero
    assert ms[1].metrics()["perf_latency_p99"] == pytest.approx(64.886)


def test_request_rate_files_and_plain_csv() -> None:
    text = ("Request Rate,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,"
            "Server Compute Input,Server Compute Infer,Server Compute Output,Client Recv,"
            "p50 latency,p90 latency,p95 latency,p99 latency\n"
            "100,99.8,10,500,40,20,3000,10,2,3500,3900,4000,4500\n")
    (m,) = loads(text)
    assert m.request_rate == 100.0 and m.concurrency is None
    assert m.latency_avg_ms is None  # not in a non-verbose file
    assert m.latency_p90_ms == pytest.approx(3.9)


def test_bad_files_say_what_is_wrong() -> None:
    with pytest.raises(MeasurementError, match="'Concurrency' or 'Request Rate'"):
        loads("a,b\n1,2\n")
    with pytest.raises(MeasurementError, match=r"line 2.*'p50 latency'.*'fast'"):
        loads(PA_HEADER + "\n1,2,3,4,5,6,7,8,9,fast,1,1,1,1,1,1\n")


def _measured(concurrency: int, tput: float) -> Measurement:
    return Measurement(concurrency=concurrency, throughput=tput, latency_avg_ms=2.5,
                       latency_p50_ms=2.0, latency_p90_ms=3.0, latency_p95_ms=3.5,
                       latency_p99_ms=4.25, server_queue_ms=0.5, server_compute_input_ms=0.1,
                       server_compute_infer_ms=1.0, server_compute_output_ms=0.05,
                       requests=100, stable=True)


def test_written_file_has_perf_analyzers_columns_and_round_trips(tmp_path: Path) -> None:
    ms = [_measured(1, 400.0), _measured(4, 1200.5),
          Measurement(concurrency=16, valid=False, invalid_reason="server gone")]
    path = write_csv(ms, tmp_path / "out" / "perf.csv")
    df = pd.read_csv(path)
    assert list(df.columns) == PA_HEADER.split(",")
    assert list(df["Concurrency"]) == [1, 4]  # the level without latencies has no row
    assert df["p99 latency"].iloc[0] == 4250  # microseconds, like perf_analyzer
    assert df["Network+Server Send/Recv"].iloc[0] == 850  # 2.5 - (0.5+0.1+1.0+0.05) ms
    back = read_csv(path, source="builtin")
    assert back[1].throughput == pytest.approx(1200.5)
    assert back[1].server_compute_infer_ms == pytest.approx(1.0)
    assert back[1].latency_avg_ms == pytest.approx(2.5)


def test_missing_server_figures_are_empty_cells() -> None:
    m = _measured(2, 10.0)
    m.server_queue_ms = None
    text = dumps([m])
    row = text.splitlines()[1].split(",")
    assert row[4] == ""
    (back,) = loads(text)
    assert back.server_queue_ms is None


def test_request_rate_levels_write_a_request_rate_column() -> None:
    m = _measured(1, 50.0)
    m.concurrency, m.request_rate = None, 50.0
    assert dumps([m]).startswith("Request Rate,Inferences/Second,")


def test_unmeasured_client_times_are_empty_cells_not_zeros(tmp_path: Path) -> None:
    """The built-in client does not time serialization apart: no made-up zeros in the file,
    and the whole average latency is response wait."""
    m = Measurement(concurrency=4, throughput=100.0, latency_avg_ms=2.0, latency_p50_ms=1.9,
                    latency_p90_ms=2.5, latency_p95_ms=2.8, latency_p99_ms=3.0,
                    server_queue_ms=0.5, server_compute_infer_ms=1.0, stable=True)
    frame = pd.read_csv(write_csv([m], tmp_path / "perf.csv"))
    row = frame.iloc[0]
    for column in ("Client Send", "Client Recv", "request/response"):
        assert pd.isna(row[column]), (column, row[column])
    assert row["response wait"] == 2000 and row["Network+Server Send/Recv"] == 500
    back = read_csv(tmp_path / "perf.csv")[0]
    assert back.client_send_ms is None and back.client_recv_ms is None
