"""What a trial is worth: objective values, and the level of its sweep it is judged by.

A trial measures one model configuration at several concurrency levels (a sweep). Its result
is the level that meets every constraint and is best on the first objective
(:func:`pick_best_level`); when no level meets the constraints, the level that violates them
least, and the trial is infeasible. Whether a level meets the constraints, and how an
unmeasured constrained metric counts, is tracker/feasibility.py's rule (the sweep's early stop
uses the same module).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tracker.errors import MeasurementError, StudyError
from tracker.feasibility import is_feasible, named_violations, total_violation
from tracker.measure.types import Measurement

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
