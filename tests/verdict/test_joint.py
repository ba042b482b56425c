"""The confirmation of several entry models as the report reads it: each round's weighted_gain
against that round's default, put on the ratio scale for the verdict and back on the gain
scale for what is shown and logged."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tracker.verdict import record as confirmed
from tracker.verdict import stats as confirm_stats
from tracker.verdict import words

OBJ = {"weighted_gain": "maximize"}


def _record(gains: list[float]) -> dict[str, object]:
    return {"status": "done", "rounds_target": 10, "min_rounds": 3, "tie_margin_pct": 5.0,
            "candidates": [{"trial": 0, "baseline": True}, {"trial": 3, "baseline": False}],
            "rounds": [{"order": [0, 3], "results": {
                "0": {"weighted_gain": 0.0, "feasible": True},
                "3": {"weighted_gain": g, "feasible": True}}} for g in gains]}


@pytest.mark.parametrize("gain", [-1.5, -0.2, 0.0, 0.3, 1.9])
def test_the_ratio_scale_is_the_throughput_ratio_for_one_model(gain: float) -> None:
    ratio = confirm_stats.ratio_of_gain(gain)
    x, r = ratio * 10.0, 10.0  # one model: its relative gain (x - r) / mean(x, r)
    assert (x - r) / ((x + r) / 2) == pytest.approx(gain)
    assert confirm_stats.gain_of_ratio(ratio) == pytest.approx(gain)


def test_steady_gains_decide_better_and_say_it_in_weighted_words() -> None:
    record = _record([0.30, 0.28, 0.33, 0.31, 0.29])
    v = confirmed.verdict(record, OBJ)
    assert v is not None and v.verdict == confirm_stats.BETTER and v.chosen == "trial-3"
    imp = v.scored["trial-3"].improvement
    assert imp is not None and imp.low > 0
    # the improvement is on the ratio scale: a gain of 0.30 is ~35% for one model
    assert imp.estimate == pytest.approx(100 * (confirm_stats.ratio_of_gain(0.30) - 1), abs=1)
    text = words.sentence(v, OBJ)
    assert "trial-3 is 35% (" in text and "on the models' weighted throughput" in text
    assert "(median weighted_gain +0.300 against the default of each round)" in text
    assert "swing" not in text  # the default's rounds are 1 by construction: no CV to compare
    logged = words.scored_metrics(v.scored["trial-3"], "weighted_gain")
    assert logged["confirm/weighted_gain"] == pytest.approx(0.30, abs=1e-9)  # the gain scale
    assert logged["confirm/weighted_gain_ci_low"] > 0
    assert math.isclose(logged["confirm/weighted_gain_min"], 0.28)


def test_a_gain_that_swings_around_zero_is_inconclusive_not_better() -> None:
    v = confirmed.verdict(_record([0.4, -0.3, 0.2, -0.25, 0.1]), OBJ)
    assert v is not None and v.verdict == confirm_stats.INCONCLUSIVE
    assert "each round compared with the default measured in it" in words.sentence(v, OBJ)


def test_two_rounds_leave_every_interval_unbounded_the_default_too() -> None:
    """The default's rounds are all 1: its interval after too few rounds is unbounded, not
    NaN (which drew error bars of the wrong sign in the report)."""
    v = confirmed.verdict(_record([0.1, -0.1]), OBJ)
    assert v is not None and v.rounds == 2
    base = v.scored["trial-0"].value
    assert base is not None and base.low == 0.0 and math.isinf(base.high)  # low cut at 0
    assert confirm_stats.gain_of_ratio(math.inf) == 2.0
    assert confirm_stats.gain_of_ratio(base.low) == -2.0


def test_the_scores_against_the_default_are_the_derived_objectives() -> None:
    """The catalog's relative metrics (what the confirmation scores against each round's
    default) are the search's derived objectives (what computes them)."""
    from tracker.metrics import RELATIVE
    from tracker.search.objective import DERIVED

    assert set(DERIVED) == RELATIVE


def test_a_round_pairs_each_configuration_with_its_own_default(tmp_path: Path) -> None:
    """confirm.rounds._pair_round: the default 0, the others their weighted_gain
    against it (weights 3:1); a configuration missing a model's figure gets no pair."""
    from tracker.confirm.rounds import _pair_round
    from tracker.spec import parse_spec
    from tracker.triton.configuration import Configuration
    from tracker.verdict.record import JOINT

    spec = parse_spec({"model": {"name": ["a", "b"], "path": str(tmp_path),
                                 "weights": {"a": 3, "b": 1}}})
    rnd: dict[str, Any] = {"results": {
        "0": {JOINT: {"a/perf_throughput": 10.0, "b/perf_throughput": 100.0}},
        "3": {JOINT: {"a/perf_throughput": 20.0, "b/perf_throughput": 50.0}},
        "5": {JOINT: {"a/perf_throughput": 20.0}}}}
    conf = Configuration((), ("a", "b"))  # only its entries and their metric names are read
    _pair_round(SimpleNamespace(spec=spec, configuration=conf), rnd, 0)  # type: ignore[arg-type]
    got = rnd["results"]
    assert got["0"]["weighted_gain"] == 0.0
    expected = 0.75 * (20 - 10) / 15 + 0.25 * (50 - 100) / 75
    assert got["3"]["weighted_gain"] == pytest.approx(expected)
    assert got["5"].get("weighted_gain") is None and "b/perf_throughput" in got["5"]["error"]


def test_a_pair_of_several_entries_says_each_one_s_throughput_and_the_score() -> None:
    from tracker.confirm.paired import pair_line
    from tracker.verdict.record import JOINT

    rnd: dict[str, Any] = {"order": [3, 0], "results": {
        "0": {"weighted_gain": 0.0, JOINT: {"a/perf_throughput": 10.0, "a/concurrency": 2.0,
                                            "b/perf_throughput": 1200.0}},
        "3": {"weighted_gain": 0.1166, JOINT: {"a/perf_throughput": 20.0,
                                               "b/perf_throughput": 800.0}}}}
    assert pair_line(rnd, 0, 2, "weighted_gain") == (
        "confirm pair 2: trial-3 a 20.00 infer/s; b 800.0 infer/s, then trial-0 a 10.00 "
        "infer/s; b 1,200.0 infer/s  weighted_gain +0.117")
