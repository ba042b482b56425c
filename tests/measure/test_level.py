"""The level runner with a scripted load and statistics source: warnings when the client
cannot keep up, and the timeout paths, without a server."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest

from tracker.measure.level import LevelSettings, measure_level
from tracker.measure.loadgen import Chunk, Level
from tracker.measure.windows import WindowSettings
from tracker.triton.statistics import ServerStats


class ScriptedLoad:
    """Completes ``rate`` requests/s of 2 ms each (or none), with a fixed busy share."""

    processes = 1

    def __init__(self, rate: float = 1000.0, busy: float = 30.0, late_share: float = 0.0):
        self.rate, self.busy, self.late_share = rate, busy, late_share
        self.last = time.perf_counter_ns()
        self.started = self.stopped = 0

    async def start(self, level: Level) -> None:
        self.started += 1
        self.last = time.perf_counter_ns()

    async def completed(self) -> int:
        return int((time.perf_counter_ns() - self.last) * 1e-9 * self.rate)

    async def take(self, until_ns: int) -> Chunk:
        n = int((until_ns - self.last) * 1e-9 * self.rate)
        self.last = until_ns
        sent = n + 4
        return Chunk(np.full(n, 2_000_000, dtype=np.int64), sent=sent,
                     late=int(self.late_share * sent), busy=[self.busy])

    async def stop(self) -> None:
        self.stopped += 1

    async def close(self) -> None:
        pass


def settings(**kw: object) -> LevelSettings:
    return LevelSettings(windows=WindowSettings(window_ms=50, stability_pct=20, max_tries=4),
                         warmup_requests=5, timeout_s=0.3, **kw)  # type: ignore[arg-type]


def run(load: ScriptedLoad, level: Level, stats=None, **kw: object):
    return asyncio.run(measure_level(load, level, settings(**kw), stats))


def test_a_busy_client_says_it_may_be_the_bottleneck() -> None:
    load = ScriptedLoad(busy=95.0)
    m = run(load, Level(concurrency=4))
    assert m.valid and m.stable and m.client_overhead_pct == 95.0
    assert any("client overhead 95% > 80%" in w and "load.processes" in w for w in m.warnings)
    assert load.started == 1 and load.stopped == 1
    quiet = run(ScriptedLoad(busy=30.0), Level(concurrency=4))
    assert not any("overhead" in w for w in quiet.warnings)


def test_late_open_loop_sends_are_reported() -> None:
    m = run(ScriptedLoad(late_share=0.3), Level(request_rate=1000.0))
    assert any("could not keep up with the request rate" in w for w in m.warnings)
    assert m.request_rate == 1000.0 and m.concurrency is None


def test_no_response_ends_the_level_with_a_timeout() -> None:
    load = ScriptedLoad(rate=0.0)
    start = time.monotonic()
    m = run(load, Level(concurrency=2))
    assert time.monotonic() - start < 3
    assert not m.valid and m.invalid_reason is not None
    assert m.invalid_reason.startswith("timeout: no response from the server for 0.3 s "
                                       "during the warm-up")
    assert load.stopped == 1  # the load is stopped on the way out


def test_statistics_failures_end_the_level() -> None:
    calls = 0

    async def stats() -> ServerStats:
        nonlocal calls
        calls += 1
        if calls > 2:
            raise ConnectionError("connection refused")
        return ServerStats(success_count=calls * 50, queue_count=calls * 50,
                           queue_ns=calls * 50 * 100_000)

    m = run(ScriptedLoad(), Level(concurrency=2), stats)
    assert not m.valid
    assert m.invalid_reason == ("the server stopped answering: statistics request failed "
                                "(ConnectionError: connection refused)")
    # the one window before the failure keeps its figures, server split included
    assert m.windows == 1 and m.server_queue_ms == pytest.approx(0.1)

    async def hangs() -> ServerStats:
        await asyncio.sleep(10)
        return ServerStats()

    start = time.monotonic()
    m = run(ScriptedLoad(), Level(concurrency=2), hangs)
    assert time.monotonic() - start < 3
    assert m.invalid_reason == ("timeout: the server did not answer a statistics request "
                                "within 0.3 s")
