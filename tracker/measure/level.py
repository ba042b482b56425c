"""Measure one load level: start the load, warm up, take windows until stable, stop.

Each window boundary is one statistics request to the server; the boundary instant is the
middle of that request, and the client's records are cut at the same instant, so the client's
count and the server's count describe the same span. For a pipeline the request is one
all-models statistics call whose :class:`~tracker.measure.stats.Snapshot` holds the entry
model's counters and its composing models' (``sweep(models=...)``): every model's figures
describe the same windows. A server that stops answering ends the
level: the statistics request times out (``request_timeout_s``), or no request completes for
that long, and the Measurement is invalid with a timeout reason, never a hang.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from tracker.measure.loadgen import Chunk, Level
from tracker.measure.monitors import Sampler
from tracker.measure.procs import Load
from tracker.measure.stats import ServerStats, Snapshot
from tracker.measure.transport import describe_error
from tracker.measure.types import Measurement
from tracker.measure.windows import Window, WindowRun, WindowSettings, merge, run_windows

#: one boundary's statistics request: the entry model's counters, or a Snapshot of the entry
#: and its composing models (one all-models request)
StatsFn = Callable[[], Awaitable[ServerStats | Snapshot]]

OVERHEAD_WARN_PCT = 80.0
LATE_WARN_SHARE = 0.10


@dataclass(frozen=True)
class LevelSettings:
    """How a level is measured (LoadSection's fields)."""

    windows: WindowSettings
    warmup_requests: int = 20
    timeout_s: float = 10.0
    batch_size: int = 1
    overhead_warn_pct: float = OVERHEAD_WARN_PCT
    processes: int = 1
    streaming: bool = False       # each request a gRPC stream (a decoupled model)


class LevelAborted(Exception):
    """A level ended early (no response for too long, statistics request failed); the
    Measurement is invalid with ``reason``."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class Boundary:
    """One window edge: its instant, the client's records up to it, the server's counters."""

    t_ns: int
    chunk: Chunk
    server: ServerStats | None
    steps: dict[str, ServerStats] | None = None


async def wait_for(load: Load, count: int, timeout_s: float, what: str) -> None:
    """Until ``count`` requests completed (since the last take), or abort when none
    completes for ``timeout_s``."""
    poll = 0.005 if load.processes == 1 else 0.02
    last, last_change = -1, time.monotonic()
    while True:
        done = await load.completed()
        if done >= count:
            return
        if done != last:
            last, last_change = done, time.monotonic()
        elif time.monotonic() - last_change > timeout_s:
            raise LevelAborted(f"timeout: no response from the server for {timeout_s:g} s "
                               f"during the {what} ({done} of {count} requests completed)")
        await asyncio.sleep(poll)


async def timed_stats(stats: Callable[[], Awaitable[object]] | None, timeout_s: float,
                      ) -> tuple[int, object | None]:
    """One statistics request and its middle instant (``perf_counter_ns``); aborts the level
    (:class:`LevelAborted`) when the server does not answer within ``timeout_s`` or fails."""
    result = None
    t0 = time.perf_counter_ns()
    if stats is not None:
        try:
            result = await asyncio.wait_for(stats(), timeout_s)
        except asyncio.TimeoutError as exc:
            raise LevelAborted(f"timeout: the server did not answer a statistics request "
                               f"within {timeout_s:g} s") from exc
        except Exception as exc:
            raise LevelAborted(f"the server stopped answering: statistics request failed "
                               f"({describe_error(exc)})") from exc
    t1 = time.perf_counter_ns()
    return (t0 + t1) // 2, result


async def boundary(load: Load, stats: StatsFn | None, timeout_s: float) -> Boundary:
    """One window edge: the statistics request, then the client's records cut at its middle."""
    mid, result = await timed_stats(stats, timeout_s)
    if isinstance(result, Snapshot):
        return Boundary(mid, await load.take(mid), result.entry, dict(result.models))
    server = result if isinstance(result, ServerStats) else None
    return Boundary(mid, await load.take(mid), server)


def window_between(prev: Boundary, cur: Boundary) -> Window:
    """The window between two edges (the counters' differences, the client's records)."""
    c = cur.chunk
    w = Window(start_ns=prev.t_ns, end_ns=cur.t_ns, latencies_ns=c.latencies_ns,
               ttft_ns=c.ttft_ns, span_ns=c.span_ns, tokens=c.tokens, errors=c.errors,
               first_error=c.first_error, sent=c.sent,
               busy_pct=max(c.busy) if c.busy else None,
               server=(cur.server - prev.server) if cur.server and prev.server else None)
    if cur.steps is not None and prev.steps is not None:
        w.steps = {name: stats - prev.steps[name] for name, stats in cur.steps.items()
                   if name in prev.steps}
    if c.sent and c.late > LATE_WARN_SHARE * c.sent:
        w.warnings.append(f"the client could not keep up with the request rate: {c.late} of "
                          f"{c.sent} requests were sent more than 1 ms late; raise "
                          "load.processes")
    return w


async def first_request_error(load: Load, seen: list[Window]) -> str | None:
    """The first failed request of an aborted level, from its windows or the requests answered
    since the last one: often the cause (a crashed backend before the server went away), so
    the level's reason names it first."""
    first = next((w.first_error for w in seen if w.first_error), None)
    if first is None:
        try:
            first = (await load.take(time.perf_counter_ns())).first_error
        except Exception:  # the load is in trouble too; the abort's own reason stands
            first = None
    return first


async def measure_level(load: Load, level: Level, settings: LevelSettings,
                        stats: StatsFn | None = None, sampler: Sampler | None = None,
                        ) -> Measurement:
    """One Measurement for ``level``; never raises for server trouble (the Measurement is
    invalid and says why)."""
    ws = settings.windows
    seen: list[Window] = []
    reason: str | None = None
    run: WindowRun | None = None
    await load.start(level)
    try:
        await wait_for(load, settings.warmup_requests, settings.timeout_s, "warm-up")
        prev = await boundary(load, stats, settings.timeout_s)

        async def next_window() -> Window:
            nonlocal prev
            if ws.window_requests is not None:
                await wait_for(load, ws.window_requests, settings.timeout_s, "window")
            else:
                await asyncio.sleep(ws.window_ms / 1000.0)
                if (await load.completed()) == 0:
                    await wait_for(load, 1, settings.timeout_s, "window")
            cur = await boundary(load, stats, settings.timeout_s)
            window = window_between(prev, cur)
            prev = cur
            seen.append(window)
            return window

        run = await run_windows(next_window, ws)
    except LevelAborted as exc:
        first = await first_request_error(load, seen)
        reason = f"request error: {first}; then {exc.reason}" if first else exc.reason
    finally:
        await load.stop()
    if run is None:
        run = WindowRun(seen, stable=False, invalid_reason=reason)
    return finish(run, level, settings, sampler)


def finish(run: WindowRun, level: Level, settings: LevelSettings,
           sampler: Sampler | None = None) -> Measurement:
    """The Measurement of a level's windows: merged, the monitors averaged over the same span,
    the client-overhead warning."""
    ws = settings.windows
    m = merge(run, settings=ws, batch_size=settings.batch_size,
              concurrency=level.concurrency, request_rate=level.request_rate,
              streaming=settings.streaming)
    last = run.windows[-ws.stability_count:]
    if sampler is not None and last:
        m.monitors = sampler.aggregate(last[0].start_ns, last[-1].end_ns)
    if m.client_overhead_pct is not None and m.client_overhead_pct > settings.overhead_warn_pct:
        hint = "raise load.processes" if settings.processes == 1 else "raise load.processes " \
            "further"
        m.warnings.append(
            f"client overhead {m.client_overhead_pct:.0f}% > {settings.overhead_warn_pct:g}%: "
            f"one load process is busy most of the time and may limit throughput; {hint}")
    return m
