"""A recorded trace replayed open loop (``load.trace``, tracker/spec/trace.py): a level is a
request rate, and the trace's gaps are scaled by one factor so that it plays at that mean
rate; its shape (bursts, lulls) stays. Without ``load.request_rate`` the one level is the
trace's own rate. The trace loops when a level outlasts it (Perf Analyzer's
``--request-intervals`` does the same). A request with an ``input_index`` sends that entry of
the load's inputs; with several load processes, process ``k`` of ``P`` sends requests
``k, k + P, ...`` at their own times."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, ClassVar

from tracker.errors import MeasurementError
from tracker.measure.kinds.load_kind import Level, LoadKind, Slots
from tracker.measure.kinds.rate import LATE_NS, MAX_INFLIGHT
from tracker.spec.trace import Trace, read_trace

if TYPE_CHECKING:
    from tracker.spec.sections import LoadSection
    from tracker.triton.model_config import ModelConfig


def trace_of(load: LoadSection) -> Trace:
    """The load's trace; MeasurementError when a request's batch size is not the load's
    (each request is pre-built at ``load.batch_size``)."""
    if load.trace is None:
        raise MeasurementError("load.trace is not set")
    trace = read_trace(load.trace)
    other = next(((i, b) for i, b in enumerate(trace.batch_sizes, 1)
                  if b not in (0, load.batch_size)), None)
    if other is not None:
        raise MeasurementError(
            f"load.trace: {load.trace}, line {other[0]}: batch_size {other[1]} differs from "
            f"load.batch_size {load.batch_size}; requests are built at one batch size, so a "
            "trace's requests must all use it (or leave batch_size out)")
    return trace


_ONE = Trace((1,), (-1,), (0,))  # a placeholder: one request (of() reads the real one)


@dataclass(frozen=True)
class TraceReplay(LoadKind):
    name: ClassVar[str] = "trace"
    level_key: ClassVar[str | None] = "request_rate"
    perf_analyzer_lacks: ClassVar[str] = "a trace's batch sizes and input rows per request"
    trace: Trace = _ONE
    processes: int = 1
    process: int = 0

    @classmethod
    def of(cls, config: ModelConfig, load: LoadSection) -> LoadKind | None:
        return cls(trace_of(load), load.processes) if load.trace is not None else None

    def levels(self, load: LoadSection, override: Sequence[float] | None) -> list[Level]:
        values = override if override is not None else (load.request_rate
                                                        or [self.trace.rate])
        return [Level(request_rate=float(r), seed=i) for i, r in enumerate(values)]

    def split(self, level: Level, parts: int) -> list[Level]:
        """Every process keeps the whole rate: it sends its own share of the trace's
        requests at the trace's times."""
        return [replace(level, seed=level.seed + k) for k in range(parts)]

    def for_process(self, index: int) -> LoadKind:
        return replace(self, process=index)

    def slots(self, gen: Slots, level: Level) -> list[Coroutine[Any, Any, None]]:
        return [_replay(gen, level, self)]


async def _replay(gen: Slots, level: Level, kind: TraceReplay) -> None:
    rate = float(level.request_rate or 0.0)
    if rate <= 0:
        return
    trace = kind.trace
    scale = trace.rate / rate
    gaps, indices, n = trace.gaps_ns, trace.indices, len(trace.gaps_ns)
    now = time.perf_counter_ns
    scheduled = float(level.start_ns if level.start_ns > 0 else now())
    payloads, count, i, turn = gen.payloads, len(gen.payloads), 0, 0
    while not gen.stopping:
        scheduled += gaps[i % n] * scale
        mine = (i % kind.processes) == kind.process
        index = indices[i % n]
        i += 1
        if not mine:
            continue
        while (t := now()) < scheduled and not gen.stopping:
            await asyncio.sleep((scheduled - t) * 1e-9)
        while gen.inflight >= MAX_INFLIGHT and not gen.stopping:
            await asyncio.sleep(0.0005)
        if gen.stopping:
            return
        if now() - scheduled > LATE_NS:
            gen.late += 1
        gen.spawn(payloads[(index if index >= 0 else turn) % count])
        turn += 1
        if turn % 32 == 0:
            await asyncio.sleep(0)
