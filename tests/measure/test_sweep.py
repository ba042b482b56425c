"""Sweep rules without a server: levels from the spec, early stop, best level."""

from __future__ import annotations

import pytest

from tests.support.levels import pick
from tracker.errors import MeasurementError
from tracker.feasibility import broken, named_violations
from tracker.measure import sweep
from tracker.measure.sweep import load_levels
from tracker.measure.types import Measurement, SweepLevel
from tracker.spec import LoadSection


def m(c: int, tput: float, p99: float = 5.0, stable: bool = True,
      valid: bool = True) -> Measurement:
    return Measurement(concurrency=c, throughput=tput, latency_p99_ms=p99, requests=100,
                       stable=stable, valid=valid,
                       invalid_reason=None if valid else "12 of 100 requests failed")


THROUGHPUT = {"perf_throughput": "maximize"}


def stop_reason(done: list[Measurement], constraints: object) -> str | None:
    """The sweep's stop rule for one entry model ``m`` (the one-entry case)."""
    return sweep.stop_reason([SweepLevel({"m": x}, i) for i, x in enumerate(done)],
                             constraints)  # type: ignore[arg-type]


def test_levels_from_the_spec() -> None:
    assert [lv.concurrency for lv in load_levels(LoadSection())] == [1, 2, 4, 8, 16]
    rng = LoadSection(concurrency={"start": 1, "stop": 32})
    assert [lv.concurrency for lv in load_levels(rng)] == [1, 2, 4, 8, 16, 32]
    assert [lv.concurrency for lv in load_levels(rng, [3, 5])] == [3, 5]
    rates = load_levels(LoadSection(request_rate=[100, 200], arrival="poisson"))
    assert [(lv.request_rate, lv.arrival) for lv in rates] == [(100.0, "poisson"),
                                                               (200.0, "poisson")]
    with pytest.raises(MeasurementError, match=r"integer >= 1, but got 2\.5"):
        load_levels(LoadSection(), [2.5])


def test_saturation_stops_after_three_flat_levels() -> None:
    done = [m(1, 100), m(2, 180), m(4, 300)]
    assert stop_reason(done, None) is None
    done.append(m(8, 310))
    assert stop_reason(done, None) is None  # 310 vs 100: still gaining over the window
    done += [m(16, 312), m(32, 305)]
    why = stop_reason(done, None)
    assert why is not None and "saturated" in why and "4.0%" in why  # 312 vs 300


def test_latency_constraint_stops_the_sweep() -> None:
    cons = {"perf_latency_p99": {"max": 10}}
    assert stop_reason([m(1, 100, p99=4)], cons) is None
    why = stop_reason([m(1, 100, p99=4), m(2, 150, p99=12)], cons)
    assert why == ("latency constraint broken at m: concurrency 2: m/perf_latency_p99 12 > "
                   "max 10")


def test_invalid_level_stops_with_its_reason() -> None:
    why = stop_reason([m(1, 100), m(2, 0, valid=False)], None)
    assert why == "m at concurrency 2 invalid: 12 of 100 requests failed"


def test_best_meets_constraints_and_keeps_the_unstable_flag() -> None:
    cons = {"perf_latency_p99": {"max": 10}, "perf_throughput": {"min": 50}}
    done = [m(1, 40, p99=2), m(2, 150, p99=4), m(4, 400, p99=9, stable=False),
            m(8, 500, p99=20), m(16, 900, valid=False)]
    best = pick(done, cons, THROUGHPUT)
    assert best.feasible and best.concurrency == 4 and not best.stable
    only_unstable = [m(1, 40), m(4, 400, p99=9, stable=False)]
    best = pick(only_unstable, {"perf_throughput": {"min": 50}}, THROUGHPUT)
    assert best.feasible and best.concurrency == 4 and not best.stable
    assert not pick([m(8, 500, p99=20)], cons, THROUGHPUT).feasible


def test_unmeasured_metric_breaks_no_constraint_but_is_not_feasible() -> None:
    """One rule (tracker/feasibility.py): an unmeasured metric does not stop the sweep and is
    named broken by no value, but it counts as violated when a level is judged."""
    assert broken(m(1, 10).metrics(), {"gpu_used_memory": {"max": 1}}) == []
    assert stop_reason([m(1, 10)], {"perf_latency_p95": {"max": 1}}) is None
    assert named_violations(m(1, 10).metrics(), {"gpu_used_memory": {"max": 1}}) == {
        "gpu_used_memory.max": 1.0}
    assert broken(m(1, 10).metrics(), {"perf_throughput": {"min": 20}}) == [
        "perf_throughput 10 < min 20"]


def test_requests_that_warmed_the_model_shorten_only_the_first_levels_warm_up() -> None:
    """The output check's probes warmed the served model: the first level asked for waits
    for that many fewer warm-up requests (one at least, the load's own), the next ones for
    all of theirs."""
    from tritonclient.grpc.model_config_pb2 import ModelConfig

    from tracker.measure.entry import EntryLoad, Opened, settings_from, warmed_settings

    load = LoadSection(concurrency=[1, 4], warmup_requests=5)
    settings = settings_from(load)
    assert warmed_settings(settings, 3).warmup_requests == 2
    assert warmed_settings(settings, 9).warmup_requests == 1
    assert warmed_settings(settings, 0) is settings
    none = settings_from(LoadSection(concurrency=[1], warmup_requests=0))
    assert warmed_settings(none, 3).warmup_requests == 0
    opened = Opened("m", EntryLoad(ModelConfig(), load, warmed=4), load_levels(load), settings,
                    None, None)  # type: ignore[arg-type]  # part() uses neither
    assert [opened.part(i).settings.warmup_requests for i in (1, 0, 1)] == [1, 5, 5]
