"""The data a measurement produces: one :class:`Measurement` per load level, a
:class:`SweepResult` per sweep. Plain dataclasses, so every layer above (search, tracking) can
use them without knowing how they were made.

Units: latencies and server times in milliseconds, throughput in inferences per second
(requests x batch size per second). For a streaming (decoupled) model a request is one
stream: ``throughput`` is requests/s and the ``latency_*`` figures are end-to-end (request
sent to final response); the token figures (``ttft_*``, ``itl_*``, output tokens/s) are
AIPerf's time_to_first_token, inter_token_latency and output_token_throughput. A figure that
was not measured is ``None`` (or absent from ``monitors``), never a made-up zero.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, get_args

from tracker.metrics import FIELD_METRICS, STEP_METRICS, model_metric, step_metric

#: the load client that measures: the built-in load generator, or the perf_analyzer binary
#: on PATH (``tracker tune/profile --perf-analyzer``). Not a Triton backend.
LoadClient = Literal["builtin", "perf_analyzer"]
LOAD_CLIENTS: tuple[LoadClient, ...] = get_args(LoadClient)


@dataclass(frozen=True)
class StepSplit:
    """Where one composing model of a pipeline spent its time over the same windows as the
    entry model's figures (the differences of its statistics counters): requests it answered
    (and per second), queue and compute input/infer/output per request (ms; None when it
    executed nothing), and inferences and executions (``batch_size``, inferences per
    execution, shows how well its dynamic batcher batched)."""

    requests: int = 0
    requests_per_s: float = 0.0
    queue_ms: float | None = None
    compute_input_ms: float | None = None
    compute_infer_ms: float | None = None
    compute_output_ms: float | None = None
    inferences: int = 0
    executions: int = 0
    failures: int = 0

    @property
    def batch_size(self) -> float | None:
        """Average execution batch (inferences per execution); None without executions."""
        return self.inferences / self.executions if self.executions > 0 else None

    @property
    def server_ms(self) -> float:
        """Queue + compute input/infer/output per request (the parts measured)."""
        parts = (self.queue_ms, self.compute_input_ms, self.compute_infer_ms,
                 self.compute_output_ms)
        return sum(v for v in parts if v is not None)

    def metrics(self, model: str) -> dict[str, float]:
        """``model/<model>/<figure>`` -> value; figures not measured are absent."""
        out: dict[str, float] = {}
        for figure in STEP_METRICS:
            value = getattr(self, figure.name)
            if value is not None:
                out[step_metric(model, figure.name)] = float(value)
        return out


@dataclass
class Measurement:
    """The result at one load level (a concurrency or a request rate).

    ``stable`` says whether the last windows agreed within the stability percentage; an
    unstable measurement keeps its figures but is flagged, never silently accepted. ``valid``
    is False when the measurement cannot be used at all (errors above the threshold, server
    stopped answering); ``invalid_reason`` then says why.
    """

    concurrency: int | None = None
    request_rate: float | None = None
    batch_size: int = 1
    throughput: float = 0.0
    latency_avg_ms: float | None = None
    latency_p50_ms: float | None = None
    latency_p90_ms: float | None = None
    latency_p95_ms: float | None = None
    latency_p99_ms: float | None = None
    server_queue_ms: float | None = None
    server_compute_input_ms: float | None = None
    server_compute_infer_ms: float | None = None
    server_compute_output_ms: float | None = None
    # client-side serialization / deserialization: only perf_analyzer's CSV reports them
    # (the built-in client sends pre-serialized requests and does not time them apart)
    client_send_ms: float | None = None
    client_recv_ms: float | None = None
    # streaming models only (None otherwise)
    streaming: bool = False
    ttft_avg_ms: float | None = None
    ttft_p50_ms: float | None = None
    ttft_p90_ms: float | None = None
    ttft_p95_ms: float | None = None
    ttft_p99_ms: float | None = None
    itl_avg_ms: float | None = None
    itl_p50_ms: float | None = None
    itl_p90_ms: float | None = None
    itl_p95_ms: float | None = None
    itl_p99_ms: float | None = None
    output_token_throughput: float | None = None   # tokens/s
    output_tokens_avg: float | None = None         # tokens per request (not a catalog metric)
    # stateful models (sequence loads) only: sequences ended per second, and the latency of a
    # whole sequence (its first request sent to its last answered)
    sequence_throughput: float | None = None
    sequence_latency_avg_ms: float | None = None
    sequence_latency_p50_ms: float | None = None
    sequence_latency_p90_ms: float | None = None
    sequence_latency_p99_ms: float | None = None
    # open-loop levels with latency bounds: the requests answered within every bound
    # (measure/goodput.py), per second and as a share of the requests answered or failed
    goodput: float | None = None
    goodput_pct: float | None = None
    requests: int = 0
    sent: int = 0                    # requests sent in the windows measured
    server_requests: int | None = None
    errors: int = 0
    first_error: str | None = None
    stable: bool = False
    valid: bool = True
    invalid_reason: str | None = None
    client_overhead_pct: float | None = None
    duration_s: float = 0.0
    windows: int = 0
    warnings: list[str] = field(default_factory=list)
    monitors: dict[str, float] = field(default_factory=dict)
    # figures a load kind adds beyond the fields above (LoadKind.add_metrics), by metric name
    figures: dict[str, float] = field(default_factory=dict)
    source: LoadClient = "builtin"  # the load client that measured it
    # a pipeline's composing models, by name, over the same windows (sweep(models=...))
    steps: dict[str, StepSplit] = field(default_factory=dict)
    # the span the figures come from: first window's start, last window's end
    # (time.perf_counter_ns, CLOCK_MONOTONIC: comparable across the measurements of one host)
    start_ns: int | None = None
    end_ns: int | None = None

    @property
    def level(self) -> str:
        """The load level in words: ``concurrency 4`` or ``request rate 250/s``."""
        if self.concurrency is not None:
            return f"concurrency {self.concurrency}"
        if self.request_rate is not None:
            return f"request rate {self.request_rate:g}/s"
        return "unknown load level"

    @property
    def network_ms(self) -> float | None:
        """perf_analyzer's "Network+Server Send/Recv": client wait time not accounted for by
        the server's queue and compute times (capped at 0, as perf_analyzer does)."""
        if self.latency_avg_ms is None:
            return None
        server = [self.server_queue_ms, self.server_compute_input_ms,
                  self.server_compute_infer_ms, self.server_compute_output_ms]
        accounted = sum(v for v in server if v is not None)
        wait = self.latency_avg_ms - self.client_ms
        return max(wait - accounted, 0.0)

    @property
    def client_ms(self) -> float:
        """Client send + receive time where measured (0 where not: nothing to subtract)."""
        return (self.client_send_ms or 0.0) + (self.client_recv_ms or 0.0)

    def metrics(self) -> dict[str, float]:
        """Metric name -> value (tracker/metrics.py's names); figures not measured are absent."""
        out: dict[str, float] = {}
        for attr, name in FIELD_METRICS:
            value = getattr(self, attr)
            if value is not None:
                out[name] = float(value)
        out.update({k: float(v) for k, v in self.monitors.items()})
        out.update(self.figures)
        for model, split in self.steps.items():
            out.update(split.metrics(model))
        return out


@dataclass
class SweepLevel:
    """One level of a sweep: each entry model's Measurement at its own load, measured in the
    same windows (tracker/measure/level.py); ``index``: the level's place in the sweep's list
    of levels (a planned sweep measures them out of order). One entry model is the one-entry
    case."""

    measurements: dict[str, Measurement]
    index: int = 0

    @property
    def valid(self) -> bool:
        return all(m.valid for m in self.measurements.values())

    @property
    def stable(self) -> bool:
        return all(m.stable for m in self.measurements.values())

    @property
    def level(self) -> str:
        """The level in words: ``a: concurrency 2, b: concurrency 8``."""
        return ", ".join(f"{name}: {m.level}" for name, m in self.measurements.items())

    def metrics(self) -> dict[str, float]:
        """``<model>/<metric>`` -> value for every entry's metrics (``a/perf_latency_p99``)."""
        return {model_metric(name, key): value for name, m in self.measurements.items()
                for key, value in m.metrics().items()}


@dataclass
class SweepResult:
    """Every level measured by one sweep, in the order measured, and why the sweep ended.
    (The level a configuration is judged by: search/objective.py.)"""

    levels: list[SweepLevel]
    stop_reason: str

    @property
    def names(self) -> list[str]:
        """The entry models measured, in the sweep's order."""
        return list(self.levels[0].measurements) if self.levels else []

    @property
    def measurements(self) -> list[Measurement]:
        """Every entry's Measurements, level after level."""
        return [m for level in self.levels for m in level.measurements.values()]

    def of(self, model: str) -> list[Measurement]:
        """One entry model's Measurements, a level each."""
        return [level.measurements[model] for level in self.levels]
