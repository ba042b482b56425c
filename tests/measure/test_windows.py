"""The stability rule and the merge of windows into a Measurement, on synthetic windows."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import numpy as np
import pytest

from tracker.errors import MeasurementError
from tracker.measure.windows import (
    Window,
    WindowSettings,
    is_stable,
    merge,
    run_windows,
    within,
)
from tracker.triton.statistics import ServerStats

SEC = 1_000_000_000


def win(requests: int, p_ms: float = 2.0, start: int = 0, errors: int = 0,
        server: ServerStats | None = None, busy: float | None = None) -> Window:
    """A 1 s window with ``requests`` completions, all at ``p_ms`` latency."""
    lat = np.full(requests, int(p_ms * 1e6), dtype=np.int64)
    return Window(start_ns=start, end_ns=start + SEC, latencies_ns=lat, errors=errors,
                  first_error="UNAVAILABLE: boom" if errors else None, sent=requests + errors,
                  server=server, busy_pct=busy)


def feed(windows: list[Window]) -> tuple[list[int], object]:
    calls: list[int] = []
    it: Iterator[Window] = iter(windows)

    async def next_window() -> Window:
        calls.append(1)
        return next(it)
    return calls, next_window


def run(windows: list[Window], **kw: object):
    calls, nxt = feed(windows)
    result = asyncio.run(run_windows(nxt, WindowSettings(**kw)))  # type: ignore[arg-type]
    return len(calls), result


def test_within_is_max_over_min() -> None:
    assert within([100, 105, 109.9], 10)
    assert not within([100, 111], 10)
    assert not within([0, 0, 0], 10)  # zero throughput is never stable
    assert not within([], 10)


def test_three_agreeing_windows_stop_the_level() -> None:
    n, res = run([win(1000), win(1050), win(980), win(5000)])
    assert n == 3 and res.stable and res.invalid_reason is None


def test_stability_needs_the_last_three_not_any_three() -> None:
    # first window is a warm-up outlier; windows 2..4 agree
    n, res = run([win(300), win(1000), win(1020), win(990)])
    assert n == 4 and res.stable


def test_latency_must_agree_too() -> None:
    ws = [win(1000, 2.0), win(1000, 2.5), win(1000, 2.0), win(1000, 2.05), win(1000, 2.1)]
    n, res = run(ws)
    assert n == 5 and res.stable  # 2.0, 2.05, 2.1 agree; 2.5 broke the first triple


def test_unstable_after_max_tries_is_reported_not_accepted() -> None:
    ws = [win(1000 if i % 2 else 1500) for i in range(10)]
    n, res = run(ws, max_tries=6)
    assert n == 6 and not res.stable
    m = merge(res, settings=WindowSettings(max_tries=6), concurrency=4)
    assert not m.stable and m.valid
    assert any("unstable" in w for w in m.warnings)


def test_errors_above_threshold_end_the_level_as_invalid() -> None:
    n, res = run([win(1000), win(900, errors=50), win(1000)], max_error_pct=1.0)
    assert n == 2 and not res.stable
    assert res.invalid_reason is not None
    assert "50 of 950 requests failed" in res.invalid_reason
    assert "UNAVAILABLE: boom" in res.invalid_reason
    m = merge(res, settings=WindowSettings(), concurrency=1)
    assert not m.valid and m.errors == 50 and m.first_error == "UNAVAILABLE: boom"


def test_errors_within_threshold_are_counted_but_valid() -> None:
    _, res = run([win(1000, errors=1), win(1000), win(1000)], max_error_pct=1.0)
    assert res.stable
    m = merge(res, settings=WindowSettings(), concurrency=1)
    assert m.valid and m.errors == 1 and m.first_error == "UNAVAILABLE: boom"


def test_merge_pools_the_last_windows() -> None:
    srv = ServerStats(success_count=1000, queue_count=1000, queue_ns=1000 * 300_000,
                      compute_input_count=1000, compute_input_ns=1000 * 10_000,
                      compute_infer_count=1000, compute_infer_ns=1000 * 1_500_000,
                      compute_output_count=1000, compute_output_ns=1000 * 20_000)
    ws = [win(10, 50.0), win(1000, 1.0, start=SEC, server=srv, busy=30.0),
          win(1000, 2.0, start=2 * SEC, server=srv, busy=35.0),
          win(1000, 3.0, start=3 * SEC, server=srv, busy=20.0)]
    res_windows = ws
    from tracker.measure.windows import WindowRun
    m = merge(WindowRun(res_windows, stable=True), settings=WindowSettings(), batch_size=2,
              concurrency=8)
    assert m.requests == 3000 and m.windows == 4
    assert m.throughput == pytest.approx(2000.0)  # 3000 requests x batch 2 / 3 s
    assert m.latency_avg_ms == pytest.approx(2.0)
    assert m.latency_p50_ms == pytest.approx(2.0)
    assert m.latency_p99_ms == pytest.approx(3.0)
    assert m.server_requests == 3000
    assert m.server_queue_ms == pytest.approx(0.3)
    assert m.server_compute_infer_ms == pytest.approx(1.5)
    assert m.client_overhead_pct == 35.0
    assert m.network_ms == pytest.approx(2.0 - 0.3 - 0.01 - 1.5 - 0.02)


def test_server_split_absent_when_a_window_lacks_it() -> None:
    from tracker.measure.windows import WindowRun
    m = merge(WindowRun([win(10), win(10, server=ServerStats(queue_count=1, queue_ns=1))],
                        stable=False), settings=WindowSettings(), concurrency=1)
    assert m.server_queue_ms is None and "perf_server_queue" not in m.metrics()


def test_settings_are_validated() -> None:
    with pytest.raises(MeasurementError, match=r"max_tries must be >= 3.*got 2"):
        WindowSettings(max_tries=2)
    with pytest.raises(MeasurementError, match="window_ms must be > 0"):
        WindowSettings(window_ms=0)


def test_is_stable_needs_enough_windows() -> None:
    assert not is_stable([win(100), win(100)], WindowSettings())


def test_composing_models_are_split_over_the_same_windows() -> None:
    """Each step's counters are summed over the last windows and divided per request; the
    average execution batch is inferences / executions; a step one window lacks is left out."""
    def step(requests: int, execs: int, infer_ms: float) -> ServerStats:
        ns = int(infer_ms * 1e6) * requests
        return ServerStats(inference_count=requests, execution_count=execs,
                           success_count=requests, queue_count=requests, queue_ns=requests * 1000,
                           compute_infer_count=requests, compute_infer_ns=ns)

    ws = [win(100, start=i * SEC) for i in range(4)]
    for w in ws:
        w.steps = {"slow": step(100, 25, 4.0), "fast": step(100, 100, 0.5),
                   "gone": step(100, 100, 1.0)}
    ws[2].steps = {k: v for k, v in (ws[2].steps or {}).items() if k != "gone"}
    n, res = run(ws, max_tries=4)
    assert n == 3  # stable after three windows: the steps of those three
    m = merge(res, settings=WindowSettings(max_tries=4))
    assert list(m.steps) == ["slow", "fast"]
    slow = m.steps["slow"]
    assert slow.requests == 300 and slow.requests_per_s == pytest.approx(100.0)
    assert slow.compute_infer_ms == pytest.approx(4.0) and slow.queue_ms == pytest.approx(0.001)
    assert slow.batch_size == pytest.approx(4.0) and m.steps["fast"].batch_size == 1.0
    assert slow.compute_input_ms is None  # not measured: absent from the metrics, not 0
    got = m.metrics()
    assert got["model/slow/compute_infer_ms"] == pytest.approx(4.0)
    assert got["model/slow/batch_size"] == pytest.approx(4.0)
    assert "model/slow/compute_input_ms" not in got
    assert (m.start_ns, m.end_ns) == (0, 3 * SEC)
