"""Numbers from samples: latency percentiles (perf_analyzer's rule). The server-side split
from Triton's statistics API lives in tracker.triton.statistics; a
:class:`Snapshot` is one statistics request's counters of the entry model and the other
models measured with it (a pipeline's composing models)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from tracker.errors import MeasurementError
from tracker.triton.statistics import ServerStats

PERCENTILES: tuple[int, ...] = (50, 90, 95, 99)


def percentile_index(p: float, n: int) -> int:
    """perf_analyzer's index into the sorted samples: ``int(p/100 * (n-1) + 0.5)``."""
    if n <= 0:
        raise MeasurementError(f"a percentile needs at least one sample, but got n={n}")
    if not 0 <= p <= 100:
        raise MeasurementError(f"a percentile must lie in [0, 100], but got p={p}")
    return int(p / 100.0 * (n - 1) + 0.5)


def percentiles(values: npt.ArrayLike, ps: Sequence[float] = PERCENTILES) -> dict[float, float]:
    """The ``ps`` percentiles of ``values`` as perf_analyzer picks them (a sample, never an
    interpolation between two). Uses one partial sort for all of them."""
    arr = np.asarray(values)
    n = int(arr.size)
    idx = [percentile_index(p, n) for p in ps]
    part = np.partition(arr, sorted(set(idx)))
    return {p: float(part[i]) for p, i in zip(ps, idx, strict=True)}


@dataclass(frozen=True)
class LatencySummary:
    """Average and percentiles of a set of latencies, in milliseconds."""

    count: int
    avg_ms: float
    p50_ms: float
    p90_ms: float
    p95_ms: float
    p99_ms: float


def summarize_latencies(latencies_ns: npt.ArrayLike) -> LatencySummary | None:
    """Average and p50/p90/p95/p99 in ms of latencies given in ns; None when there are none."""
    arr = np.asarray(latencies_ns, dtype=np.int64)
    if arr.size == 0:
        return None
    pct = percentiles(arr)
    ms = 1e-6
    return LatencySummary(count=int(arr.size), avg_ms=float(arr.mean()) * ms,
                          p50_ms=pct[50] * ms, p90_ms=pct[90] * ms,
                          p95_ms=pct[95] * ms, p99_ms=pct[99] * ms)


@dataclass(frozen=True)
class Snapshot:
    """The cumulative counters of the entry model and of ``models`` (by name) from one
    statistics request, or the difference of two such snapshots (``later - earlier``)."""

    entry: ServerStats
    models: dict[str, ServerStats] = field(default_factory=dict)

    def __sub__(self, earlier: Snapshot) -> Snapshot:
        return Snapshot(self.entry - earlier.entry,
                        {name: stats - earlier.models[name] for name, stats in self.models.items()
                         if name in earlier.models})
