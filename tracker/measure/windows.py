"""Measurement windows as perf_analyzer defines them, and the stability rule.

A level is measured in consecutive windows (a fixed time, or until a number of requests have
completed). After each window the last ``stability_count`` (3) windows are compared: the level
is stable when, for throughput and for p99 latency, max/min <= 1 + stability_pct/100 (the rule
of perf_analyzer's ``IsInferWindowStable``/``IsLatencyWindowStable``), and no window has zero
throughput. At most ``max_tries`` windows are measured; a level that never stabilizes is
reported as unstable with the figures of its last windows. A window whose failed requests
exceed ``max_error_pct`` ends the level at once as invalid. An open-loop level whose queue
grows (:func:`overloaded`) ends early, unstable: more windows cannot make it hold its rate.

Everything here is pure: the windows themselves come from a callable, so the rule is tested
with synthetic samples.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from tracker.errors import MeasurementError
from tracker.measure.goodput import goodput
from tracker.measure.kinds.load_kind import LATENCY
from tracker.measure.percentiles import summarize_latencies
from tracker.measure.types import Measurement, StepSplit
from tracker.triton.statistics import ServerStats

if TYPE_CHECKING:
    from tracker.measure.kinds.load_kind import LoadKind

_NONE = np.empty(0, np.int64)


@dataclass
class Window:
    """What happened in one window: latencies of the requests that completed in it (by end
    time, as perf_analyzer counts), failed requests, requests sent, the client's busy share and
    the server's counters over the same span (the entry model's, and a pipeline's composing
    models' in ``steps``)."""

    start_ns: int
    end_ns: int
    latencies_ns: npt.NDArray[np.int64]
    errors: int = 0
    # each load kind's per-request values (LoadKind.fields), aligned with latencies_ns
    fields: dict[str, npt.NDArray[np.int64]] = field(default_factory=dict)
    first_error: str | None = None
    sent: int = 0
    busy_pct: float | None = None
    server: ServerStats | None = None
    warnings: list[str] = field(default_factory=list)
    steps: dict[str, ServerStats] | None = None  # composing models' counters, same span

    @property
    def duration_s(self) -> float:
        return max(self.end_ns - self.start_ns, 1) * 1e-9

    @property
    def requests(self) -> int:
        return int(self.latencies_ns.size)

    def throughput(self, batch_size: int = 1) -> float:
        return self.requests * batch_size / self.duration_s

    def p99_ms(self) -> float | None:
        summary = summarize_latencies(self.latencies_ns)
        return summary.p99_ms if summary else None

    def error_pct(self) -> float:
        total = self.requests + self.errors
        return 100.0 * self.errors / total if total else 0.0


@dataclass(frozen=True)
class WindowSettings:
    """The knobs of the stability loop (LoadSection's fields of the same names)."""

    window_ms: int = 1000
    window_requests: int | None = None
    stability_pct: float = 10.0
    max_tries: int = 10
    max_error_pct: float = 1.0
    stability_count: int = 3

    def __post_init__(self) -> None:
        if self.window_ms <= 0:
            raise MeasurementError(f"window_ms must be > 0, but got {self.window_ms}")
        if self.window_requests is not None and self.window_requests <= 0:
            raise MeasurementError(
                f"window_requests must be > 0 when set, but got {self.window_requests}")
        if self.stability_pct <= 0:
            raise MeasurementError(f"stability_pct must be > 0, but got {self.stability_pct}")
        if self.stability_count < 1:
            raise MeasurementError(
                f"stability_count must be >= 1, but got {self.stability_count}")
        if self.max_tries < self.stability_count:
            raise MeasurementError(
                f"max_tries must be >= {self.stability_count} (the windows compared for "
                f"stability), but got {self.max_tries}")


def within(values: Sequence[float], pct: float) -> bool:
    """max/min <= 1 + pct/100, all values positive."""
    if not values or min(values) <= 0:
        return False
    return max(values) / min(values) <= 1.0 + pct / 100.0


def is_stable(windows: Sequence[Window], settings: WindowSettings) -> bool:
    """The last ``stability_count`` windows agree on throughput and on p99 latency."""
    n = settings.stability_count
    if len(windows) < n:
        return False
    last = windows[-n:]
    throughputs = [w.throughput() for w in last]
    latencies = [w.p99_ms() for w in last]
    if any(v is None for v in latencies):
        return False
    p99s = [v for v in latencies if v is not None]
    return within(throughputs, settings.stability_pct) and within(p99s, settings.stability_pct)


#: an open-loop level is overloaded when requests sent but not ended grew in each of the last
#: windows by this share of those sent in total (the queue grows: more windows cannot help)
OVERLOAD_SHARE = 0.10


def overloaded(windows: Sequence[Window], settings: WindowSettings) -> bool:
    """An open-loop level's last ``stability_count`` windows each ended fewer requests than
    they sent, together more than :data:`OVERLOAD_SHARE` of them: the server is behind its
    offered rate and the queue grows, so the level ends without waiting for stability."""
    n = settings.stability_count
    last = windows[-n:]
    if len(last) < n:
        return False
    growth = [w.sent - w.requests - w.errors for w in last]
    sent = sum(w.sent for w in last)
    return all(g > 0 for g in growth) and sum(growth) > OVERLOAD_SHARE * sent


@dataclass
class WindowRun:
    """The windows of one level, whether they stabilized, and why the level is invalid (if)."""

    windows: list[Window]
    stable: bool
    invalid_reason: str | None = None


def error_reason(window: Window, max_error_pct: float) -> str | None:
    """Why a window's failures make the level invalid, or None when they are within bounds."""
    if window.errors == 0 or window.error_pct() <= max_error_pct:
        return None
    total = window.requests + window.errors
    return (f"{window.errors} of {total} requests failed ({window.error_pct():.1f}% > "
            f"max_error_pct {max_error_pct:g}%); first error: {window.first_error}")


async def run_windows(next_window: Callable[[], Awaitable[Window]],
                      settings: WindowSettings) -> WindowRun:
    """Measure windows until the last ones are stable, a window has too many errors, or
    ``max_tries`` windows were taken."""
    windows: list[Window] = []
    for _ in range(settings.max_tries):
        window = await next_window()
        windows.append(window)
        reason = error_reason(window, settings.max_error_pct)
        if reason is not None:
            return WindowRun(windows, stable=False, invalid_reason=reason)
        if is_stable(windows, settings):
            return WindowRun(windows, stable=True)
    return WindowRun(windows, stable=False)


def merge(run: WindowRun, *, settings: WindowSettings, batch_size: int = 1,
          concurrency: int | None = None, request_rate: float | None = None,
          kinds: Sequence[LoadKind] = (), slo: Mapping[str, float] | None = None,
          ) -> Measurement:
    """One Measurement from the last ``stability_count`` windows of a level (their latencies
    pooled, throughput = requests / total time, server split from the summed counters; each
    of ``kinds`` adds its figures from the pooled per-request fields; an open-loop level's
    goodput against the per-request bounds ``slo``, measure/goodput.py)."""
    last = run.windows[-settings.stability_count:]
    m = Measurement(concurrency=concurrency, request_rate=request_rate, batch_size=batch_size,
                    stable=run.stable, windows=len(run.windows))
    if not last:
        m.valid = False
        m.invalid_reason = run.invalid_reason or "no measurement window was completed"
        return m
    lat = np.concatenate([w.latencies_ns for w in last])
    m.duration_s = sum(w.duration_s for w in last)
    m.requests = int(lat.size)
    m.throughput = m.requests * batch_size / m.duration_s
    summary = summarize_latencies(lat)
    if summary is not None:
        m.latency_avg_ms, m.latency_p50_ms = summary.avg_ms, summary.p50_ms
        m.latency_p90_ms, m.latency_p95_ms = summary.p90_ms, summary.p95_ms
        m.latency_p99_ms = summary.p99_ms
    pooled = {LATENCY: lat, **{name: np.concatenate([w.fields.get(name, _NONE) for w in last])
                               for kind in kinds for name in kind.fields}}
    for kind in kinds:
        kind.add_metrics(m, {LATENCY: lat, **{name: pooled[name] for name in kind.fields}})
    _counts(m, last, pooled, slo)
    m.first_error = next((w.first_error for w in [*last, *run.windows] if w.first_error), None)
    servers = [w.server for w in last if w.server is not None]
    if servers and len(servers) == len(last):
        server = ServerStats()
        for part in servers:
            server = server + part
        m.server_requests = server.success_count
        m.server_queue_ms = server.queue_ms
        m.server_compute_input_ms = server.compute_input_ms
        m.server_compute_infer_ms = server.compute_infer_ms
        m.server_compute_output_ms = server.compute_output_ms
    m.steps = step_splits(last, m.duration_s)
    m.start_ns, m.end_ns = last[0].start_ns, last[-1].end_ns
    busy = [w.busy_pct for w in last if w.busy_pct is not None]
    m.client_overhead_pct = max(busy) if busy else None
    for w in last:
        for text in w.warnings:
            if text not in m.warnings:
                m.warnings.append(text)
    if run.invalid_reason is not None:
        m.valid = False
        m.invalid_reason = run.invalid_reason
    elif m.requests == 0:
        m.valid = False
        m.invalid_reason = "no request completed in the measurement windows"
    if not run.stable and m.valid:
        m.warnings.append(
            f"unstable: throughput or p99 latency of the last {settings.stability_count} "
            f"windows differ by more than {settings.stability_pct:g}% after "
            f"{len(run.windows)} windows")
    return m


def _counts(m: Measurement, last: Sequence[Window], pooled: dict[str, npt.NDArray[np.int64]],
            slo: Mapping[str, float] | None) -> None:
    """Requests failed and sent over the same span as the requests; an open-loop level's
    goodput against ``slo``."""
    m.errors = sum(w.errors for w in last)
    m.sent = sum(w.sent for w in last)
    good = goodput(pooled, slo or {}, m.duration_s, m.errors) if m.request_rate else None
    if good is not None:
        m.goodput, m.goodput_pct = good


def step_splits(windows: Sequence[Window], duration_s: float) -> dict[str, StepSplit]:
    """Each composing model's split over ``windows`` (their counters summed), for the models
    every window measured; ``duration_s`` is the windows' total time."""
    if not windows or any(w.steps is None for w in windows):
        return {}
    names = [n for n in windows[0].steps or {} if all(n in (w.steps or {}) for w in windows)]
    out: dict[str, StepSplit] = {}
    for name in names:
        total = ServerStats()
        for w in windows:
            total = total + (w.steps or {})[name]
        out[name] = StepSplit(
            requests=total.success_count,
            requests_per_s=total.success_count / duration_s if duration_s > 0 else 0.0,
            queue_ms=total.queue_ms, compute_input_ms=total.compute_input_ms,
            compute_infer_ms=total.compute_infer_ms, compute_output_ms=total.compute_output_ms,
            inferences=total.inference_count, executions=total.execution_count,
            failures=total.fail_count)
    return out
