"""Request priorities: a request kind that sends a share of the load at each of Triton's
priority levels (``load.priorities``) and splits the figures per level.

The requests are pre-built with their level (tracker/measure/priorities.py: which request goes
at which level, and how the level is written into it); the level kind (closed loop, request
rate, streaming) sends them as any others. Per request the kind records the field
``priority``, read off the request sent (:meth:`Priorities.tag`), and from the level's pooled
requests it adds, per level L, ``<metric>/priority_L`` for each of
:data:`~tracker.metrics.PRIORITY_METRICS`: the throughput of that level's requests and their
latency (avg, p50, p90, p95, p99). A level none of whose requests was answered in the windows
gets a throughput of 0 and no latency.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from tracker.errors import MeasurementError
from tracker.measure.kinds.load_kind import LATENCY, Ints, LoadKind, Payload
from tracker.measure.percentiles import summarize_latencies
from tracker.measure.priorities import level_of
from tracker.metrics import priority_metric

if TYPE_CHECKING:
    from tracker.measure.types import Measurement
    from tracker.spec.sections import LoadSection
    from tracker.triton.model_config import ModelConfig


@dataclass(frozen=True)
class Priorities(LoadKind):
    """Requests at ``priority_levels`` (Triton's request priority), over ``protocol``."""

    name: ClassVar[str] = "priorities"
    fields: ClassVar[tuple[str, ...]] = ("priority",)
    perf_analyzer_lacks: ClassVar[str] = "a mix of priority levels (it sends every request at one)"
    priority_levels: tuple[int, ...] = ()
    protocol: str = "grpc"

    @classmethod
    def of(cls, config: ModelConfig, load: LoadSection) -> LoadKind | None:
        if not load.priorities:
            return None
        if config is not None and config.HasField("sequence_batching"):
            raise MeasurementError(
                f"load.priorities needs a dynamic batcher (its priority_levels), but model "
                f"{str(config.name)!r} is stateful (a sequence batcher has no priorities)")
        return cls(tuple(load.priorities), load.protocol)

    def tag(self, payload: Payload) -> tuple[int, ...]:
        return (level_of(payload, self.priority_levels, self.protocol),)

    def add_metrics(self, m: Measurement, fields: Mapping[str, Ints]) -> None:
        levels, latencies = fields["priority"], fields[LATENCY]
        for level in self.priority_levels:
            mine = latencies[levels == level]
            m.figures[priority_metric("perf_throughput", level)] = (
                mine.size * m.batch_size / m.duration_s if m.duration_s else 0.0)
            summary = summarize_latencies(mine)
            if summary is None:
                continue
            for stat in ("avg", "p50", "p90", "p95", "p99"):
                m.figures[priority_metric(f"perf_latency_{stat}", level)] = float(
                    getattr(summary, f"{stat}_ms"))
