"""One entry model's measurements as the sweep's levels, judged as a study of one model judges
them (bare metric names): the one-entry call of tracker.search.objective.pick_best_level."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tracker.measure.types import Measurement, SweepLevel
from tracker.search.objective import LevelChoice, Scoring, pick_best_level


def levels_of(measurements: Sequence[Measurement], entry: str = "m") -> list[SweepLevel]:
    return [SweepLevel({entry: m}, i) for i, m in enumerate(measurements)]


def pick(measurements: Sequence[Measurement], constraints: Mapping[str, object],
         objectives: Mapping[str, str]) -> LevelChoice:
    """The level one model's study judges ``measurements`` by."""
    return pick_best_level(levels_of(measurements), constraints, objectives,
                           Scoring(["m"], lambda entry, metric: metric))
