"""The load generator of one process: closed-loop concurrency or open-loop request rate.

Closed loop: ``concurrency`` coroutines, each sending its next request when the last one
returns. Open loop: requests sent on a schedule (constant gaps, or exponential gaps for
Poisson arrivals) whatever the responses do, at most ``max_inflight`` outstanding.

Per request the hot path does one ``perf_counter_ns`` before and after the call and two list
appends; the requests are pre-built (see transport.py). Completions are appended in the order
they are observed, so end times are sorted and a window is a bisect away: :meth:`take` hands
over (and forgets) everything that ended before a given instant. ``perf_counter_ns`` is
CLOCK_MONOTONIC on Linux, shared by all processes, so several processes' records line up.

A streaming transport's call returns a :class:`~tracker.measure.stream.StreamRecord`; then a
request's latency runs to its final response, and three more lists, aligned with the
latencies, keep its time to the first token, the span from its first to its last token and
its token count.
"""

from __future__ import annotations

import asyncio
import time
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from tracker.errors import MeasurementError
from tracker.measure.stream import StreamRecord
from tracker.measure.transport import Payload, Transport, describe_error

MAX_INFLIGHT = 4096
LATE_NS = 1_000_000  # an open-loop request sent more than 1 ms after its time is late


@dataclass(frozen=True)
class Level:
    """One load level for one process. ``start_ns`` (open loop) is the common time zero and
    ``phase`` this process's offset as a fraction of its own mean gap."""

    concurrency: int | None = None
    request_rate: float | None = None
    arrival: str = "constant"
    start_ns: int = 0
    phase: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        if (self.concurrency is None) == (self.request_rate is None):
            raise MeasurementError("a load level is a concurrency or a request rate, not both "
                                   f"(got concurrency={self.concurrency}, "
                                   f"request_rate={self.request_rate})")
        if self.concurrency is not None and self.concurrency < 0:
            raise MeasurementError(f"concurrency must be >= 0, but got {self.concurrency}")
        if self.request_rate is not None and self.request_rate < 0:
            raise MeasurementError(f"request rate must be >= 0, but got {self.request_rate}")
        if self.arrival not in ("constant", "poisson"):
            raise MeasurementError(f"load.arrival must be 'constant' or 'poisson', but got "
                                   f"{self.arrival!r}")


@dataclass
class Chunk:
    """What a process recorded up to an instant since the last take."""

    latencies_ns: npt.NDArray[np.int64]
    # streaming requests, aligned with latencies_ns (empty for unary ones); -1: no token
    ttft_ns: npt.NDArray[np.int64] = field(default_factory=lambda: _empty())
    span_ns: npt.NDArray[np.int64] = field(default_factory=lambda: _empty())
    tokens: npt.NDArray[np.int64] = field(default_factory=lambda: _empty())
    errors: int = 0
    first_error: str | None = None
    sent: int = 0
    late: int = 0
    cpu_ns: int = 0
    wall_ns: int = 0
    busy: list[float] = field(default_factory=list)  # busy % of each process

    @staticmethod
    def merge(chunks: Sequence[Chunk]) -> Chunk:
        def cat(name: str) -> npt.NDArray[np.int64]:
            return (np.concatenate([getattr(c, name) for c in chunks]) if chunks
                    else _empty())

        return Chunk(
            latencies_ns=cat("latencies_ns"), ttft_ns=cat("ttft_ns"), span_ns=cat("span_ns"),
            tokens=cat("tokens"), errors=sum(c.errors for c in chunks),
            first_error=next((c.first_error for c in chunks if c.first_error), None),
            sent=sum(c.sent for c in chunks), late=sum(c.late for c in chunks),
            cpu_ns=sum(c.cpu_ns for c in chunks), wall_ns=max((c.wall_ns for c in chunks),
                                                              default=0),
            busy=[b for c in chunks for b in c.busy])


def _empty() -> npt.NDArray[np.int64]:
    return np.empty(0, dtype=np.int64)


class LocalLoad:
    """Drives one transport from the current event loop."""

    def __init__(self, transport: Transport, payloads: Sequence[Payload]) -> None:
        if not payloads:
            raise MeasurementError("the load generator needs at least one request to send")
        self.transport = transport
        self.payloads = list(payloads)
        self._call = transport.caller()
        self._tasks: list[asyncio.Task[None]] = []
        self._pending: set[asyncio.Task[None]] = set()
        self._stopping = False
        self._inflight = 0
        self._reset()

    def _reset(self) -> None:
        self.ends: list[int] = []
        self.lats: list[int] = []
        self.ttfts: list[int] = []   # streaming only, aligned with lats
        self.spans: list[int] = []
        self.tokens: list[int] = []
        self.err_ends: list[int] = []
        self.err_msgs: list[str] = []
        self.sent = 0
        self.late = 0
        self._mark_cpu = time.thread_time_ns()
        self._mark_wall = time.perf_counter_ns()

    # -- recording -------------------------------------------------------------------------
    def _error(self, exc: BaseException) -> None:
        self.err_ends.append(time.perf_counter_ns())
        self.err_msgs.append(describe_error(exc))

    def completed(self) -> int:
        """Requests finished (ok or failed) and not yet taken."""
        return len(self.ends) + len(self.err_ends)

    def take(self, until_ns: int) -> Chunk:
        """Everything that ended before ``until_ns`` since the last take; forgets it."""
        k = bisect_left(self.ends, until_ns)
        lats = np.array(self.lats[:k], dtype=np.int64)
        del self.ends[:k], self.lats[:k]
        ttft, span, tokens = (np.array(x[:k], dtype=np.int64)
                              for x in (self.ttfts, self.spans, self.tokens))
        del self.ttfts[:k], self.spans[:k], self.tokens[:k]
        e = bisect_left(self.err_ends, until_ns)
        first = self.err_msgs[0] if e else None
        del self.err_ends[:e], self.err_msgs[:e]
        cpu, wall = time.thread_time_ns(), time.perf_counter_ns()
        chunk = Chunk(lats, ttft, span, tokens, errors=e, first_error=first, sent=self.sent,
                      late=self.late, cpu_ns=cpu - self._mark_cpu, wall_ns=wall - self._mark_wall)
        chunk.busy = [100.0 * chunk.cpu_ns / chunk.wall_ns] if chunk.wall_ns > 0 else []
        self.sent = self.late = 0
        self._mark_cpu, self._mark_wall = cpu, wall
        return chunk

    # -- closed loop -----------------------------------------------------------------------
    async def _closed(self, offset: int) -> None:
        call, payloads, n = self._call, self.payloads, len(self.payloads)
        ends, lats, now = self.ends, self.lats, time.perf_counter_ns
        i = offset
        while not self._stopping:
            data = payloads[i % n]
            i += 1
            self.sent += 1
            t0 = now()
            try:
                got = await call(data)
            except Exception as exc:
                self._error(exc)
                continue
            t1 = now()
            ends.append(t1)
            if type(got) is StreamRecord:
                self._streamed(t0, got)
            else:  # a unary call's response (bytes, or None over HTTP)
                lats.append(t1 - t0)

    def _streamed(self, t0: int, rec: StreamRecord) -> None:
        """One streamed request's figures (its end is already in ``ends``)."""
        self.lats.append(rec.final_ns - t0)
        self.ttfts.append(rec.first_ns - t0 if rec.tokens else -1)
        self.spans.append(rec.last_ns - rec.first_ns if rec.tokens else 0)
        self.tokens.append(rec.tokens)

    # -- open loop -------------------------------------------------------------------------
    async def _one(self, data: Payload) -> None:
        self._inflight += 1
        t0 = time.perf_counter_ns()
        try:
            got = await self._call(data)
        except Exception as exc:
            self._error(exc)
        else:
            t1 = time.perf_counter_ns()
            self.ends.append(t1)
            if type(got) is StreamRecord:
                self._streamed(t0, got)
            else:
                self.lats.append(t1 - t0)
        finally:
            self._inflight -= 1

    async def _open(self, level: Level) -> None:
        rate = float(level.request_rate or 0.0)
        if rate <= 0:
            return
        gap = 1e9 / rate
        rng = np.random.default_rng(level.seed)
        gaps: list[float] = []
        loop, now = asyncio.get_running_loop(), time.perf_counter_ns
        scheduled = (level.start_ns if level.start_ns > 0 else now()) + level.phase * gap
        payloads, n, i, burst = self.payloads, len(self.payloads), 0, 0
        while not self._stopping:
            t = now()
            if scheduled > t:
                burst = 0
                await asyncio.sleep((scheduled - t) * 1e-9)
                continue
            if self._inflight >= MAX_INFLIGHT:
                await asyncio.sleep(0.0005)
                continue
            if t - scheduled > LATE_NS:
                self.late += 1
            burst += 1
            if burst >= 32:  # behind schedule: let responses in between catch-up sends
                burst = 0
                await asyncio.sleep(0)
            self.sent += 1
            task = loop.create_task(self._one(payloads[i % n]))
            i += 1
            self._pending.add(task)
            task.add_done_callback(self._pending.discard)
            if level.arrival == "poisson":
                if not gaps:
                    gaps = list(rng.exponential(gap, size=1024))
                scheduled += gaps.pop()
            else:
                scheduled += gap

    # -- control ---------------------------------------------------------------------------
    async def start(self, level: Level) -> None:
        """Start sending at ``level`` (stop the previous level first)."""
        if self._tasks:
            raise MeasurementError("the load generator is already running; stop it first")
        self._stopping = False
        self._reset()
        loop = asyncio.get_running_loop()
        if level.concurrency is not None:
            self._tasks = [loop.create_task(self._closed(k)) for k in range(level.concurrency)]
        else:
            self._tasks = [loop.create_task(self._open(level))]

    async def stop(self, timeout_s: float | None = None) -> None:
        """Stop sending; wait for requests in flight (up to ``timeout_s``), then cancel."""
        self._stopping = True
        tasks = self._tasks + list(self._pending)
        self._tasks = []
        if tasks:
            _, left = await asyncio.wait(tasks, timeout=timeout_s or self.transport.timeout_s)
            for task in left:
                task.cancel()
            if left:
                await asyncio.gather(*left, return_exceptions=True)
        self._pending.clear()
        self._reset()

    async def close(self) -> None:
        await self.stop(timeout_s=1.0)
        await self.transport.close()


def split_level(level: Level, parts: int) -> list[Level]:
    """``level`` spread over ``parts`` processes: concurrency divided as evenly as possible,
    the rate divided with each process shifted by its share of the gap, so the merged
    constant-rate schedule stays evenly spaced."""
    if parts < 1:
        raise MeasurementError(f"load.processes must be >= 1, but got {parts}")
    out = []
    for k in range(parts):
        if level.concurrency is not None:
            c = level.concurrency // parts + (1 if k < level.concurrency % parts else 0)
            out.append(Level(concurrency=c, seed=level.seed + k))
        else:
            rate = float(level.request_rate or 0.0)
            out.append(Level(request_rate=rate / parts, arrival=level.arrival,
                             start_ns=level.start_ns, phase=k / parts, seed=level.seed + k))
    return out
