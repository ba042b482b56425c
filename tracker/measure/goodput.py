"""Goodput: the requests of an open-loop level answered within the SLA (AIPerf's definition:
completed requests per second that meet every service-level objective).

The SLA is the study's latency bounds (``constraints``), read per request: a request is good
when each latency it has is at most the largest ``max`` set on that latency's figures
(``perf_latency_p99: {max: 20}`` -> its latency <= 20 ms; a streaming model's
``perf_time_to_first_token_*`` and ``perf_inter_token_latency_*`` bound its time to first
token and its inter-token latency). A failed request is never good. The figures are
:class:`~tracker.measure.types.Measurement` ``goodput`` (good requests per second) and
``goodput_pct`` (good requests out of those answered or failed).

Pure functions over the pooled per-request values of a level's windows.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

from tracker.measure.kinds.load_kind import LATENCY

Ints = npt.NDArray[np.int64]

#: a latency figure's name prefix -> the per-request value it bounds (a load kind's field, or
#: ``itl_ns``: derived from a streamed request's span and tokens)
FIGURES: tuple[tuple[str, str], ...] = (
    ("perf_latency_", LATENCY),
    ("perf_time_to_first_token_", "ttft_ns"),
    ("perf_inter_token_latency_", "itl_ns"),
)


def request_slo(constraints: Mapping[str, object] | None) -> dict[str, float]:
    """Per-request bounds (ms) from one entry's constraints (bare metric names): the largest
    ``max`` of each latency's figures; figures without a ``max`` bound nothing."""
    out: dict[str, float] = {}
    for metric, bound in (constraints or {}).items():
        hi = bound.get("max") if isinstance(bound, Mapping) else getattr(bound, "max", None)
        if hi is None or "/" in metric:  # a priority level's or a step's figure: not all
            continue
        for prefix, value in FIGURES:
            if metric.startswith(prefix):
                out[value] = max(out.get(value, 0.0), float(hi))
    return out


def _inter_token(fields: Mapping[str, Ints]) -> Ints | None:
    span, tokens = fields.get("span_ns"), fields.get("tokens")
    if span is None or tokens is None:
        return None
    out = np.full(span.shape, -1, dtype=np.int64)  # fewer than 2 tokens: none, so no bound
    keep = tokens >= 2
    out[keep] = span[keep] // (tokens[keep] - 1)
    return out


def goodput(fields: Mapping[str, Ints], slo: Mapping[str, float], duration_s: float,
            failed: int = 0) -> tuple[float, float] | None:
    """(good requests per second, good share in %) of the requests whose per-request values
    are ``fields`` (aligned; the latencies under ``LATENCY``), over ``duration_s``, with
    ``failed`` more requests that failed; None without bounds or without requests."""
    lat = fields.get(LATENCY)
    if not slo or lat is None or duration_s <= 0:
        return None
    total = int(lat.size) + failed
    if total == 0:
        return None
    good = np.ones(lat.shape, dtype=bool)
    values = {**fields, "itl_ns": _inter_token(fields)}
    for name, bound_ms in slo.items():
        got = values.get(name)
        if got is None:
            continue  # this level does not measure that figure (a unary model's TTFT)
        ok = got <= bound_ms * 1e6
        if name != LATENCY:
            ok |= got < 0  # the request has no such figure (no second token)
        good &= ok
    count = int(good.sum())
    return count / duration_s, 100.0 * count / total
