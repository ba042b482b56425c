"""Measure one load level of every entry at once: start each entry's load, warm up, take
shared windows until every entry is stable, stop.

The level of one entry model is the one-entry case of the same code. Each window boundary is
one statistics request to the server (one model's, or one all-models request when more models
are measured: several entries, a pipeline's composing models); the boundary instant is the
middle of that request, and every entry's client records are cut at the same instant, so the
client's counts and the server's counters describe the same span for every model (its
``Measurement.start_ns``/``end_ns`` are equal across the entries of a level). A window is a
fixed time (``window_ms``), or lasts until every entry completed ``window_requests``.

The level ends when every entry's last windows are stable (windows.py's rule), when an
open-loop entry's queue grows (windows.py's ``overloaded``), after ``max_tries`` windows,
or at once when one entry's window has too many failed requests (that entry's Measurement is
invalid; the others keep the windows measured so far). A server that
stops answering ends the level: the statistics request times out (``request_timeout_s``), or
no request completes for that long, and every Measurement is invalid with a timeout reason,
never a hang.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tracker.measure.loadgen import Chunk, Level
from tracker.measure.monitor_sampler import Sampler
from tracker.measure.procs import Load
from tracker.measure.transport import describe_error
from tracker.measure.types import Measurement
from tracker.measure.windows import (
    Window,
    WindowRun,
    WindowSettings,
    error_reason,
    is_stable,
    overloaded,
)
from tracker.measure.windows import merge as merge_windows
from tracker.triton.statistics import ServerStats, pick

if TYPE_CHECKING:
    from tracker.measure.kinds.load_kind import LoadKind

#: one boundary's statistics request: the counters of every model measured, by name
StatsFn = Callable[[], Awaitable[Mapping[str, ServerStats]]]

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
    kinds: tuple[LoadKind, ...] = ()   # the load's kinds (tracker/measure/kinds): their figures
    slo: tuple[tuple[str, float], ...] = ()  # per-request bounds, ms (measure/goodput.py)


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


def window_between(prev: Boundary, cur: Boundary) -> Window:
    """The window between two edges (the counters' differences, the client's records)."""
    c = cur.chunk
    w = Window(start_ns=prev.t_ns, end_ns=cur.t_ns, latencies_ns=c.latencies_ns,
               fields=c.fields, errors=c.errors,
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


@dataclass
class Part:
    """One entry's part of a level: its name, its load, how it is measured, its level, and
    its composing models (their split over the same windows lands in its ``steps``)."""

    name: str
    load: Load
    settings: LevelSettings
    level: Level
    models: Sequence[str] = ()
    seen: list[Window] = field(default_factory=list)


async def _waiting(part: Part, count: int, what: str) -> None:
    try:
        await wait_for(part.load, count, part.settings.timeout_s, what)
    except LevelAborted as exc:
        raise LevelAborted(f"{part.name}: {exc.reason}" if part.name else exc.reason) from exc


async def _boundary(parts: Sequence[Part], stats: StatsFn | None,
                    timeout_s: float) -> list[Boundary]:
    """One statistics request, then every entry's records cut at its middle."""
    mid, result = await timed_stats(stats, timeout_s)
    counters: Mapping[str, ServerStats] = result if isinstance(result, Mapping) else {}
    chunks = await asyncio.gather(*(p.load.take(mid) for p in parts))
    return [Boundary(mid, chunk, pick(counters, p.name) if counters else None,
                     {m: pick(counters, m) for m in p.models} if p.models and counters
                     else None)
            for p, chunk in zip(parts, chunks, strict=True)]


async def _next_window(parts: Sequence[Part], ws: WindowSettings) -> None:
    """Until the next window boundary is due: ``window_ms``, or every entry's count."""
    if ws.window_requests is not None:
        await asyncio.gather(*(_waiting(p, ws.window_requests, "window") for p in parts))
        return
    await asyncio.sleep(ws.window_ms / 1000.0)
    for p in parts:
        if await p.load.completed() == 0:
            await _waiting(p, 1, "window")


async def _windows(parts: Sequence[Part], ws: WindowSettings, stats: StatsFn | None,
                   timeout_s: float, reasons: dict[str, str]) -> None:
    await asyncio.gather(*(_waiting(p, p.settings.warmup_requests, "warm-up") for p in parts))
    prev = await _boundary(parts, stats, timeout_s)
    for _ in range(ws.max_tries):
        await _next_window(parts, ws)
        cur = await _boundary(parts, stats, timeout_s)
        for p, before, now in zip(parts, prev, cur, strict=True):
            p.seen.append(window_between(before, now))
        prev = cur
        for p in parts:
            why = error_reason(p.seen[-1], ws.max_error_pct)
            if why is not None:
                reasons[p.name] = why
        if reasons or all(is_stable(p.seen, ws) for p in parts) or any(
                p.level.request_rate is not None and overloaded(p.seen, ws) for p in parts):
            return


async def measure_parts(parts: Sequence[Part], ws: WindowSettings, stats: StatsFn | None,
                        sampler: Sampler | None = None) -> dict[str, Measurement]:
    """Every entry's Measurement at its level, in shared windows (see the module doc);
    never raises for server trouble (the Measurements are invalid and say why)."""
    reasons: dict[str, str] = {}
    timeout_s = max(p.settings.timeout_s for p in parts)
    for p in parts:
        p.seen = []
    await asyncio.gather(*(p.load.start(p.level) for p in parts))
    try:
        await _windows(parts, ws, stats, timeout_s, reasons)
    except LevelAborted as exc:
        for p in parts:
            first = await first_request_error(p.load, p.seen)
            reasons[p.name] = f"request error: {first}; then {exc.reason}" if first \
                else exc.reason
    finally:
        await asyncio.gather(*(p.load.stop() for p in parts), return_exceptions=True)
    return {p.name: finish(WindowRun(p.seen, stable=is_stable(p.seen, ws)
                                     and p.name not in reasons,
                                     invalid_reason=reasons.get(p.name)),
                           p.level, p.settings, sampler)
            for p in parts}


async def measure_level(load: Load, level: Level, settings: LevelSettings,
                        stats: Callable[[], Awaitable[ServerStats]] | None = None,
                        sampler: Sampler | None = None) -> Measurement:
    """One load's Measurement at ``level`` (``stats``: its model's counters): the one-entry
    call of :func:`measure_parts`."""
    counters: StatsFn | None = None
    if stats is not None:
        own = stats

        async def one() -> Mapping[str, ServerStats]:
            return {"": await own()}
        counters = one
    (m,) = (await measure_parts([Part("", load, settings, level)], settings.windows,
                                counters, sampler)).values()
    return m


def finish(run: WindowRun, level: Level, settings: LevelSettings,
           sampler: Sampler | None = None) -> Measurement:
    """The Measurement of a level's windows: merged, the monitors averaged over the same span,
    the client-overhead warning."""
    ws = settings.windows
    m = merge_windows(run, settings=ws, batch_size=settings.batch_size,
                      concurrency=level.concurrency, request_rate=level.request_rate,
                      kinds=settings.kinds, slo=dict(settings.slo))
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
