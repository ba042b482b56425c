"""The capacity search (tracker/search/capacity.py) on a synthetic response: the planner's
contract is a pure function of (rate, held), so a server that holds every rate up to a known
edge tells whether the bisection finds that edge, within its tolerance and budget. The
per-level rule and the choice are checked on Measurements built by hand; the cost arithmetic
(tracker/search/cost.py) on round numbers."""

from __future__ import annotations

import math

import pytest

from tracker.errors import MeasurementError, StudyError
from tracker.measure.sweep import Probe
from tracker.measure.types import Measurement, SweepLevel, SweepResult
from tracker.search.capacity import (
    Bisection,
    CapacityPlan,
    CapacitySettings,
    choose,
    why_not,
)
from tracker.search.cost import cost_per_million, deployment, replicas
from tracker.search.objective import Scoring
from tracker.spec.capacity import CapacitySection


def _search(edge: float, closed_loop: float, tol: float = 5.0, budget: int = 12,
            ) -> tuple[Bisection, list[float]]:
    search = Bisection(tol, budget)
    rate: float | None = search.first(closed_loop)
    tried = []
    while rate is not None:
        tried.append(rate)
        search.tell(rate, rate <= edge)
        rate = search.next()
    return search, tried


@pytest.mark.parametrize(("edge", "closed_loop"), [
    (2900.0, 4000.0),   # the SLA binds well below flat-out throughput
    (4400.0, 4000.0),   # the closed-loop probe under-read the server: the bracket grows
    (400.0, 4000.0),    # far below: the bracket shrinks
    (1000.0, 1000.0),
])
def test_the_bisection_finds_the_edge_within_the_tolerance(edge: float,
                                                           closed_loop: float) -> None:
    search, tried = _search(edge, closed_loop, budget=20)
    low, high = search.bracket()
    assert low is not None and high is not None
    assert low <= edge < high
    assert (high - low) / low <= 0.05
    assert "bracketed within 5%" in search.reason
    # every rate that failed was measured twice, every rate that held once
    assert all(tried.count(r) == (1 if r <= edge else 2) for r in tried)


def test_a_tighter_tolerance_costs_more_rates_and_lands_closer() -> None:
    _, loose_tried = _search(2900.0, 4000.0, tol=10.0)
    tight, tight_tried = _search(2900.0, 4000.0, tol=1.0, budget=30)
    assert len(tight_tried) > len(loose_tried)
    low, high = tight.bracket()
    assert low is not None and high is not None and (high - low) / low <= 0.01


def test_the_step_budget_ends_the_search_with_the_best_bracket_so_far() -> None:
    search, tried = _search(2900.0, 4000.0, tol=0.1, budget=4)
    assert len(tried) == 4 and search.reason == "step budget spent: 4 readings taken"
    low, high = search.bracket()
    assert low is not None and high is not None and low <= 2900.0 < high


def test_no_rate_holding_ends_at_the_floor() -> None:
    search, tried = _search(0.0, 100.0, budget=50)
    assert search.bracket()[0] is None
    assert min(tried) >= 1.0 and "no rate of at least 1 request/s holds" in search.reason


def test_a_rate_fails_only_when_its_second_reading_fails_too() -> None:
    # the first reading of the first rate (3,400/s, under the 3,500/s edge) broke the SLA:
    # a stall of the machine, not the configuration's limit
    stalled = {3400.0}
    search = Bisection(5.0, 12)
    rate: float | None = search.first(4000.0)
    while rate is not None:
        search.tell(rate, rate <= 3500.0 and rate not in stalled)
        stalled.discard(rate)
        rate = search.next()
    assert search.history[:2] == [(3400.0, False), (3400.0, True)]
    assert search.verdict(3400.0) is True
    low, high = search.bracket()
    assert low is not None and high is not None and low <= 3500.0 < high
    assert (high - low) / low <= 0.05
    # two failed readings decide; one is undecided and counts as failed in the bracket
    once = Bisection(5.0, 8, [(1000.0, True), (1250.0, False)])
    assert once.verdict(1250.0) is None and once.bracket() == (1000.0, 1250.0)
    assert once.next() == 1250.0
    once.tell(1250.0, False)
    assert once.verdict(1250.0) is False and once.next() == 1125.0


def test_the_budget_counts_readings_and_ends_before_a_second_reading() -> None:
    search = Bisection(5.0, 3, [(1000.0, True), (1250.0, True), (1562.5, False)])
    assert search.next() is None and "step budget spent: 3" in search.reason
    assert search.bracket() == (1250.0, 1562.5)


def test_a_noisy_reading_below_the_edge_does_not_lower_the_capacity() -> None:
    search = Bisection(5.0, 10)
    for rate, held in [(1000.0, True), (1250.0, False), (900.0, False), (1125.0, True)]:
        search.tell(rate, held)
    assert search.bracket() == (1125.0, 1250.0)


def _open(rate: float, p99: float, *, requests: int | None = None, sent: int | None = None,
          errors: int = 0, valid: bool = True, duration: float = 3.0) -> SweepLevel:
    done = int(rate * duration) if requests is None else requests
    m = Measurement(request_rate=rate, throughput=done / duration, latency_p99_ms=p99,
                    requests=done, sent=done + errors if sent is None else sent,
                    errors=errors, duration_s=duration, stable=True, valid=valid,
                    invalid_reason=None if valid else "server gone")
    return SweepLevel({"m": m})


SLA = {"perf_latency_p99": {"max": 20.0}}


def test_a_rate_holds_only_with_the_sla_the_rate_the_queue_and_the_errors() -> None:
    assert why_not(_open(1000, 12.0), SLA, 1.0) is None
    assert why_not(_open(1000, 25.0), SLA, 1.0) == "m/perf_latency_p99 25 > max 20"
    assert "achieved 950.0/s of 1,000.0/s offered" in str(
        why_not(_open(1000, 12.0, requests=2850), SLA, 1.0))
    # 2% short is still within 2% (with Poisson arrivals the count's noise is allowed too)
    assert why_not(_open(1000, 12.0, requests=2950), SLA, 1.0) is None
    assert "the queue grows: 150 of 3150" in str(
        why_not(_open(1000, 12.0, sent=3150), SLA, 1.0))
    assert "failed (> 1%)" in str(why_not(_open(1000, 12.0, requests=2900, errors=100),
                                          SLA, 1.0))
    assert "server gone" in str(why_not(_open(1000, 12.0, valid=False), SLA, 1.0))
    missing = SweepLevel({"m": Measurement(request_rate=10.0, requests=30, sent=30,
                                           duration_s=3.0)})
    assert why_not(missing, SLA, 1.0) == "m/perf_latency_p99 not measured"
    # Poisson arrivals at a low rate: a 3-sigma shortfall of the count is noise, not overload
    assert why_not(_open(20, 5.0, requests=52, sent=52), SLA, 1.0, bursty=True) is None
    assert why_not(_open(20, 5.0, requests=52, sent=52), SLA, 1.0, bursty=False) is not None


def _closed(throughput: float) -> SweepLevel:
    return SweepLevel({"m": Measurement(concurrency=16, throughput=throughput,
                                        requests=int(throughput * 3), duration_s=3.0,
                                        latency_p99_ms=30.0)})


def test_the_plan_probes_closed_loop_then_asks_the_rates_of_the_bisection() -> None:
    plan = CapacityPlan(CapacitySettings(SLA, tolerance_pct=5.0, max_probes=8))
    done: list[SweepLevel] = []
    assert plan.next(done) == Probe(concurrency=16)
    done.append(_closed(4000.0))
    edge = 2900.0
    while (probe := plan.next(done)) is not None:
        assert isinstance(probe, Probe) and probe.request_rate is not None
        rate = probe.request_rate
        done.append(_open(rate, 10.0 if rate <= edge else 80.0))
    assert "bracketed within 5%" in plan.reason
    choice = choose(SweepResult(done, plan.reason),
                    CapacitySettings(SLA, deploy=CapacitySection(
                        target_rps=10000, price_per_hour=3.6, headroom_pct=20)),
                    {"perf_capacity": "maximize"}, Scoring(["m"], lambda _e, k: k))
    capacity = choice.metrics["perf_capacity"]
    assert capacity <= edge and choice.metrics["perf_capacity_high"] > edge
    assert (choice.metrics["perf_capacity_high"] - capacity) / capacity <= 0.05
    assert choice.values == [capacity] and choice.feasible
    assert choice.metrics["request_rate"] == capacity  # judged at the level of its capacity
    assert choice.metrics["perf_capacity_probes"] == len(done) - 1
    assert choice.metrics["replicas"] == math.ceil(12000 / capacity)
    assert choice.metrics["cost_per_million"] == pytest.approx(1e6 / capacity / 1000)


def test_the_plan_measures_a_failed_rate_again_and_judges_it_by_both_readings() -> None:
    plan = CapacityPlan(CapacitySettings(SLA, tolerance_pct=5.0, max_probes=8))
    done = [_closed(4000.0)]
    assert plan.next(done) == Probe(request_rate=3400.0)
    done.append(_open(3400.0, 300.0))           # a stall broke the first reading's p99
    assert plan.next(done) == Probe(request_rate=3400.0)
    done.append(_open(3400.0, 12.0))
    assert plan.next(done) == Probe(request_rate=4250.0)
    choice = choose(SweepResult(done, "x"), CapacitySettings(SLA),
                    {"perf_capacity": "maximize"}, Scoring(["m"], lambda _e, k: k))
    assert choice.metrics["perf_capacity"] == 3400.0 and choice.index == 2
    assert choice.metrics["perf_capacity_probes"] == 2 and choice.feasible


def test_no_rate_held_is_capacity_zero_and_a_failed_probe_fails_the_trial() -> None:
    levels = [_closed(100.0), _open(85.0, 50.0), _open(51.0, 40.0)]
    choice = choose(SweepResult(levels, "x"), CapacitySettings(SLA),
                    {"perf_capacity": "maximize"}, Scoring(["m"], lambda _e, k: k))
    assert choice.metrics["perf_capacity"] == 0.0 and not choice.feasible
    assert choice.metrics["request_rate"] == 51.0
    bad = SweepLevel({"m": Measurement(concurrency=16, valid=False,
                                       invalid_reason="server gone")})
    plan = CapacityPlan(CapacitySettings(SLA))
    assert plan.next([bad]) is None and "closed-loop probe failed" in plan.reason
    with pytest.raises(MeasurementError, match="measured no rate"):
        choose(SweepResult([bad], plan.reason), CapacitySettings(SLA),
               {"perf_capacity": "maximize"}, Scoring(["m"], lambda _e, k: k))


def test_replicas_and_cost() -> None:
    assert replicas(3000, 1000, 20) == 4       # 3,600 requests/s at 1,000 each
    assert replicas(3000, 1000, 0) == 3        # exactly enough: no extra replica
    assert replicas(10, 1000, 20) == 1
    # 3.6 per hour for 1,000 requests/s of batch 1: 3.6M inferences an hour, 1 per million
    assert cost_per_million(3.6, 1000) == pytest.approx(1.0)
    assert cost_per_million(3.6, 1000, batch_size=4) == pytest.approx(0.25)
    with pytest.raises(StudyError, match=r"`capacity > 0` must hold"):
        replicas(3000, 0)
    assert deployment(None, 1000) == {}
    assert deployment(CapacitySection(price_per_hour=2.9), 0.0) == {}
    assert deployment(CapacitySection(price_per_hour=3.6), 1000) == {
        "cost_per_million": pytest.approx(1.0)}
