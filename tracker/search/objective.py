"""What a trial is worth: objective values and constraint violations from measured metrics.

A trial measures one model configuration at several concurrency levels (a sweep). Its result
is the level that meets every constraint and is best on the first objective
(:func:`pick_best_level`); when no level meets the constraints, the level that violates them
least, and the trial is infeasible.

Constraint violations follow Optuna's convention: one number per constraint, ``<= 0`` when it
holds. They are relative to the bound (``p99 = 12 ms`` against ``max: 10`` is ``0.2``), so that
constraints in different units add up sensibly when the sampler ranks infeasible trials.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from tracker.errors import MeasurementError, StudyError

MAXIMIZE = "maximize"
MINIMIZE = "minimize"
# violation used when a constrained metric was not measured at all (always infeasible)
UNMEASURED_VIOLATION = 1.0


class _Level(Protocol):
    """What this module needs from a measurement (tracker.measure.types.Measurement)."""

    @property
    def concurrency(self) -> int | None: ...

    def metrics(self) -> dict[str, float]: ...


def _bound(spec_bound: object) -> tuple[float | None, float | None]:
    """(max, min) of a constraint bound: a spec ``Bound`` model or a ``{max: ..}`` mapping."""
    if isinstance(spec_bound, Mapping):
        hi, lo = spec_bound.get("max"), spec_bound.get("min")
    else:
        hi, lo = getattr(spec_bound, "max", None), getattr(spec_bound, "min", None)
    if hi is None and lo is None:
        raise StudyError(f"a constraint needs `max` or `min`, but got {spec_bound!r}")
    return (None if hi is None else float(hi)), (None if lo is None else float(lo))


def constraint_keys(constraints: Mapping[str, object]) -> list[str]:
    """Stable names of the constraints, e.g. ``perf_latency_p99.max``, in spec order."""
    keys = []
    for metric, bound in constraints.items():
        hi, lo = _bound(bound)
        if hi is not None:
            keys.append(f"{metric}.max")
        if lo is not None:
            keys.append(f"{metric}.min")
    return keys


def _relative(excess: float, bound: float) -> float:
    return excess / abs(bound) if bound != 0 else excess


def named_violations(metrics: Mapping[str, float],
                     constraints: Mapping[str, object]) -> dict[str, float]:
    """``{constraint key: violation}``; a violation ``<= 0`` means the constraint holds.

    A constrained metric that was not measured counts as violated
    (:data:`UNMEASURED_VIOLATION`): feasibility is never assumed.
    """
    out: dict[str, float] = {}
    for metric, bound in constraints.items():
        hi, lo = _bound(bound)
        value = metrics.get(metric)
        usable = value is not None and math.isfinite(value)
        if hi is not None:
            out[f"{metric}.max"] = (_relative(float(value) - hi, hi) if usable and value is not None
                                    else UNMEASURED_VIOLATION)
        if lo is not None:
            out[f"{metric}.min"] = (_relative(lo - float(value), lo) if usable and value is not None
                                    else UNMEASURED_VIOLATION)
    return out


def constraint_violations(metrics: Mapping[str, float],
                          constraints: Mapping[str, object]) -> list[float]:
    """The violations of :func:`named_violations` as a list, in :func:`constraint_keys` order."""
    return list(named_violations(metrics, constraints).values())


def is_feasible(violations: Mapping[str, float] | Sequence[float]) -> bool:
    values = violations.values() if isinstance(violations, Mapping) else violations
    return all(v <= 0 for v in values)


def total_violation(violations: Mapping[str, float] | Sequence[float]) -> float:
    values = violations.values() if isinstance(violations, Mapping) else violations
    return sum(max(v, 0.0) for v in values)


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


def _why_invalid(measurements: Sequence[_Level]) -> str:
    """What made the levels unusable, e.g. ``: concurrency 1: 100.0% of requests failed ...;
    first error: ...`` (one line per distinct reason, so the user sees the cause)."""
    reasons: dict[str, list[str]] = {}
    for level in measurements:
        reason = getattr(level, "invalid_reason", None) or (
            None if getattr(level, "valid", True) is not False else "invalid")
        if reason:
            reasons.setdefault(str(reason), []).append(str(getattr(level, "level", "?")))
    return "".join(f"\n  {', '.join(names)}: {reason}" for reason, names in reasons.items())


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


def pick_best_level(measurements: Sequence[_Level], constraints: Mapping[str, object],
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
        if getattr(level, "valid", True) is False:
            continue  # errors above the threshold, server gone: not a result
        metrics = level.metrics()
        try:
            values = objective_values(metrics, objectives)
        except MeasurementError:
            continue
        choices.append(LevelChoice(i, int(level.concurrency or 0), metrics, values,
                                   named_violations(metrics, constraints),
                                   stable=getattr(level, "stable", True) is not False))
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
