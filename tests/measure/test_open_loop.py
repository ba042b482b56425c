"""Open-loop levels: goodput (tracker/measure/goodput.py: the SLA read per request from the
constraints, the good requests counted, a level's Measurement carrying both figures), and the
early end of a level whose queue grows (tracker/measure/windows.py ``overloaded``), and a
trace's replay (tracker/measure/kinds/trace.py)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import numpy as np
import pytest

from tracker.measure.goodput import goodput, request_slo
from tracker.measure.kinds.load_kind import LATENCY
from tracker.measure.kinds.trace import TraceReplay
from tracker.measure.windows import Window, WindowRun, WindowSettings, merge, overloaded
from tracker.spec import LoadSection

MS = 1_000_000


def test_the_sla_per_request_is_the_loosest_max_of_each_latency() -> None:
    assert request_slo({"perf_latency_p99": {"max": 20}, "perf_latency_p50": {"max": 5},
                        "perf_time_to_first_token_p90": {"max": 50},
                        "perf_throughput": {"min": 10}, "perf_latency_avg": {"min": 1},
                        "perf_latency_p99/priority_1": {"max": 2}}) == {
        LATENCY: 20.0, "ttft_ns": 50.0}
    assert request_slo(None) == {}


def test_goodput_counts_requests_within_every_bound_and_never_a_failed_one() -> None:
    lat = np.array([5, 10, 20, 21, 40], dtype=np.int64) * MS
    assert goodput({LATENCY: lat}, {LATENCY: 20.0}, 2.0) == (1.5, 60.0)
    assert goodput({LATENCY: lat}, {LATENCY: 20.0}, 2.0, failed=5) == (1.5, 30.0)
    ttft = np.array([1, 1, 1, 60, -1], dtype=np.int64) * MS
    both = goodput({LATENCY: lat, "ttft_ns": ttft}, {LATENCY: 100.0, "ttft_ns": 50.0}, 1.0)
    assert both == (4.0, 80.0)  # -1: no first token recorded, so no bound broken by it
    # inter-token latency from a streamed request's span and tokens
    span = np.array([90, 90, 90, 90, 90], dtype=np.int64) * MS
    tokens = np.array([10, 4, 1, 2, 91], dtype=np.int64)
    got = goodput({LATENCY: lat, "span_ns": span, "tokens": tokens},
                  {"itl_ns": 10.0}, 1.0)
    assert got == (3.0, 60.0)  # itl 10, 30, none, 90, 1 ms
    assert goodput({LATENCY: lat}, {}, 1.0) is None


def _window(t0: int, lat_ms: list[float]) -> Window:
    return Window(start_ns=t0, end_ns=t0 + 1_000_000_000,
                  latencies_ns=np.array(lat_ms, dtype=np.float64).astype(np.int64) * MS,
                  sent=len(lat_ms))


@pytest.mark.parametrize("rate", [None, 4.0])
def test_an_open_loop_level_carries_goodput_and_requests_sent(rate: float | None) -> None:
    run = WindowRun([_window(i * 1_000_000_000, [5, 10, 30, 8]) for i in range(3)], True)
    m = merge(run, settings=WindowSettings(), request_rate=rate,
              concurrency=None if rate else 4, slo={LATENCY: 20.0})
    assert m.sent == 12
    if rate is None:  # closed loop: no goodput figure
        assert m.goodput is None and "perf_goodput" not in m.metrics()
    else:
        assert m.goodput == pytest.approx(3.0) and m.goodput_pct == pytest.approx(75.0)
        assert m.metrics()["perf_goodput_pct"] == pytest.approx(75.0)


def _sent(sent: int, ended: int) -> Window:
    w = _window(0, [1.0] * ended)
    w.sent = sent
    return w


def test_a_growing_queue_ends_an_open_loop_level_early() -> None:
    ws = WindowSettings()
    assert overloaded([_sent(100, 80)] * 3, ws)
    assert not overloaded([_sent(100, 80)] * 2, ws)          # too few windows to tell
    assert not overloaded([_sent(100, 99)] * 3, ws)          # within the noise of a boundary
    assert not overloaded([_sent(100, 70), _sent(100, 130), _sent(100, 70)], ws)  # caught up


class _Slots:
    """What a load kind's slot sees of the generator, recording each spawn's time."""

    def __init__(self, stop_after: int) -> None:
        self.payloads = ["a", "b", "c", "d"]
        self.late, self.inflight = 0, 0
        self.sent: list[tuple[int, str]] = []
        self.stop_after = stop_after

    @property
    def stopping(self) -> bool:
        return len(self.sent) >= self.stop_after

    async def send(self, payload: str) -> None:
        raise AssertionError("open loop never waits for an answer")

    def spawn(self, payload: str) -> None:
        self.sent.append((time.perf_counter_ns(), payload))


def test_a_trace_replays_its_inputs_and_is_scaled_to_the_level_rate(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"  # 3 requests at once, then 30 ms of nothing: 100 requests/s
    path.write_text('{"timestamp": 0, "input_index": 2}\n{"timestamp": 0}\n'
                    '{"timestamp": 0, "input_index": 0}\n{"timestamp": 30}\n')
    kind = TraceReplay.of(None, LoadSection(trace=path))
    assert isinstance(kind, TraceReplay) and kind.trace.rate == pytest.approx(4 / 0.03)
    (level,) = kind.levels(LoadSection(trace=path), [4 / 0.06])  # half the trace's rate
    gen = _Slots(stop_after=8)
    (slot,) = kind.slots(gen, level)
    asyncio.run(slot)
    # the trace's inputs (an index), else the load's next one; the trace loops
    assert [p for _, p in gen.sent] == ["c", "b", "a", "d", "c", "b", "a", "d"]
    # twice the gaps: the 4th request >= 60 ms after the 1st (never early; lateness is load)
    assert gen.sent[3][0] - gen.sent[0][0] >= 59_000_000
    assert gen.sent[7][0] - gen.sent[0][0] >= 119_000_000  # from the start: never early
