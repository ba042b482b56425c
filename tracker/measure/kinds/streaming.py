"""Streaming: each request one gRPC stream to a decoupled model (tracker/measure/stream.py
sends it). A request kind: it keeps the level kind's schedule and records, per request, the
time to its first token, the span from its first to its last token and its token count; it
adds AIPerf's time_to_first_token, inter_token_latency and output_token_throughput. Its
latency runs to the final response."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from tracker.measure.kinds.load_kind import Ints, LoadKind
from tracker.measure.percentiles import summarize_latencies
from tracker.measure.stream import StreamRecord, TokenCount, stream_rule

if TYPE_CHECKING:
    from tracker.measure.types import Measurement
    from tracker.spec.sections import LoadSection
    from tracker.triton.model_config import ModelConfig


@dataclass(frozen=True)
class Streaming(LoadKind):
    name: ClassVar[str] = "streaming"
    fields: ClassVar[tuple[str, ...]] = ("ttft_ns", "span_ns", "tokens")
    metrics: ClassVar[tuple[str, ...]] = (
        *(f"perf_time_to_first_token_{s}" for s in ("avg", "p50", "p90", "p95", "p99")),
        *(f"perf_inter_token_latency_{s}" for s in ("avg", "p50", "p90", "p95", "p99")),
        "perf_output_token_throughput")
    shown: ClassVar[tuple[str, ...]] = (
        "perf_output_token_throughput", "perf_time_to_first_token_p99",
        "perf_time_to_first_token_p50", "perf_inter_token_latency_p50")
    plotted: ClassVar[tuple[str, ...]] = ("perf_time_to_first_token_p99",
                                          "perf_inter_token_latency_p50")
    perf_analyzer_lacks: ClassVar[str] = ("time to first token and inter-token latency "
                                          "in its CSV")
    count: TokenCount = field(default_factory=TokenCount)

    @classmethod
    def of(cls, config: ModelConfig, load: LoadSection) -> LoadKind | None:
        count = stream_rule(config, load)
        return None if count is None else cls(count)

    def caller_options(self) -> dict[str, Any]:
        return {"stream": self.count}

    def record(self, t0: int, t1: int, got: object) -> tuple[int, tuple[int, ...]] | None:
        if type(got) is not StreamRecord:
            return None
        rec: StreamRecord = got
        if rec.tokens:
            return rec.final_ns - t0, (rec.first_ns - t0, rec.last_ns - rec.first_ns,
                                       rec.tokens)
        return rec.final_ns - t0, (-1, 0, 0)

    def add_metrics(self, m: Measurement, fields: Mapping[str, Ints]) -> None:
        tokens, ttft, span = fields["tokens"], fields["ttft_ns"], fields["span_ns"]
        m.streaming = True
        m.output_token_throughput = float(tokens.sum()) / m.duration_s if m.duration_s else 0.0
        m.output_tokens_avg = float(tokens.mean()) if tokens.size else None
        first = summarize_latencies(ttft[ttft >= 0])
        if first is not None:
            m.ttft_avg_ms, m.ttft_p50_ms, m.ttft_p90_ms = first.avg_ms, first.p50_ms, \
                first.p90_ms
            m.ttft_p95_ms, m.ttft_p99_ms = first.p95_ms, first.p99_ms
        itl = summarize_latencies(inter_token_ns(span, tokens))
        if itl is not None:
            m.itl_avg_ms, m.itl_p50_ms, m.itl_p90_ms = itl.avg_ms, itl.p50_ms, itl.p90_ms
            m.itl_p95_ms, m.itl_p99_ms = itl.p95_ms, itl.p99_ms


def inter_token_ns(span_ns: Ints, tokens: Ints) -> Ints:
    """Each streamed request's inter-token latency, AIPerf's ``inter_token_latency``: its
    first-to-last-token span over (tokens - 1); requests with fewer than 2 tokens have none."""
    keep = tokens >= 2
    return np.asarray(span_ns[keep] // (tokens[keep] - 1), dtype=np.int64)
