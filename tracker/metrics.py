"""The metric catalog: every metric a trial can be judged by, and the load knobs.

One entry per metric (Model Analyzer's names): which way is better, its unit,
the :class:`~tracker.measure.types.Measurement` field that holds it (None: a monitor's figure,
in ``Measurement.monitors``) and its perf_analyzer CSV column (None: not in the file). The spec
(objective/constraint names), the Measurement's ``metrics()``, the CSV reader and the report's
units all read this table; tests/bottom/test_metrics.py checks that they agree.

Adding a metric: one :class:`Metric` entry here, plus the code that measures it (a Measurement
field, or a monitor in measure/monitors.py that returns it under this name).

Metric names with a model in them (:func:`lookup` resolves both):
- ``model/<name>/<figure>``: a composing model of a pipeline measured in the entry model's
  windows (:data:`STEP_METRICS`: ``queue_ms``, ``compute_input_ms``, ``compute_infer_ms``,
  ``compute_output_ms``, ``requests_per_s``, ``batch_size``), e.g. ``model/preprocess/queue_ms``;
- ``<model>/<metric>``: one of several independent models measured together on one server
  (tracker/measure/sweep.py), any name above, e.g. ``resnet/perf_latency_p99``.

Metric names with a request priority level in them (``load.priorities``, measured by
tracker/measure/kinds/priorities.py): ``<metric>/priority_<level>``, one of
:data:`PRIORITY_METRICS` over the requests sent at that level, e.g.
``perf_latency_p99/priority_1`` (``resnet/perf_latency_p99/priority_1`` among several models).

Load knobs (:data:`LOAD_KNOBS`) are search-space keys that set the load rather than a
config.pbtxt field: a trial with ``concurrency: 4`` is measured at that one level.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

Better = Literal["maximize", "minimize"]
MAX: Better = "maximize"
MIN: Better = "minimize"


@dataclass(frozen=True)
class Metric:
    name: str
    better: Better
    unit: str
    field: str | None = None     # Measurement attribute; None: from a monitor
    column: str | None = None    # perf_analyzer CSV column (ms figures are microseconds there)
    #: a score against the default configuration (computed, not measured: the search's
    #: ``DERIVED``): the confirmation computes it once the round's default is measured and
    #: compares it as the ratio it stands for (the default: 1 in every round)
    relative: bool = False
    #: what computes a figure that is neither a Measurement field nor a monitor's ("": those)
    by: str = ""


WEIGHTED_GAIN = "weighted_gain"
CAPACITY = "perf_capacity"

CATALOG: tuple[Metric, ...] = (
    Metric("perf_throughput", "maximize", "infer/s", "throughput", "Inferences/Second"),
    Metric("perf_latency_avg", "minimize", "ms", "latency_avg_ms", "Avg latency"),
    Metric("perf_latency_p50", "minimize", "ms", "latency_p50_ms", "p50 latency"),
    Metric("perf_latency_p90", "minimize", "ms", "latency_p90_ms", "p90 latency"),
    Metric("perf_latency_p95", "minimize", "ms", "latency_p95_ms", "p95 latency"),
    Metric("perf_latency_p99", "minimize", "ms", "latency_p99_ms", "p99 latency"),
    Metric("perf_server_queue", "minimize", "ms", "server_queue_ms", "Server Queue"),
    Metric("perf_server_compute_input", "minimize", "ms", "server_compute_input_ms",
           "Server Compute Input"),
    Metric("perf_server_compute_infer", "minimize", "ms", "server_compute_infer_ms",
           "Server Compute Infer"),
    Metric("perf_server_compute_output", "minimize", "ms", "server_compute_output_ms",
           "Server Compute Output"),
    # streaming (decoupled) models, AIPerf's meanings: time_to_first_token (request sent to
    # first token), inter_token_latency (per request: (last - first token) / (tokens - 1)),
    # output_token_throughput (tokens of the requests that ended in the windows / their time).
    # For these models perf_throughput is requests/s and perf_latency_* end-to-end latency.
    *(Metric(f"perf_time_to_first_token_{s}", "minimize", "ms", f"ttft_{s}_ms", f"TTFT {s}")
      for s in ("avg", "p50", "p90", "p95", "p99")),
    *(Metric(f"perf_inter_token_latency_{s}", "minimize", "ms", f"itl_{s}_ms", f"ITL {s}")
      for s in ("avg", "p50", "p90", "p95", "p99")),
    Metric("perf_output_token_throughput", "maximize", "tokens/s", "output_token_throughput",
           "Output Tokens/Second"),
    # stateful models (a sequence load, measure/kinds/sequences.py): whole sequences ended per
    # second, and a whole sequence's latency (first request sent to last answered)
    Metric("perf_sequence_throughput", "maximize", "seq/s", "sequence_throughput",
           "Sequences/Second"),
    *(Metric(f"perf_sequence_latency_{s}", "minimize", "ms", f"sequence_latency_{s}_ms",
             f"Sequence {s} latency") for s in ("avg", "p50", "p90", "p99")),
    Metric("gpu_used_memory", "minimize", "MB", column="Max GPU Memory Usage"),
    Metric("gpu_utilization", "maximize", "%", column="Avg GPU Utilization"),
    Metric("gpu_power_usage", "minimize", "W", column="Avg GPU Power Usage"),
    Metric("cpu_used_ram", "minimize", "MB"),
    Metric("cpu_utilization", "minimize", "%"),
    # Triton's response cache, from its metrics endpoint (measure/cache_metrics.py): the share
    # of lookups that hit, hits and misses per second, the time of a hit (lookup) and of a
    # miss (lookup + insertion)
    Metric("cache_hit_ratio", "maximize", "%"),
    Metric("cache_hits_per_s", "maximize", "hits/s"),
    Metric("cache_misses_per_s", "minimize", "misses/s"),
    Metric("cache_hit_time_us", "minimize", "us"),
    Metric("cache_miss_time_us", "minimize", "us"),
    # open-loop levels: the requests answered within the SLA (every latency bound of the
    # constraints, per request; AIPerf's goodput), as a share and per second
    Metric("perf_goodput", "maximize", "req/s", "goodput"),
    Metric("perf_goodput_pct", "maximize", "%", "goodput_pct"),
    # a trial's capacity (tracker/search/capacity.py): the highest offered open-loop rate
    # that holds the SLA, its bracket and the rates probed; with a `capacity` section, the
    # replicas for the target traffic and the cost per million inferences at capacity
    *(Metric(name, better, unit, by="the capacity search") for name, better, unit in (
        (CAPACITY, MAX, "req/s"), ("perf_capacity_low", MAX, "req/s"),
        ("perf_capacity_high", MAX, "req/s"), ("perf_capacity_probes", MIN, ""),
        ("replicas", MIN, ""), ("cost_per_million", MIN, "$/M"))),
    # several independent models measured together: the study's one score, Model Analyzer's
    # `weighting` against the default configuration (tracker.search.objective.weighted_gain)
    Metric(WEIGHTED_GAIN, "maximize", "", relative=True),
)

BY_NAME: dict[str, Metric] = {m.name: m for m in CATALOG}
NAMES: tuple[str, ...] = tuple(BY_NAME)
BETTER: dict[str, Better] = {m.name: m.better for m in CATALOG}
UNITS: dict[str, str] = {m.name: m.unit for m in CATALOG}
#: the scores against the default configuration (:attr:`Metric.relative`)
RELATIVE: frozenset[str] = frozenset(m.name for m in CATALOG if m.relative)
#: (Measurement field, metric name) for the metrics a Measurement holds itself
FIELD_METRICS: tuple[tuple[str, str], ...] = tuple(
    (m.field, m.name) for m in CATALOG if m.field is not None)
#: perf_analyzer CSV column -> Measurement field, for the millisecond figures
MS_COLUMNS: dict[str, str] = {m.column: m.field for m in CATALOG
                              if m.column and m.field and m.unit == "ms"}


#: a composing model's figures, as ``model/<name>/<figure>`` (the field is StepSplit's)
STEP_METRICS: tuple[Metric, ...] = (
    Metric("queue_ms", "minimize", "ms", "queue_ms"),
    Metric("compute_input_ms", "minimize", "ms", "compute_input_ms"),
    Metric("compute_infer_ms", "minimize", "ms", "compute_infer_ms"),
    Metric("compute_output_ms", "minimize", "ms", "compute_output_ms"),
    Metric("requests_per_s", "maximize", "req/s", "requests_per_s"),
    Metric("batch_size", "maximize", "infer/exec", "batch_size"),
)
STEP_PREFIX = "model/"
_STEP = {m.name: m for m in STEP_METRICS}
_STEP_RE = re.compile(r"model/([^/]+)/([^/]+)")
_MODEL_RE = re.compile(r"([^/]+)/(.+)")

#: the figures measured per request priority level, as ``<metric>/priority_<level>``
PRIORITY_METRICS: tuple[str, ...] = (
    "perf_throughput", "perf_latency_avg", "perf_latency_p50", "perf_latency_p90",
    "perf_latency_p95", "perf_latency_p99")
_PRIORITY_RE = re.compile(r"(.+)/priority_([1-9][0-9]*)")


def step_metric(model: str, figure: str) -> str:
    """``model/<model>/<figure>``: a composing model's figure (a :data:`STEP_METRICS` name)."""
    return f"{STEP_PREFIX}{model}/{figure}"


def model_metric(model: str, name: str) -> str:
    """``<model>/<name>``: a metric of one of several models measured together."""
    return f"{model}/{name}"


def priority_metric(name: str, level: int) -> str:
    """``<name>/priority_<level>``: a :data:`PRIORITY_METRICS` figure of one priority level."""
    return f"{name}/priority_{level}"


def priority_level(name: str) -> int | None:
    """The priority level a metric name is about (``perf_latency_p99/priority_1`` -> 1)."""
    found = _PRIORITY_RE.fullmatch(name)
    return int(found.group(2)) if found is not None else None


def _lookup(name: str, prefixed: bool) -> Metric | None:
    metric = BY_NAME.get(name)
    if metric is not None:
        return metric
    level = _PRIORITY_RE.fullmatch(name)
    if level is not None:
        inner = _lookup(level.group(1), prefixed)
        if inner is None or inner.name.rpartition("/")[2] not in PRIORITY_METRICS:
            return None
        return Metric(name, inner.better, inner.unit)
    step = _STEP_RE.fullmatch(name)
    if step is not None and step.group(2) in _STEP:
        figure = _STEP[step.group(2)]
        return Metric(name, figure.better, figure.unit)
    whose = _MODEL_RE.fullmatch(name)
    if prefixed and whose is not None:
        inner = _lookup(whose.group(2), prefixed=False)
        if inner is not None:
            return Metric(name, inner.better, inner.unit, inner.field, inner.column)
    return None


def lookup(name: str) -> Metric | None:
    """The catalog entry of ``name``: a catalog name, ``model/<name>/<figure>``,
    ``<model>/<metric>`` or ``<metric>/priority_<level>`` (direction and unit of the figure or
    metric); None when unknown."""
    return _lookup(name, prefixed=True)


def unit(name: str) -> str:
    """The unit of metric ``name``; outside the catalog: "ms" for a ``perf_*`` name (a timing),
    else ""."""
    metric = lookup(name)
    if metric is not None:
        return metric.unit
    return "ms" if name.rsplit("/", 1)[-1].startswith("perf_") else ""


# ---- load knobs -----------------------------------------------------------------------------

#: search-space keys that set the load, not a config field; each fixes the sweep's levels
LOAD_KNOBS: tuple[str, ...] = ("concurrency",)
#: the smallest value each load knob takes
LOAD_KNOB_MIN: dict[str, int] = {"concurrency": 1}


def load_levels_from(load_values: Mapping[str, object]) -> list[float] | None:
    """The sweep levels a configuration's load knobs fix (``concurrency: 4`` -> ``[4.0]``);
    None: the spec's levels."""
    value = load_values.get("concurrency")
    return None if value is None else [float(value)]  # type: ignore[arg-type]


def fmt(metric: str, value: float) -> str:
    """``value`` as a person reads it, with the metric's unit: ``1,234.5 infer/s``."""
    digits = 1 if abs(value) >= 100 else (2 if abs(value) >= 1 else 3)
    u = unit(metric)
    return f"{value:,.{digits}f}" + (f" {u}" if u else "")
