"""What a trial is worth: objective values, and the level of its sweep it is judged by.

A trial measures one model configuration at several concurrency levels (a sweep). Its result
is the level that meets every constraint and is best on the first objective
(:func:`pick_best_level`); when no level meets the constraints, the level that violates them
least, and the trial is infeasible. Whether a level meets the constraints, and how an
unmeasured constrained metric counts, is tracker/feasibility.py's rule (the sweep's early stop
uses the same module).

Several independent models measured together (tracker/measure/sweep.py) are judged by one
number, Model Analyzer's ``weighting``: :func:`weighted_gain` (what it computes, and why
relative to the default configuration, is in its docstring), over the joint level chosen by
:func:`pick_best_joint_level`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tracker.errors import MeasurementError, StudyError
from tracker.feasibility import for_models, is_feasible, named_violations, total_violation
from tracker.measure.types import Measurement, SweepLevel
from tracker.metrics import lookup, model_metric

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


@dataclass(frozen=True)
class LevelChoice:
    """The concurrency level a trial is judged by."""

    index: int                      # position in the sweep
    concurrency: int
    metrics: dict[str, float]
    values: list[float]             # objective values, spec order
    violations: dict[str, float] = field(default_factory=dict)
    stable: bool = True             # the level's windows agreed (perf_analyzer's rule)

    @property
    def feasible(self) -> bool:
        return is_feasible(self.violations)


def pick_best_level(measurements: Sequence[Measurement], constraints: Mapping[str, object],
                    objectives: Mapping[str, str]) -> LevelChoice:
    """The level that meets every constraint and is best on the first objective.

    Ties go to the lower concurrency (the same result with less load). Whether the chosen
    level's windows agreed is in ``stable`` (reported, not used to choose). When no level is
    feasible, the level with the smallest total violation (ties: best first objective).
    Invalid levels (``valid`` False) and levels whose objective metrics are missing are
    skipped; MeasurementError when none is left.
    """
    if not objectives:
        raise StudyError("at least one objective is needed, but got none")
    first, direction = next(iter(objectives.items()))
    choices: list[LevelChoice] = []
    for i, level in enumerate(measurements):
        if not level.valid:
            continue  # errors above the threshold, server gone: not a result
        metrics = level.metrics()
        try:
            values = objective_values(metrics, objectives)
        except MeasurementError:
            continue
        choices.append(LevelChoice(i, int(level.concurrency or 0), metrics, values,
                                   named_violations(metrics, constraints),
                                   stable=level.stable))
    if not choices:
        raise MeasurementError(
            f"no concurrency level measured the objective `{first}` "
            f"({len(measurements)} level(s) measured)" + _why_invalid(measurements))
    sign = -1.0 if direction == MAXIMIZE else 1.0
    feasible = [c for c in choices if c.feasible]
    # Stability does not choose the level: preferring a stable low level over an unstable high
    # one judged a config by 1,160 infer/s at concurrency 1 when it gave 6,650 at 16. The
    # choice carries ``stable`` instead, and the trial reports it.
    if feasible:
        return min(feasible, key=lambda c: (sign * c.values[0], c.concurrency))
    return min(choices, key=lambda c: (total_violation(c.violations), sign * c.values[0],
                                       c.concurrency))


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
                  objectives: Mapping[str, float] | None = None) -> float:
    """One score for several models measured together: Model Analyzer's ``weighting``.

    ``metrics`` and ``reference`` are joint metrics (``<model>/<metric>``, as
    ``SweepLevel.metrics()`` names them): this configuration's and the reference's,
    normally the default configuration's. ``weights`` maps each model to its weight and
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
            key = model_metric(model, metric)
            value, ref = metrics.get(key), reference.get(key)
            if value is None or ref is None or not (math.isfinite(value)
                                                    and math.isfinite(ref)):
                raise MeasurementError(
                    f"the weighted objective needs `{key}` measured in both the configuration "
                    f"and the reference, but got {value!r} and {ref!r}")
            score += wm * wk * relative_gain(value, ref, found.better)
    return score


@dataclass(frozen=True)
class JointChoice:
    """The joint level a configuration of several models is judged by."""

    index: int                      # position in the joint sweep
    metrics: dict[str, float]       # joint metrics, ``<model>/<metric>``
    score: float                    # weighted_gain against the reference
    violations: dict[str, float] = field(default_factory=dict)
    stable: bool = True             # every model's windows agreed

    @property
    def feasible(self) -> bool:
        return is_feasible(self.violations)


def pick_best_joint_level(levels: Sequence[SweepLevel],
                          constraints: Mapping[str, object] | None,
                          weights: Mapping[str, float] | None = None,
                          objectives: Mapping[str, float] | None = None,
                          reference: Mapping[str, float] | None = None) -> JointChoice:
    """The joint level that meets every constraint (``<model>/<metric>``; a bare name bounds
    every model, tracker.feasibility.for_models) and has the best :func:`weighted_gain`
    against ``reference`` (the default configuration's chosen level's joint metrics);
    ``weights`` default to 1 for every model measured (Model Analyzer's default). With no
    reference (measuring the default itself) the first usable level is the reference. No
    feasible level: the least violating one, as :func:`pick_best_level`. Levels where a model
    is invalid or an objective metric is missing are skipped; MeasurementError when none is
    left."""
    names = list(levels[0].measurements) if levels else []
    weights = weights if weights is not None else dict.fromkeys(names, 1.0)
    usable: list[tuple[int, dict[str, float]]] = []
    for i, joint in enumerate(levels):
        if not joint.valid:
            continue
        metrics = joint.metrics()
        try:
            weighted_gain(metrics, metrics, weights, objectives)
        except MeasurementError:
            continue
        usable.append((i, metrics))
    if not usable:
        raise MeasurementError(f"no joint level measured every model's objective "
                               f"({len(levels)} level(s) measured)"
                               + "".join(f"; {j.level}: " + "; ".join(
                                   f"{n}: {m.invalid_reason}" for n, m in
                                   j.measurements.items() if m.invalid_reason)
                                   for j in levels if not j.valid))
    ref = reference if reference is not None else usable[0][1]
    bounds = for_models(constraints, names)
    choices = [JointChoice(i, metrics, weighted_gain(metrics, ref, weights, objectives),
                           named_violations(metrics, bounds),
                           all(m.stable for m in levels[i].measurements.values()))
               for i, metrics in usable]
    feasible = [c for c in choices if c.feasible]
    if feasible:
        return max(feasible, key=lambda c: (c.score, -c.index))
    return min(choices, key=lambda c: (total_violation(c.violations), -c.score, c.index))
