"""The one feasibility rule: how measured metrics compare with the spec's constraints.

A constraint is a metric with a ``max`` and/or ``min`` bound (spec ``constraints``). Each bound
gives one violation number, Optuna's convention: ``<= 0`` when the bound holds, otherwise how
far it is exceeded relative to the bound (``p99 = 12 ms`` against ``max: 10`` is ``0.2``), so
constraints in different units add up sensibly when a sampler ranks infeasible trials.

**An unmeasured constrained metric counts as violated** (:data:`UNMEASURED_VIOLATION`): a level
or trial is never assumed feasible for a figure nobody measured. The sweep's early stop uses the
same numbers but stops only on what was measured: a latency ``max`` broken by a measured value
(more load only raises latency); an unmeasured metric cannot get better with more load either,
but it says nothing about where to stop.

Used by the sweep (measure/sweep.py, early stop) and by the level choice
(search/objective.py); bounds are spec ``Bound`` models or ``{max: .., min: ..}`` mappings.
A metric name may carry a model (``model/pre/queue_ms``, ``resnet/perf_latency_p99`` for one of
several models measured together, tracker/metrics.py) or a request priority level
(``perf_latency_p99/priority_1``): the rule is the same; a latency maximum stops the sweep
whichever model or level it names.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from tracker.errors import StudyError

#: the violation of a bound whose metric was not measured (always infeasible)
UNMEASURED_VIOLATION = 1.0
#: latencies that only grow with more load: a broken maximum stops the sweep
LATENCY_PREFIXES = ("perf_latency", "perf_time_to_first_token", "perf_inter_token_latency",
                    "perf_sequence_latency")


@dataclass(frozen=True)
class Check:
    """One bound of one constraint, judged."""

    key: str                 # "perf_latency_p99.max"
    metric: str
    side: str                # "max" or "min"
    bound: float
    value: float | None      # None: not measured (or not a finite number)
    violation: float         # <= 0: holds

    @property
    def broken(self) -> bool:
        """Measured and out of bounds (an unmeasured metric is violated, not broken)."""
        return self.value is not None and self.violation > 0

    def words(self) -> str:
        op = ">" if self.side == "max" else "<"
        return f"{self.metric} {self.value:.4g} {op} {self.side} {self.bound:g}"


def bounds(spec_bound: object) -> tuple[float | None, float | None]:
    """(max, min) of a constraint bound: a spec ``Bound`` model or a ``{max: ..}`` mapping."""
    if isinstance(spec_bound, Mapping):
        hi, lo = spec_bound.get("max"), spec_bound.get("min")
    else:
        hi, lo = getattr(spec_bound, "max", None), getattr(spec_bound, "min", None)
    if hi is None and lo is None:
        raise StudyError(f"a constraint needs `max` or `min`, but got {spec_bound!r}")
    return (None if hi is None else float(hi)), (None if lo is None else float(lo))


def _relative(excess: float, bound: float) -> float:
    return excess / abs(bound) if bound != 0 else excess


def judge(metrics: Mapping[str, float],
          constraints: Mapping[str, object] | None) -> Iterator[Check]:
    """Every bound of ``constraints`` against ``metrics``, in spec order (max before min)."""
    for metric, bound in (constraints or {}).items():
        hi, lo = bounds(bound)
        raw = metrics.get(metric)
        value = float(raw) if raw is not None and math.isfinite(raw) else None
        if hi is not None:
            yield Check(f"{metric}.max", metric, "max", hi, value,
                        UNMEASURED_VIOLATION if value is None else _relative(value - hi, hi))
        if lo is not None:
            yield Check(f"{metric}.min", metric, "min", lo, value,
                        UNMEASURED_VIOLATION if value is None else _relative(lo - value, lo))


def constraint_keys(constraints: Mapping[str, object]) -> list[str]:
    """Stable names of the constraints, e.g. ``perf_latency_p99.max``, in spec order."""
    return [c.key for c in judge({}, constraints)]


def named_violations(metrics: Mapping[str, float],
                     constraints: Mapping[str, object]) -> dict[str, float]:
    """``{constraint key: violation}``; a violation ``<= 0`` means the constraint holds."""
    return {c.key: c.violation for c in judge(metrics, constraints)}


def broken(metrics: Mapping[str, float], constraints: Mapping[str, object] | None) -> list[str]:
    """The bounds that measured values break, in words (``perf_latency_p99 12 > max 10``)."""
    return [c.words() for c in judge(metrics, constraints) if c.broken]


def stops_sweep(metrics: Mapping[str, float],
                constraints: Mapping[str, object] | None) -> list[str]:
    """The broken bounds after which more load cannot help: latency maxima (in words),
    a streaming model's time to first token and inter-token latency included."""
    return [c.words() for c in judge(metrics, constraints)
            if c.broken and c.side == "max"
            and any(part.startswith(LATENCY_PREFIXES) for part in c.metric.split("/"))]


def for_models(constraints: Mapping[str, object] | None, models: Sequence[str],
               name: Callable[[str, str], str] | None = None) -> dict[str, object]:
    """Constraints of the models measured together: a name with a model
    (``a/perf_latency_p99``) bounds that model; a bare name (``perf_latency_p99``) bounds
    every model, unless that model has its own. Each is named ``name(model, metric)``
    (default ``<model>/<metric>``: ``a/perf_latency_p99``, ``b/perf_latency_p99``)."""
    named = name or (lambda model, metric: f"{model}/{metric}")
    out: dict[str, object] = {}
    given = dict(constraints or {})
    for metric, bound in given.items():
        if not ("/" in metric and metric.split("/", 1)[0] in models):
            for model in models:
                out.setdefault(named(model, metric), bound)
    for metric, bound in given.items():  # a model's own bound wins over the shared one
        if "/" in metric and metric.split("/", 1)[0] in models:
            model, rest = metric.split("/", 1)
            out[named(model, rest)] = bound
    return out


def is_feasible(violations: Mapping[str, float] | Sequence[float]) -> bool:
    values = violations.values() if isinstance(violations, Mapping) else violations
    return all(v <= 0 for v in values)


def total_violation(violations: Mapping[str, float] | Sequence[float]) -> float:
    values = violations.values() if isinstance(violations, Mapping) else violations
    return sum(max(v, 0.0) for v in values)
