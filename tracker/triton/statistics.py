"""Triton's statistics API as numbers: cumulative per-model counters, summed over versions.

A measurement window's server-side split (queue, compute input/infer/output) is the
difference of two snapshots taken at its edges (``later - earlier``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from tracker.errors import MeasurementError


@dataclass(frozen=True)
class ServerStats:
    """Cumulative counters of one model (all its versions summed) from the statistics API,
    or the difference of two such snapshots. Durations in ns; counts are per request."""

    inference_count: int = 0
    execution_count: int = 0
    success_count: int = 0
    success_ns: int = 0
    fail_count: int = 0
    queue_count: int = 0
    queue_ns: int = 0
    compute_input_count: int = 0
    compute_input_ns: int = 0
    compute_infer_count: int = 0
    compute_infer_ns: int = 0
    compute_output_count: int = 0
    compute_output_ns: int = 0

    def __sub__(self, earlier: ServerStats) -> ServerStats:
        return ServerStats(**{f.name: getattr(self, f.name) - getattr(earlier, f.name)
                              for f in fields(self)})

    def __add__(self, other: ServerStats) -> ServerStats:
        return ServerStats(**{f.name: getattr(self, f.name) + getattr(other, f.name)
                              for f in fields(self)})

    @staticmethod
    def _avg_ms(ns: int, count: int) -> float | None:
        return ns / count * 1e-6 if count > 0 else None

    @property
    def queue_ms(self) -> float | None:
        return self._avg_ms(self.queue_ns, self.queue_count)

    @property
    def compute_input_ms(self) -> float | None:
        return self._avg_ms(self.compute_input_ns, self.compute_input_count)

    @property
    def compute_infer_ms(self) -> float | None:
        return self._avg_ms(self.compute_infer_ns, self.compute_infer_count)

    @property
    def compute_output_ms(self) -> float | None:
        return self._avg_ms(self.compute_output_ns, self.compute_output_count)


_DURATIONS = ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output")


def _int(value: Any) -> int:
    return int(value) if value not in (None, "") else 0


def _from_json_entry(entry: Mapping[str, Any]) -> ServerStats:
    inf = entry.get("inference_stats", {}) or {}
    values: dict[str, int] = {
        "inference_count": _int(entry.get("inference_count")),
        "execution_count": _int(entry.get("execution_count")),
    }
    for key in _DURATIONS:
        part = inf.get(key, {}) or {}
        values[f"{key}_count"] = _int(part.get("count"))
        if key != "fail":
            values[f"{key}_ns"] = _int(part.get("ns"))
    return ServerStats(**values)


def _from_proto_entry(entry: Any) -> ServerStats:
    inf = entry.inference_stats
    return ServerStats(
        inference_count=entry.inference_count, execution_count=entry.execution_count,
        success_count=inf.success.count, success_ns=inf.success.ns,
        fail_count=inf.fail.count,
        queue_count=inf.queue.count, queue_ns=inf.queue.ns,
        compute_input_count=inf.compute_input.count, compute_input_ns=inf.compute_input.ns,
        compute_infer_count=inf.compute_infer.count, compute_infer_ns=inf.compute_infer.ns,
        compute_output_count=inf.compute_output.count,
        compute_output_ns=inf.compute_output.ns)


def _summed(pairs: Any) -> dict[str, ServerStats]:
    out: dict[str, ServerStats] = {}
    for name, stats in pairs:
        out[name] = out[name] + stats if name in out else stats
    return out


def all_stats_from_json(doc: Mapping[str, Any]) -> dict[str, ServerStats]:
    """Every model of a statistics response in JSON form (HTTP ``/v2/models/stats``, or the
    response of one model), each summed over its versions."""
    return _summed((str(e.get("name")), _from_json_entry(e)) for e in doc.get("model_stats", []))


def all_stats_from_proto(response: Any) -> dict[str, ServerStats]:
    """Every model of a gRPC ``ModelStatisticsResponse`` (a request without a model name
    returns every model the server has), each summed over its versions."""
    return _summed((e.name, _from_proto_entry(e)) for e in response.model_stats)


def pick(stats: Mapping[str, ServerStats], model_name: str) -> ServerStats:
    """``model_name``'s counters from :func:`all_stats_from_json`/``_proto``'s result;
    MeasurementError when the server reported none for it."""
    found = stats.get(model_name)
    if found is None:
        raise MeasurementError(
            f"the server reported no statistics for model {model_name!r}; is it loaded?")
    return found


def stats_from_json(doc: Mapping[str, Any], model_name: str) -> ServerStats:
    """A snapshot from the statistics API's JSON form (HTTP ``/v2/models/NAME/stats``, or the
    gRPC response turned into a dict), summed over the model's versions."""
    return pick(all_stats_from_json(doc), model_name)


def stats_from_proto(response: Any, model_name: str) -> ServerStats:
    """A snapshot from a gRPC ``ModelStatisticsResponse``, summed over the model's versions."""
    return pick(all_stats_from_proto(response), model_name)
