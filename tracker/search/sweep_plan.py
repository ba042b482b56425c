"""Which concurrency level a trial measures next: where the best trial was judged, else Model
Analyzer's first guess; then a walk.

The plain sweep measures the spec's levels from the lowest up until a stop rule fires
(tracker.measure.sweep.stop_reason). A configuration whose best level is high then pays for
every level below it. :class:`LevelPlan` starts instead at one level (:func:`start_index`)
and walks from there. The start is the level the best feasible trial so far was judged by
(:func:`incumbent_level`): the configurations of one model mostly reach their best near the
same load, where a latency constraint starts to bind. Before any trial is feasible it is
Model Analyzer's concurrency formula, ``2 x max_batch_size x instance count`` (the level its
quick search measures a configuration at; :func:`first_guess`), rounded to a sweep level.
The walk goes

- up, one level at a time, while the sweep's stop rules let it (a broken latency constraint,
  an invalid level, saturated throughput stop the climb);
- down, when the first level itself broke the latency constraint or was invalid, until a
  level meets the constraints (the highest feasible level is then found) or the lowest level
  is measured.

Not here, because the replay showed it hurts: Optuna pruning across trials (each level an
intermediate value, the climb stopped where a trial is below the best trial at the same
level). On a noisy landscape it judges a configuration by one low reading and never measures
it again; benchmarks/replay.py keeps it as an ablation.

The replay (benchmarks/search_efficiency.py) measured each part on recorded landscapes of
Model Analyzer's default space; docs/validation.md has the figures (starting at the best trial's
level instead of the formula took the median cost to 98% of the best from 35.5 to 23
measurements on the default landscape, and from 73 to 44 on the third recording).
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from typing import Any

import optuna

from tracker.feasibility import broken, for_models
from tracker.measure.sweep import stop_reason
from tracker.measure.types import SweepLevel
from tracker.search.optuna_study import best_trials
from tracker.trial_record import TrialRecord


def first_guess(params: Mapping[str, Any], defaults: Mapping[str, Any]) -> int:
    """Model Analyzer's concurrency formula, 2 x max_batch_size x instance count, from the
    trial's params (a knob the space leaves out takes the default config's value; an
    unbatched model counts as batch 1)."""
    def number(key: str) -> int:
        value = params.get(key, defaults.get(key, 1))
        try:
            return max(int(value or 1), 1)
        except (TypeError, ValueError):
            return 1  # not a number (cannot happen for these fields): no guess from it

    return 2 * number("max_batch_size") * number("instance_group.count")


def defaults_of(cfg: Any) -> dict[str, int]:
    """The default config's max_batch_size and instance count (1 when it sets none), which
    :func:`first_guess` uses for a knob the space leaves out."""
    groups = list(getattr(cfg, "instance_group", []))
    count = sum(int(g.count or 1) for g in groups) if groups else 1
    return {"max_batch_size": int(cfg.max_batch_size), "instance_group.count": count}


def nearest_index(levels: Sequence[int], target: int) -> int:
    """The index of the highest level <= ``target`` (the lowest level when all are above)."""
    return max(bisect.bisect_right(list(levels), target) - 1, 0)


def incumbent_level(study: optuna.Study) -> int | None:
    """The concurrency the study's best feasible trial so far was judged by
    (:func:`tracker.search.optuna_study.best_trials`, the one objective the guided sweep serves);
    None before any trial is feasible."""
    best = best_trials(study)
    return TrialRecord.of(best[0]).concurrency if best else None


def start_index(levels: Sequence[int], params: Mapping[str, Any], defaults: Mapping[str, Any],
                incumbent: int | None, remembered: int | None = None) -> int:
    """The index of the level a trial's sweep starts at: for a configuration remembered from
    an earlier study (search.warm_start), the level that study judged it by; else the best
    trial's level when there is one (:func:`incumbent_level`), else Model Analyzer's first
    guess (rounded down)."""
    if remembered is not None:
        return nearest_index(levels, remembered)
    return nearest_index(levels, incumbent if incumbent is not None
                         else first_guess(params, defaults))


class LevelPlan:
    """The levels of one trial's sweep, chosen one at a time (see the module docstring).

    ``levels`` ascending; ``start`` the first level's index. Call :meth:`next` with the
    sweep's levels so far; it answers the index of the next one to measure, or None to end
    the sweep (:attr:`reason` says why)."""

    def __init__(self, levels: Sequence[int], start: int,
                 constraints: Mapping[str, Any] | None) -> None:
        if not levels:
            raise ValueError("a level plan needs at least one level")
        self.levels = list(levels)
        self.start = min(max(start, 0), len(self.levels) - 1)
        self.constraints = constraints
        self.reason = "all levels measured"
        self._down = False
        self._stopped = False

    def stop(self, reason: str) -> None:
        """End the sweep after the current level (e.g. an early stop across trials)."""
        self._stopped = True
        self.reason = reason

    def _ok(self, level: SweepLevel) -> bool:
        names = list(level.measurements)
        return level.valid and not broken(level.metrics(),
                                          for_models(self.constraints, names))

    def next(self, done: Sequence[SweepLevel]) -> int | None:
        if self._stopped:
            return None
        if not done:
            return self.start
        last = done[-1]
        index = last.index
        if self._down:
            if self._ok(last):
                self.reason = f"highest level meeting the constraints: {last.level}"
                return None
            if index == 0:
                self.reason = "no level meets the constraints"
                return None
            return index - 1
        climb = [level for level in done if level.index >= self.start]
        why = stop_reason(climb, self.constraints)
        if why is not None:
            if not any(self._ok(level) for level in done) and self.start > 0:
                self._down = True  # the first guess was too much load: walk down
                return self.start - 1
            self.reason = why
            return None
        if index + 1 >= len(self.levels):
            self.reason = "all levels up to the highest measured"
            return None
        return index + 1


def applies(spec: Any) -> bool:
    """Whether a study's trials use the guided sweep: ``search.sweep: guided`` (the
    default), a concurrency sweep (not request rates), one objective, throughput maximized
    (the climb's stop rules are about throughput), and ``concurrency`` not a knob of the
    space."""
    return (getattr(spec.search, "sweep", "guided") == "guided"
            and not getattr(spec.load, "request_rate", None)
            and list(spec.objectives.items()) == [("perf_throughput", "maximize")]
            and "concurrency" not in (spec.search.space or {}))


def for_trial(spec: Any, params: Mapping[str, Any], defaults: Mapping[str, Any],
              study: optuna.Study | None = None, remembered: int | None = None,
              ) -> LevelPlan | None:
    """The trial's guided sweep over the spec's concurrency levels, starting at the level of
    the study's best feasible trial so far or at Model Analyzer's first guess (``remembered``:
    the level an earlier study judged this configuration by); None when it does not apply
    (the plain sweep runs)."""
    if not applies(spec):
        return None
    levels = spec.load.concurrency_levels()
    start = start_index(levels, params, defaults,
                        incumbent_level(study) if study is not None else None, remembered)
    return LevelPlan(levels, start, spec.constraints)
