"""The load generator of one process: it runs a load kind's slots and records what they send.

What a level is and how its slots issue requests is the load kind's (tracker/measure/kinds:
closed-loop concurrency, request rate, ...); the generator offers the slots ``send`` (one
request, waited for) and ``spawn`` (one request, not waited for) and keeps the records.

Per request the hot path does one ``perf_counter_ns`` before and after the call and two list
appends; the requests are pre-built (see transport.py). Completions are appended in the order
they are observed, so end times are sorted and a window is a bisect away:
:meth:`LocalLoad.take` hands over (and forgets) everything that ended before a given instant.
``perf_counter_ns`` is CLOCK_MONOTONIC on Linux, shared by all processes, so several processes'
records line up.

A kind that records more than the latency (``LoadKind.fields``: a streamed request's time to
its first token, ...) turns each answer into its latency and those values
(``LoadKind.record``); they are kept in lists aligned with the latencies.
"""

from __future__ import annotations

import asyncio
import time
from bisect import bisect_left
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from tracker.errors import MeasurementError
from tracker.measure.kinds.concurrency import Concurrency
from tracker.measure.kinds.load_kind import Level as Level
from tracker.measure.kinds.load_kind import LoadKind
from tracker.measure.kinds.rate import RequestRate
from tracker.measure.transport import Payload, Transport, describe_error

Ints = npt.NDArray[np.int64]


@dataclass
class Chunk:
    """What a process recorded up to an instant since the last take."""

    latencies_ns: Ints
    # each load kind's per-request values (LoadKind.fields), aligned with latencies_ns
    fields: dict[str, Ints] = field(default_factory=dict)
    errors: int = 0
    first_error: str | None = None
    sent: int = 0
    late: int = 0
    cpu_ns: int = 0
    wall_ns: int = 0
    busy: list[float] = field(default_factory=list)  # busy % of each process

    @staticmethod
    def merge(chunks: Sequence[Chunk]) -> Chunk:
        names = list(dict.fromkeys(n for c in chunks for n in c.fields))
        return Chunk(
            latencies_ns=(np.concatenate([c.latencies_ns for c in chunks]) if chunks
                          else _empty()),
            fields={n: np.concatenate([c.fields.get(n, _empty()) for c in chunks])
                    for n in names},
            errors=sum(c.errors for c in chunks),
            first_error=next((c.first_error for c in chunks if c.first_error), None),
            sent=sum(c.sent for c in chunks), late=sum(c.late for c in chunks),
            cpu_ns=sum(c.cpu_ns for c in chunks), wall_ns=max((c.wall_ns for c in chunks),
                                                              default=0),
            busy=[b for c in chunks for b in c.busy])


def _empty() -> Ints:
    return np.empty(0, dtype=np.int64)


Recorder = Callable[[int, int, object], None]


class LocalLoad:
    """Drives one transport from the current event loop with ``kinds``' slots (the first
    kind says what a level is: tracker.measure.kinds.kinds_for's order)."""

    def __init__(self, transport: Transport, payloads: Sequence[Payload],
                 kinds: Sequence[LoadKind]) -> None:
        if not payloads:
            raise MeasurementError("the load generator needs at least one request to send")
        self.transport = transport
        self.payloads = list(payloads)
        self.kinds = tuple(kinds)
        self.field_names = tuple(f for k in self.kinds for f in k.fields)
        self._recorders = [k for k in self.kinds if k.fields]
        self._call = transport.caller()
        self._tasks: list[asyncio.Task[None]] = []
        self._pending: set[asyncio.Task[None]] = set()
        self._stopping = False
        self._inflight = 0
        self.late = 0
        self._reset()

    def _reset(self) -> None:
        self.ends: list[int] = []
        self.lats: list[int] = []
        self.cols: dict[str, list[int]] = {name: [] for name in self.field_names}
        self.err_ends: list[int] = []
        self.err_msgs: list[str] = []
        self.sent = 0
        self.late = 0
        self._mark_cpu = time.thread_time_ns()
        self._mark_wall = time.perf_counter_ns()

    @property
    def stopping(self) -> bool:
        return self._stopping

    @property
    def inflight(self) -> int:
        return self._inflight

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
        fields = {}
        for name, col in self.cols.items():
            fields[name] = np.array(col[:k], dtype=np.int64)
            del col[:k]
        e = bisect_left(self.err_ends, until_ns)
        first = self.err_msgs[0] if e else None
        del self.err_ends[:e], self.err_msgs[:e]
        cpu, wall = time.thread_time_ns(), time.perf_counter_ns()
        chunk = Chunk(lats, fields, errors=e, first_error=first, sent=self.sent,
                      late=self.late, cpu_ns=cpu - self._mark_cpu, wall_ns=wall - self._mark_wall)
        chunk.busy = [100.0 * chunk.cpu_ns / chunk.wall_ns] if chunk.wall_ns > 0 else []
        self.sent = self.late = 0
        self._mark_cpu, self._mark_wall = cpu, wall
        return chunk

    def _record(self, t0: int, t1: int, got: object, payload: Payload) -> None:
        """The kinds' figures of one answer to ``payload`` (its end is already in ``ends``)."""
        lat = t1 - t0
        for kind in self._recorders:
            values = kind.tag(payload)
            if values is None:
                rec = kind.record(t0, t1, got)
                values = rec[1] if rec is not None else (0,) * len(kind.fields)
                if rec is not None:
                    lat = rec[0]
            for name, value in zip(kind.fields, values, strict=True):
                self.cols[name].append(value)
        self.lats.append(lat)

    # -- what a slot may do ----------------------------------------------------------------
    async def send(self, payload: Payload) -> None:
        """One request, waited for; its latency (and the kinds' fields) or its error
        recorded."""
        self.sent += 1
        t0 = time.perf_counter_ns()
        try:
            got = await self._call(payload)
        except Exception as exc:
            self._error(exc)
            return
        t1 = time.perf_counter_ns()
        self.ends.append(t1)
        if self._recorders:
            self._record(t0, t1, got, payload)
        else:
            self.lats.append(t1 - t0)

    async def _one(self, payload: Payload) -> None:
        self._inflight += 1
        try:
            await self.send(payload)
        finally:
            self._inflight -= 1

    def spawn(self, payload: Payload) -> None:
        """One request sent without waiting for it (open loop)."""
        task = asyncio.get_running_loop().create_task(self._one(payload))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    # -- control ---------------------------------------------------------------------------
    async def start(self, level: Level) -> None:
        """Start sending at ``level`` (stop the previous level first)."""
        if self._tasks:
            raise MeasurementError("the load generator is already running; stop it first")
        self._stopping = False
        self._reset()
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(slot)
                       for slot in _level_kind(self.kinds, level).slots(self, level)]

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


def _level_kind(kinds: Sequence[LoadKind], level: Level) -> LoadKind:
    """The kind whose levels ``level`` is (the one whose ``level_key`` the level sets); a
    level of the other plain key than the load's (the capacity search's closed-loop probe of
    a rate load, or its rates for a concurrency load) runs with that key's plain kind."""
    for kind in kinds:
        if kind.level_key is not None and getattr(level, kind.level_key) is not None:
            return kind
    for plain in (Concurrency(), RequestRate()):
        if getattr(level, str(plain.level_key)) is not None:
            return plain
    raise MeasurementError(f"no load kind of {[k.name for k in kinds]} runs {level}")


def split_level(level: Level, parts: int, kinds: Sequence[LoadKind]) -> list[Level]:
    """``level`` spread over ``parts`` processes, as its load kind divides it."""
    if parts < 1:
        raise MeasurementError(f"load.processes must be >= 1, but got {parts}")
    return _level_kind(kinds, level).split(level, parts)
