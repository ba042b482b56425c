"""Objective values, constraint violations and the choice of concurrency level."""

from __future__ import annotations

import pytest

from tests.support.levels import pick
from tracker.errors import MeasurementError
from tracker.feasibility import (
    UNMEASURED_VIOLATION,
    constraint_keys,
    for_models,
    is_feasible,
    named_violations,
    stops_sweep,
)
from tracker.measure.types import Measurement, SweepLevel
from tracker.metrics import WEIGHTED_GAIN
from tracker.search.objective import (
    LevelChoice,
    Scoring,
    objective_values,
    pick_best_level,
    relative_gain,
    weighted_gain,
)
from tracker.spec import Bound


def level(c: int, thr: float, p99: float, valid: bool = True) -> Measurement:
    return Measurement(concurrency=c, throughput=thr, latency_p99_ms=p99, latency_avg_ms=p99 / 2,
                       valid=valid, stable=True)


MAX_THR = {"perf_throughput": "maximize"}


def test_violations_are_relative_and_signed() -> None:
    metrics = {"perf_latency_p99": 12.0, "perf_throughput": 50.0}
    got = named_violations(metrics, {"perf_latency_p99": Bound(max=10),
                                     "perf_throughput": {"min": 100}})
    assert got == pytest.approx({"perf_latency_p99.max": 0.2, "perf_throughput.min": 0.5})
    ok = list(named_violations({"perf_latency_p99": 5.0},
                               {"perf_latency_p99": Bound(max=10)}).values())
    assert ok == pytest.approx([-0.5]) and is_feasible(ok)
    assert constraint_keys({"perf_latency_p99": Bound(max=1)}) == ["perf_latency_p99.max"]


def test_unmeasured_constraint_is_never_feasible() -> None:
    got = named_violations({"perf_throughput": 1.0}, {"gpu_used_memory": Bound(max=1000)})
    assert got == {"gpu_used_memory.max": UNMEASURED_VIOLATION}
    assert not is_feasible(got)


def test_objective_values_in_spec_order_and_missing_metric_raises() -> None:
    metrics = {"perf_throughput": 10.0, "perf_latency_p99": 3.0}
    assert objective_values(metrics, {"perf_latency_p99": "minimize",
                                      "perf_throughput": "maximize"}) == [3.0, 10.0]
    with pytest.raises(MeasurementError, match="gpu_utilization"):
        objective_values(metrics, {"gpu_utilization": "maximize"})


def test_best_level_is_the_best_feasible_not_the_highest_throughput() -> None:
    sweep = [level(1, 100, 2), level(4, 300, 8), level(16, 400, 30)]
    choice = pick(sweep, {"perf_latency_p99": Bound(max=10)}, MAX_THR)
    assert choice.concurrency == 4 and choice.feasible and choice.values == [300.0]
    # without constraints the highest throughput wins
    assert pick(sweep, {}, MAX_THR).concurrency == 16


def test_stability_is_reported_but_does_not_pick_the_level() -> None:
    """An unstable level with far more throughput still judges the config (a stable low level
    would underrate it several times over); the choice says it was unstable."""
    sweep = [level(1, 100, 2), level(4, 300, 8), level(16, 600, 9)]
    sweep[2].stable = False
    choice = pick(sweep, {}, MAX_THR)
    assert choice.concurrency == 16 and not choice.stable
    assert pick(sweep[:2], {}, MAX_THR).stable


def test_ties_go_to_lower_concurrency_and_minimize_works() -> None:
    sweep = [level(2, 100, 5), level(8, 100, 9)]
    assert pick(sweep, {}, MAX_THR).concurrency == 2
    assert pick(sweep, {}, {"perf_latency_p99": "minimize"}).concurrency == 2


def test_no_feasible_level_picks_the_least_violating_one() -> None:
    sweep = [level(1, 100, 15), level(4, 300, 40)]
    choice = pick(sweep, {"perf_latency_p99": Bound(max=10)}, MAX_THR)
    assert choice.concurrency == 1 and not choice.feasible
    assert choice.violations["perf_latency_p99.max"] == pytest.approx(0.5)


def test_invalid_levels_are_skipped_and_none_left_raises() -> None:
    bad = Measurement(concurrency=8, throughput=999.0, latency_p99_ms=1.0, valid=False,
                      invalid_reason="errors above threshold")
    choice = pick([level(1, 100, 2), bad], {}, MAX_THR)
    assert choice.concurrency == 1
    with pytest.raises(MeasurementError, match="no load level"):
        pick([bad], {}, MAX_THR)


def test_relative_gain_is_symmetric_and_signed_by_direction() -> None:
    assert relative_gain(150, 50, "maximize") == pytest.approx(1.0)
    assert relative_gain(50, 150, "maximize") == pytest.approx(-1.0)
    assert relative_gain(5, 10, "minimize") == pytest.approx(10 / 15 * 1)
    assert relative_gain(0, 0, "maximize") == 0.0
    # a big model does not drown a small one: +10% on each scores the same
    m = {"big/perf_throughput": 5500.0, "small/perf_throughput": 55.0}
    r = {"big/perf_throughput": 5000.0, "small/perf_throughput": 50.0}
    only_big = weighted_gain(m, r, {"big": 1, "small": 0})
    only_small = weighted_gain(m, r, {"big": 0, "small": 1})
    assert only_big == pytest.approx(only_small)
    with pytest.raises(MeasurementError, match="big/perf_latency_p99"):
        weighted_gain(m, r, {"big": 1, "small": 1}, {"perf_latency_p99": 1})


def test_bare_constraints_bound_every_model_and_a_models_own_wins() -> None:
    got = for_models({"perf_latency_p99": {"max": 10}, "b/perf_latency_p99": {"max": 5},
                      "model/pre/queue_ms": {"max": 1}}, ["a", "b"])
    assert got == {"a/perf_latency_p99": {"max": 10}, "b/perf_latency_p99": {"max": 5},
                   "a/model/pre/queue_ms": {"max": 1}, "b/model/pre/queue_ms": {"max": 1}}
    # a latency maximum stops a sweep whichever model (or step) it names; a step's queue not
    assert stops_sweep({"a/perf_latency_p99": 12.0}, {"a/perf_latency_p99": {"max": 10}})
    assert not stops_sweep({"model/pre/queue_ms": 2.0}, {"model/pre/queue_ms": {"max": 1}})


def test_the_joint_level_is_the_feasible_one_with_the_best_weighted_gain() -> None:
    def joint(a: tuple[float, float], b: tuple[float, float], valid: bool = True,
              ) -> SweepLevel:
        return SweepLevel({"a": level(1, *a), "b": level(1, *b, valid=valid)})

    levels = [joint((100, 2), (10, 2)), joint((150, 4), (10, 9)), joint((120, 3), (12, 3)),
              joint((999, 1), (99, 1), valid=False)]
    ref = levels[0].metrics()
    gain = {WEIGHTED_GAIN: "maximize"}

    def best_of(constraints: dict[str, object], weights: dict[str, float] | None,
                reference: dict[str, float] | None = ref, chosen: list[SweepLevel] = levels,
                ) -> LevelChoice:
        return pick_best_level(chosen, for_models(constraints, ["a", "b"]), gain,
                               Scoring(["a", "b"], weights=weights, reference=reference))

    best = best_of({"perf_latency_p99": {"max": 5}}, {"a": 1, "b": 1})
    # level 1 gains most on a (+40%) but breaks b's bound; level 2: a +18%, b +18%
    assert best.index == 2 and best.feasible
    assert best.metrics[WEIGHTED_GAIN] == pytest.approx(relative_gain(120, 100, "maximize") / 2
                                                        + relative_gain(12, 10, "maximize") / 2)
    assert best.metrics["a/concurrency"] == 1 and best.concurrency == 2  # both entries' slots
    assert best_of({}, {"a": 3, "b": 1}).index == 1  # a's weight 3: its +40% wins
    assert weighted_gain(ref, ref, {"a": 1}) == 0.0
    none_fit = best_of({"b/perf_latency_p99": {"max": 1}}, None, None)
    assert not none_fit.feasible and none_fit.index == 0  # the least violating
    assert none_fit.values == [0.0]  # measuring the default itself: it scores 0
    with pytest.raises(MeasurementError, match="no load level measured the objective"):
        best_of({}, None, chosen=levels[3:])


def test_one_model_is_the_one_entry_case_of_the_same_choice() -> None:
    """The weighted gain of one model against its default is its own relative throughput
    gain, and its metrics keep their bare names when the configuration names them so."""
    one = [SweepLevel({"m": level(c, t, p99)}, i)
           for i, (c, t, p99) in enumerate(((1, 100, 2), (2, 180, 4), (4, 200, 12)))]
    bare = Scoring(["m"], lambda entry, metric: metric, reference={"perf_throughput": 150.0})
    got = pick_best_level(one, {"perf_latency_p99": {"max": 10}}, {WEIGHTED_GAIN: "maximize"},
                          bare)
    assert got.concurrency == 2 and got.metrics["concurrency"] == 2
    assert got.values == [pytest.approx(relative_gain(180, 150, "maximize"))]
    plain = pick_best_level(one, {"perf_latency_p99": {"max": 10}},
                            {"perf_throughput": "maximize"}, bare)
    assert plain.index == got.index and WEIGHTED_GAIN not in plain.metrics
