"""The guided sweep: where it starts (the best trial's level, else Model Analyzer's first
guess) and the walk from there."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from tests.support.levels import pick
from tracker.measure.sweep import run_levels
from tracker.measure.types import Measurement, SweepLevel
from tracker.search.sweep_plan import (
    LevelPlan,
    applies,
    defaults_of,
    first_guess,
    for_trial,
    nearest_index,
)
from tracker.spec import parse_spec
from tracker.triton.model_config import ModelConfig

LEVELS = [1, 2, 4, 8, 16, 32, 64]
LIMIT = {"perf_latency_p99": {"max": 10.0}}


def curve(throughput: Callable[[int], float], p99: Callable[[int], float]
          ) -> Callable[[int], Measurement]:
    return lambda c: Measurement(concurrency=c, throughput=throughput(c),
                                 latency_p99_ms=p99(c), stable=True)


def walk(plan: LevelPlan, measure: Callable[[int], Measurement]) -> list[int]:
    done: list[SweepLevel] = []
    while (i := plan.next(done)) is not None:
        done.append(SweepLevel({"m": measure(LEVELS[i])}, i))
    return [LEVELS[level.index] for level in done]


def test_first_guess_is_model_analyzers_formula() -> None:
    assert first_guess({"max_batch_size": 8, "instance_group.count": 3}, {}) == 48
    # a knob the space leaves out takes the default config's value
    assert first_guess({"instance_group.count": 2}, {"max_batch_size": 4}) == 16
    assert first_guess({}, {"max_batch_size": 0}) == 2  # unbatched: batch 1
    assert nearest_index(LEVELS, 48) == 5 and nearest_index(LEVELS, 1000) == 6
    assert nearest_index(LEVELS, 0) == 0


def test_defaults_of_a_config() -> None:
    cfg = ModelConfig(max_batch_size=8)
    assert defaults_of(cfg) == {"max_batch_size": 8, "instance_group.count": 1}
    cfg.instance_group.add(count=3)
    assert defaults_of(cfg)["instance_group.count"] == 3


def test_climbs_from_the_guess_until_the_latency_limit() -> None:
    measure = curve(lambda c: 100.0 * c, lambda c: float(c) / 2)  # p99 > 10 from c=32
    plan = LevelPlan(LEVELS, nearest_index(LEVELS, 8), LIMIT)
    assert walk(plan, measure) == [8, 16, 32]
    assert "latency constraint broken" in plan.reason


def test_walks_down_when_the_guess_breaks_the_limit() -> None:
    measure = curve(lambda c: 100.0 * c, lambda c: float(c))  # p99 > 10 from c=16
    plan = LevelPlan(LEVELS, nearest_index(LEVELS, 64), LIMIT)
    assert walk(plan, measure) == [64, 32, 16, 8]
    assert "highest level meeting the constraints: m: concurrency 8" in plan.reason
    nothing = LevelPlan(LEVELS, 2, {"perf_latency_p99": {"max": 0.1}})
    assert walk(nothing, measure) == [4, 2, 1]
    assert nothing.reason == "no level meets the constraints"


def test_from_the_lowest_level_it_is_the_plain_sweep() -> None:
    flat = curve(lambda c: 1000.0, lambda c: 1.0)
    plan = LevelPlan(LEVELS, 0, LIMIT)
    assert walk(plan, flat) == [1, 2, 4, 8]  # saturated: 3 levels without 5% gain
    assert "saturated" in plan.reason


def test_the_sweep_follows_a_plan() -> None:
    measure = curve(lambda c: 100.0 * c, lambda c: float(c))
    seen: list[int] = []

    async def level(i: int) -> SweepLevel:
        return SweepLevel({"m": measure(LEVELS[i])}, i)

    plan = LevelPlan(LEVELS, 6, LIMIT)
    result = asyncio.run(run_levels(len(LEVELS), level, LIMIT,
                                    lambda lv: seen.append(LEVELS[lv.index]), plan))
    assert seen == [64, 32, 16, 8]
    # the level it is judged by: the one rule (search/objective.pick_best_level)
    choice = pick(result.measurements, LIMIT, {"perf_throughput": "maximize"})
    assert choice.feasible and choice.concurrency == 8
    assert result.stop_reason == plan.reason

    class Wrong:
        reason = ""

        def next(self, done: object) -> int:
            return 30

    with pytest.raises(Exception, match="not one of the sweep's levels"):
        asyncio.run(run_levels(len(LEVELS), level, LIMIT, None, Wrong()))


def test_which_studies_use_the_guided_sweep() -> None:
    base = {"model": {"name": "m", "path": "m.onnx"}, "load": {"concurrency": [1, 4]}}
    assert applies(parse_spec(base))
    assert not applies(parse_spec({**base, "search": {"sweep": "full"}}))
    assert not applies(parse_spec({**base, "objectives": {"perf_throughput": "maximize",
                                                          "perf_latency_p99": "minimize"}}))
    assert not applies(parse_spec({**base, "search": {"space": {"concurrency": [1, 4]}}}))


def test_a_trial_plan_starts_at_the_guess_among_the_spec_levels() -> None:
    spec = parse_spec({"model": {"name": "m", "path": "m.onnx"},
                       "load": {"concurrency": {"start": 1, "stop": 64}},
                       "constraints": {"perf_latency_p99": {"max": 5}}})
    plan = for_trial(spec, {"instance_group.count": 3}, {"max_batch_size": 4})
    assert plan is not None and plan.levels[plan.next([]) or 0] == 16  # 2x4x3 = 24 -> 16
    full = parse_spec({"model": {"name": "m", "path": "m.onnx"}, "search": {"sweep": "full"}})
    assert for_trial(full, {}, {"max_batch_size": 4}) is None


def test_after_a_feasible_trial_the_sweep_starts_at_the_best_trials_level() -> None:
    import optuna

    from tracker.search.sweep_plan import incumbent_level, start_index
    from tracker.trial_record import write_measured

    study = optuna.create_study(direction="maximize")
    assert incumbent_level(study) is None
    for value, feasible, level in ((300.0, True, 8), (500.0, True, 32), (900.0, False, 64)):
        trial = study.ask()
        write_measured(trial, {"perf_latency_p99": 0.0 if feasible else 5.0},
                       feasible=feasible, concurrency=level, metrics={}, measurements=2)
        study.tell(trial, [value])
    failed = study.ask()
    study.tell(failed, state=optuna.trial.TrialState.FAIL)
    assert incumbent_level(study) == 32  # the best feasible one, not the infeasible 900
    guess = {"instance_group.count": 1, "max_batch_size": 1}  # the formula says 2
    assert start_index(LEVELS, guess, {}, None) == LEVELS.index(2)
    assert start_index(LEVELS, guess, {}, 32) == LEVELS.index(32)
    assert start_index(LEVELS, guess, {}, 24) == LEVELS.index(16)  # rounded down to a level
    spec = parse_spec({"model": {"name": "m", "path": "m.onnx"},
                       "load": {"concurrency": LEVELS}, "constraints": LIMIT})
    plan = for_trial(spec, guess, {}, study)
    assert plan is not None and plan.levels[plan.next([]) or 0] == 32
    # the walk from there: up while the limit holds, down when that level breaks it
    assert walk(plan, curve(lambda c: 100.0 * c, lambda c: c / 4)) == [32, 64]
    again = for_trial(spec, guess, {}, study)
    assert again is not None
    assert walk(again, curve(lambda c: 100.0 * c, lambda c: c / 2)) == [32, 16]
