"""Triton's response cache as seen on its metrics endpoint: hits, misses and their times.

Triton counts per model (``nv_cache_num_hits_per_model``, ``nv_cache_num_misses_per_model``,
``nv_cache_hit_duration_per_model`` and ``nv_cache_miss_duration_per_model``, cumulative, in
microseconds; a miss's time is its lookup plus the insertion of the response). A
:class:`CacheRates` turns two successive readings into the figures of the span between them
(the catalog's ``cache_*`` metrics, tracker/metrics.py); the metrics monitor
(monitors.py) reports them with each sample, so a window's figure is the mean over its
samples. Nothing is reported while no request looked the cache up (cache off, or no model
with ``response_cache.enable``).
"""

from __future__ import annotations

import re
import time

_SERIES = {"nv_cache_num_hits_per_model": "hits", "nv_cache_num_misses_per_model": "misses",
           "nv_cache_hit_duration_per_model": "hit_us",
           "nv_cache_miss_duration_per_model": "miss_us"}
_LINE = re.compile(r"^(nv_cache_[a-z_]+_per_model)\{[^}]*\}\s+([-+0-9.eE]+)\s*$")


def cache_counters(text: str) -> dict[str, float]:
    """The cumulative cache counters of every model of Triton's Prometheus text, summed
    (``hits``, ``misses``, ``hit_us``, ``miss_us``); {} when the server reports none."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        found = _LINE.match(line.strip())
        if found and found.group(1) in _SERIES:
            key = _SERIES[found.group(1)]
            out[key] = out.get(key, 0.0) + float(found.group(2))
    return out


def cache_figures(earlier: dict[str, float], later: dict[str, float],
                  seconds: float) -> dict[str, float]:
    """The catalog's cache metrics over the span between two readings; {} without lookups."""
    d = {k: later.get(k, 0.0) - earlier.get(k, 0.0) for k in _SERIES.values()}
    lookups = d["hits"] + d["misses"]
    if lookups <= 0 or seconds <= 0:
        return {}
    out = {"cache_hit_ratio": 100.0 * d["hits"] / lookups,
           "cache_hits_per_s": d["hits"] / seconds,
           "cache_misses_per_s": d["misses"] / seconds}
    if d["hits"] > 0:
        out["cache_hit_time_us"] = d["hit_us"] / d["hits"]
    if d["misses"] > 0:
        out["cache_miss_time_us"] = d["miss_us"] / d["misses"]
    return out


class CacheRates:
    """Successive readings of one server's metrics text -> the cache figures since the last."""

    def __init__(self) -> None:
        self._last: tuple[float, dict[str, float]] | None = None

    def update(self, text: str) -> dict[str, float]:
        now, counters = time.perf_counter(), cache_counters(text)
        if not counters:
            return {}
        last, self._last = self._last, (now, counters)
        return {} if last is None else cache_figures(last[1], counters, now - last[0])
