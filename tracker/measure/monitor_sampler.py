"""The sampler: polls the monitors (tracker/measure/monitors.py) on a thread while a level is
measured, and sums a time span up: the mean of each metric over the samples in the span, the
maximum for memory (``gpu_used_memory``, ``cpu_used_ram``: a peak, not an average).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence

from tracker.measure.monitors import Monitor

log = logging.getLogger(__name__)

_PEAK = ("gpu_used_memory", "cpu_used_ram")  # aggregated as the max over a span, else mean


class Sampler:
    """Polls monitors on a thread every ``interval_s``; :meth:`aggregate` summarizes a span
    (perf_counter_ns times). Earlier monitors win when two report the same metric."""

    def __init__(self, monitors: Sequence[Monitor], interval_s: float = 0.2) -> None:
        self.monitors = list(monitors)
        self.interval_s = interval_s
        self.samples: list[tuple[int, dict[str, float]]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample_once(self) -> None:
        merged: dict[str, float] = {}
        for monitor in self.monitors:
            try:
                values = monitor.sample()
            except Exception as exc:  # a broken monitor must not end the measurement
                log.warning("monitor %s failed: %s", monitor.name, exc)
                continue
            for key, value in values.items():
                merged.setdefault(key, value)
        self.samples.append((time.perf_counter_ns(), merged))

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample_once()
            self._stop.wait(self.interval_s)

    def start(self) -> None:
        if self.monitors and self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="tracker-monitors",
                                            daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
            self._thread = None

    def aggregate(self, start_ns: int, end_ns: int) -> dict[str, float]:
        """Mean of each metric over samples in the span (max for memory); absent if none."""
        span = [s for t, s in self.samples if start_ns <= t <= end_ns]
        if not span and self.samples:  # a span shorter than the interval: nearest sample
            span = [min(self.samples, key=lambda ts: abs(ts[0] - end_ns))[1]]
        keys = {k for s in span for k in s}
        out = {}
        for key in sorted(keys):
            values = [s[key] for s in span if key in s]
            peak = key.split(".")[0] in _PEAK
            out[key] = max(values) if peak else sum(values) / len(values)
        return out

    def close(self) -> None:
        self.stop()
        for monitor in self.monitors:
            monitor.close()
