"""What a trial is worth: objective values, and the level of its sweep it is judged by.

A trial measures one configuration (one entry model or several, each at its own load) at
several load levels (a sweep). Its result is the level that meets every constraint and is
best on the first objective (:func:`pick_best_level`, one rule and one result type,
:class:`LevelChoice`, for any number of entries); when no level meets the constraints, the
level that violates them least, and the trial is infeasible. Whether a level meets the
constraints, and how an unmeasured constrained metric counts, is tracker/feasibility.py's
rule (the sweep's early stop uses the same module).

An objective the measurements do not hold is derived (:data:`DERIVED`): ``weighted_gain``,
Model Analyzer's ``weighting`` of each entry's throughput against the default configuration's
(:func:`weighted_gain`: what it computes, and why relative to the default, is in its
docstring). For one entry it is that entry's relative throughput gain.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from tracker.errors import MeasurementError, StudyError
from tracker.feasibility import is_feasible, named_violations, total_violation
from tracker.measure.types import Measurement, SweepLevel
from tracker.metrics import WEIGHTED_GAIN, lookup, model_metric

MAXIMIZE = "maximize"


def objective_values(metrics: Mapping[str, float], objectives: Mapping[str, str]) -> list[float]:
    """The value of each objective metric, in the spec's order.

    Raises MeasurementError when an objective metric is missing or not a finite number.
    """
    values = []
    for name in objectives:
        value = metrics.get(name)
        if value is None or not math.isfinite(value):
            raise MeasurementError(
                f"objective metric `{name}` must be measured, but got {value!r} "
                f"(measured: {sorted(metrics)})")
        values.append(float(value))
    return values


def better(a: float, b: float, direction: str) -> bool:
    """Whether ``a`` is strictly better than ``b`` for an objective with ``direction``."""
    return a > b if direction == MAXIMIZE else a < b


def _why_invalid(measurements: Sequence[Measurement]) -> str:
    """What made the levels unusable, e.g. ``; concurrency 1, concurrency 4: 40 of 40 requests
    failed (...); first error: ...`` (each distinct reason once, on the message's first line,
    so the progress line and the trial's note show the cause)."""
    reasons: dict[str, list[str]] = {}
    for level in measurements:
        reason = level.invalid_reason or (None if level.valid else "invalid")
        if reason:
            reasons.setdefault(reason, []).append(level.level)
    return "".join(f"; {', '.join(names)}: {reason}" for reason, names in reasons.items())


Naming = Callable[[str, str], str]


@dataclass(frozen=True)
class LevelChoice:
    """The level of a sweep a configuration is judged by (any number of entries): its
    metrics as the study names them (``name(entry, metric)``; each entry's ``concurrency``
    or ``request_rate`` included), its objective values, its constraint violations."""

    index: int                      # position in the sweep's levels, as measured
    concurrency: int                # the entries' concurrencies summed (one entry: its own)
    metrics: dict[str, float]
    values: list[float]             # objective values, spec order
    violations: dict[str, float] = field(default_factory=dict)
    stable: bool = True             # every entry's windows agreed (perf_analyzer's rule)

    @property
    def feasible(self) -> bool:
        return is_feasible(self.violations)


def level_metrics(level: SweepLevel, name: Naming = model_metric) -> dict[str, float]:
    """Every entry's metrics of ``level``, each named ``name(entry, metric)``, with its load
    level (``concurrency`` or ``request_rate``)."""
    out: dict[str, float] = {}
    for entry, m in level.measurements.items():
        out.update({name(entry, key): value for key, value in m.metrics().items()})
        if m.concurrency is not None:
            out[name(entry, "concurrency")] = float(m.concurrency)
        if m.request_rate is not None:
            out[name(entry, "request_rate")] = float(m.request_rate)
    return out


@dataclass(frozen=True)
class Scoring:
    """What a derived objective needs: the entries, how their metrics are named, each
    entry's weight, and the reference (the default configuration's chosen metrics; None while
    measuring the default itself: then its first usable level, and its score is 0)."""

    entries: Sequence[str]
    name: Naming = model_metric
    weights: Mapping[str, float] | None = None
    reference: Mapping[str, float] | None = None


def _weighted(metrics: Mapping[str, float], ref: Mapping[str, float], how: Scoring) -> float:
    weights = how.weights if how.weights is not None else dict.fromkeys(how.entries, 1.0)
    return weighted_gain(metrics, ref, weights, name=how.name)


#: objectives computed from a level's metrics rather than measured, by name
DERIVED: dict[str, Callable[[Mapping[str, float], Mapping[str, float], Scoring], float]] = {
    WEIGHTED_GAIN: _weighted}


def _check_reference(objectives: Mapping[str, str], how: Scoring) -> None:
    """MeasurementError when a derived objective's reference lacks an entry's throughput."""
    if how.reference is None or not any(o in DERIVED for o in objectives):
        return
    missing = [how.name(n, "perf_throughput") for n in how.entries
               if how.name(n, "perf_throughput") not in how.reference]
    if missing:
        raise MeasurementError(
            "weighted_gain compares each model with the default configuration, but the "
            f"default configuration's trial has no {', '.join(missing)}: measure it first "
            "(it is trial 0 of a new study)")


def _usable(levels: Sequence[SweepLevel], objectives: Mapping[str, str], how: Scoring,
            ) -> list[tuple[int, dict[str, float], list[float]]]:
    """(position, metrics with the derived objectives, objective values) of each level that
    is valid and measured every objective."""
    out: list[tuple[int, dict[str, float], list[float]]] = []
    ref = how.reference
    for i, level in enumerate(levels):
        if not level.valid:
            continue  # errors above the threshold, server gone: not a result
        metrics = level_metrics(level, how.name)
        try:
            for objective in objectives:
                if objective in DERIVED:
                    ref = ref if ref is not None else metrics
                    metrics[objective] = DERIVED[objective](metrics, ref, how)
            out.append((i, metrics, objective_values(metrics, objectives)))
        except MeasurementError:
            continue
    return out


def pick_best_level(levels: Sequence[SweepLevel], constraints: Mapping[str, object] | None,
                    objectives: Mapping[str, str], how: Scoring | None = None) -> LevelChoice:
    """The level that meets every constraint (named as ``how.name`` names the metrics) and
    is best on the first objective.

    Ties go to the lower load (the same result with less load). Whether the chosen level's
    windows agreed is in ``stable`` (reported, not used to choose). When no level is
    feasible, the level with the smallest total violation (ties: best first objective).
    Invalid levels and levels whose objective metrics are missing are skipped;
    MeasurementError when none is left. A derived objective (:data:`DERIVED`) is computed
    against ``how.reference``; measuring the default itself (no reference), against its first
    usable level, and the chosen level scores 0.
    """
    if not objectives:
        raise StudyError("at least one objective is needed, but got none")
    how = how or Scoring(list(levels[0].measurements) if levels else [])
    _check_reference(objectives, how)
    first, direction = next(iter(objectives.items()))
    usable = _usable(levels, objectives, how)
    if not usable:
        measured = [m for level in levels for m in level.measurements.values()]
        raise MeasurementError(
            f"no load level measured the objective `{first}` ({len(levels)} level(s) measured)"
            + _why_invalid(measured))
    choices = [LevelChoice(i, sum(int(m.concurrency or 0) for m in
                                                levels[i].measurements.values()),
                           metrics, values, named_violations(metrics, constraints or {}),
                           stable=levels[i].stable)
               for i, metrics, values in usable]
    sign = -1.0 if direction == MAXIMIZE else 1.0
    feasible = [c for c in choices if c.feasible]
    # Stability does not choose the level: preferring a stable low level over an unstable high
    # one judged a config by 1,160 infer/s at concurrency 1 when it gave 6,650 at 16. The
    # choice carries ``stable`` instead, and the trial reports it.
    if feasible:
        got = min(feasible, key=lambda c: (sign * c.values[0], c.concurrency))
    else:
        got = min(choices, key=lambda c: (total_violation(c.violations), sign * c.values[0],
                                          c.concurrency))
    if how.reference is None and any(o in DERIVED for o in objectives):
        zero = {o: 0.0 for o in objectives if o in DERIVED}  # the reference against itself
        got = replace(got, metrics={**got.metrics, **zero},
                      values=[zero.get(o, v) for o, v in zip(objectives, got.values,
                                                             strict=True)])
    return got


def relative_gain(value: float, reference: float, better: str) -> float:
    """How much better ``value`` is than ``reference``, relative to their mean (Model
    Analyzer's per-metric score): ``(value - reference) / mean(value, reference)``, negated for
    a metric where lower is better; 0 when both are 0. Symmetric and bounded by +-2."""
    mean = (value + reference) / 2.0
    if mean == 0:
        return 0.0
    gain = (value - reference) / mean
    return gain if better == MAXIMIZE else -gain


def _normalized(weights: Mapping[str, float], what: str) -> dict[str, float]:
    if not weights:
        raise StudyError(f"{what} needs at least one entry, but got none")
    bad = {k: w for k, w in weights.items() if not (math.isfinite(w) and w >= 0)}
    if bad or sum(weights.values()) <= 0:
        raise StudyError(f"{what} must be finite, >= 0 and not all 0, but got {dict(weights)}")
    total = sum(weights.values())
    return {k: w / total for k, w in weights.items()}


def weighted_gain(metrics: Mapping[str, float], reference: Mapping[str, float],
                  weights: Mapping[str, float],
                  objectives: Mapping[str, float] | None = None,
                  name: Naming = model_metric) -> float:
    """One score for several models measured together: Model Analyzer's ``weighting``.

    ``metrics`` and ``reference`` are every entry's metrics (``name(model, metric)``,
    default ``<model>/<metric>`` as ``SweepLevel.metrics()`` names them): this
    configuration's and the reference's, normally the default configuration's. ``weights``
    maps each model to its weight and
    ``objectives`` each metric to its weight (default ``{"perf_throughput": 1}``); both are
    normalized to sum 1, as Model Analyzer does. The score is

        sum over models m of  w_m * sum over metrics k of  v_k * relative_gain(m/k)

    with :func:`relative_gain` ((x - ref) / mean(x, ref), sign by the catalog's direction of
    k). Model Analyzer compares two configurations pairwise with this score; its Optuna search
    scores each trial against the default configuration's measurement, and so does this: the
    default scores 0, a configuration 0.2 is on (weighted) average ~20% better than it, and
    the study maximizes the score. Unlike a weighted sum of raw values, a model serving 5,000
    infer/s does not drown one serving 50. MeasurementError when a needed metric is missing.
    """
    model_w = _normalized(weights, "weighting")
    metric_w = _normalized(objectives or {"perf_throughput": 1.0}, "objective weights")
    score = 0.0
    for model, wm in model_w.items():
        for metric, wk in metric_w.items():
            found = lookup(metric)
            if found is None:
                raise StudyError(f"unknown metric `{metric}` in the objective weights")
            key = name(model, metric)
            value, ref = metrics.get(key), reference.get(key)
            if value is None or ref is None or not (math.isfinite(value)
                                                    and math.isfinite(ref)):
                raise MeasurementError(
                    f"the weighted objective needs `{key}` measured in both the configuration "
                    f"and the reference, but got {value!r} and {ref!r}")
            score += wm * wk * relative_gain(value, ref, found.better)
    return score


