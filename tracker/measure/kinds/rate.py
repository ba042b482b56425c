"""Open-loop request rate: a level is a rate (requests/s); one slot sends on a schedule
(constant gaps, or exponential gaps for Poisson arrivals) whatever the responses do, at most
``MAX_INFLIGHT`` outstanding (perf_analyzer's ``--request-rate-range``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from tracker.measure.kinds.load_kind import Level, LoadKind, Slots

if TYPE_CHECKING:
    from tracker.spec.sections import LoadSection
    from tracker.triton.model_config import ModelConfig

MAX_INFLIGHT = 4096
LATE_NS = 1_000_000  # a request sent more than 1 ms after its time is late


@dataclass(frozen=True)
class RequestRate(LoadKind):
    name: ClassVar[str] = "request_rate"
    level_key: ClassVar[str | None] = "request_rate"

    @classmethod
    def of(cls, config: ModelConfig, load: LoadSection) -> LoadKind | None:
        return cls() if load.request_rate else None

    def levels(self, load: LoadSection, override: Sequence[float] | None) -> list[Level]:
        values = override if override is not None else (load.request_rate or [])
        return [Level(request_rate=float(r), arrival=load.arrival, seed=i)
                for i, r in enumerate(values)]

    def split(self, level: Level, parts: int) -> list[Level]:
        """The rate divided, each process shifted by its share of the gap, so the merged
        constant-rate schedule stays evenly spaced."""
        rate = float(level.request_rate or 0.0)
        return [Level(request_rate=rate / parts, arrival=level.arrival,
                      start_ns=level.start_ns, phase=k / parts, seed=level.seed + k)
                for k in range(parts)]

    def slots(self, gen: Slots, level: Level) -> list[Coroutine[Any, Any, None]]:
        return [_schedule(gen, level)]


async def _schedule(gen: Slots, level: Level) -> None:
    rate = float(level.request_rate or 0.0)
    if rate <= 0:
        return
    gap = 1e9 / rate
    rng = np.random.default_rng(level.seed)
    gaps: list[float] = []
    now = time.perf_counter_ns
    scheduled = (level.start_ns if level.start_ns > 0 else now()) + level.phase * gap
    payloads, n, i, burst = gen.payloads, len(gen.payloads), 0, 0
    while not gen.stopping:
        t = now()
        if scheduled > t:
            burst = 0
            await asyncio.sleep((scheduled - t) * 1e-9)
            continue
        if gen.inflight >= MAX_INFLIGHT:
            await asyncio.sleep(0.0005)
            continue
        if t - scheduled > LATE_NS:
            gen.late += 1
        burst += 1
        if burst >= 32:  # behind schedule: let responses in between catch-up sends
            burst = 0
            await asyncio.sleep(0)
        gen.spawn(payloads[i % n])
        i += 1
        if level.arrival == "poisson":
            if not gaps:
                gaps = list(rng.exponential(gap, size=1024))
            scheduled += gaps.pop()
        else:
            scheduled += gap
