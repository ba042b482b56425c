"""Objective values, constraint violations and the choice of concurrency level."""

from __future__ import annotations

import pytest

from tracker.errors import MeasurementError
from tracker.feasibility import (
    UNMEASURED_VIOLATION,
    constraint_keys,
    constraint_violations,
    is_feasible,
    named_violations,
)
from tracker.measure.types import Measurement
from tracker.search.objective import objective_values, pick_best_level
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
    ok = constraint_violations({"perf_latency_p99": 5.0}, {"perf_latency_p99": Bound(max=10)})
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
    choice = pick_best_level(sweep, {"perf_latency_p99": Bound(max=10)}, MAX_THR)
    assert choice.concurrency == 4 and choice.feasible and choice.values == [300.0]
    # without constraints the highest throughput wins
    assert pick_best_level(sweep, {}, MAX_THR).concurrency == 16


def test_stability_is_reported_but_does_not_pick_the_level() -> None:
    """An unstable level with far more throughput still judges the config (a stable low level
    would underrate it several times over); the choice says it was unstable."""
    sweep = [level(1, 100, 2), level(4, 300, 8), level(16, 600, 9)]
    sweep[2].stable = False
    choice = pick_best_level(sweep, {}, MAX_THR)
    assert choice.concurrency == 16 and not choice.stable
    assert pick_best_level(sweep[:2], {}, MAX_THR).stable


def test_ties_go_to_lower_concurrency_and_minimize_works() -> None:
    sweep = [level(2, 100, 5), level(8, 100, 9)]
    assert pick_best_level(sweep, {}, MAX_THR).concurrency == 2
    assert pick_best_level(sweep, {}, {"perf_latency_p99": "minimize"}).concurrency == 2


def test_no_feasible_level_picks_the_least_violating_one() -> None:
    sweep = [level(1, 100, 15), level(4, 300, 40)]
    choice = pick_best_level(sweep, {"perf_latency_p99": Bound(max=10)}, MAX_THR)
    assert choice.concurrency == 1 and not choice.feasible
    assert choice.violations["perf_latency_p99.max"] == pytest.approx(0.5)


def test_invalid_levels_are_skipped_and_none_left_raises() -> None:
    bad = Measurement(concurrency=8, throughput=999.0, latency_p99_ms=1.0, valid=False,
                      invalid_reason="errors above threshold")
    choice = pick_best_level([level(1, 100, 2), bad], {}, MAX_THR)
    assert choice.concurrency == 1
    with pytest.raises(MeasurementError, match="no concurrency level"):
        pick_best_level([bad], {}, MAX_THR)
