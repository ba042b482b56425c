"""The confirmation's statistics and verdict rules on known data (tracker/confirm_stats.py)."""

from __future__ import annotations

import math

import pytest

from tracker import confirm_stats as cs


def test_t_quantiles_match_scipy() -> None:
    stats = pytest.importorskip("scipy.stats")
    for df in range(1, 31):
        assert cs.t975(df) == pytest.approx(float(stats.t.ppf(0.975, df)), abs=1e-3)
    assert cs.t975(200) == pytest.approx(1.96)
    with pytest.raises(ValueError, match="df >= 1"):
        cs.t975(0)


def test_level_is_the_median_with_the_t_interval_of_the_mean() -> None:
    iv = cs.level([10.0, 12.0, 17.0])
    assert iv.estimate == 12.0                       # the median, not the mean (13)
    half = 4.3027 * math.sqrt(13.0) / math.sqrt(3)   # s = sqrt(13)
    assert (iv.low, iv.high) == pytest.approx((13 - half, 13 + half), abs=1e-3)
    one = cs.level([5.0])
    assert (one.low, one.estimate, one.high, one.n) == (5.0, 5.0, 5.0, 1)
    wide = cs.level([1.0, 2.0, 30.0])                # mean - half is about -30
    assert wide.low == 0.0
    assert wide.high == pytest.approx(11 + 4.3027 * math.sqrt(271 / 3), abs=1e-3)


def test_cv_across_rounds() -> None:
    assert cs.cv_pct([9.0, 10.0, 11.0]) == pytest.approx(10.0)
    assert cs.cv_pct([3.0]) == 0.0


def test_pairing_by_round_cancels_drift_that_hits_a_whole_round() -> None:
    """The machine doubles its speed between rounds; the configuration stays 10% ahead in
    each: the paired improvement is exactly 10% with a zero-width interval, while the
    unpaired intervals of the two configurations overlap widely."""
    base = [100.0, 200.0, 300.0]
    conf = [110.0, 220.0, 330.0]
    imp = cs.improvement(conf, base)
    assert imp is not None
    assert (imp.estimate, imp.low, imp.high) == pytest.approx((10.0, 10.0, 10.0))
    assert cs.level(conf).overlaps(cs.level(base))


def test_the_improvement_is_the_median_ratio_with_the_interval_of_the_mean_log_ratio() -> None:
    """One round hit by a burst (the default at half speed) moves the median ratio little;
    the interval, on the mean, widens to show it."""
    base = [100.0, 100.0, 50.0, 100.0, 100.0]
    conf = [120.0, 118.0, 121.0, 122.0, 119.0]
    imp = cs.improvement(conf, base)
    assert imp is not None and imp.estimate == pytest.approx(20.0)  # 120 / 100, the median
    logs = [math.log(v / b) for v, b in zip(conf, base, strict=True)]
    mean, low, high = cs.mean_interval(logs)
    assert (imp.low, imp.high) == pytest.approx((100 * math.expm1(low), 100 * math.expm1(high)))
    assert 100 * math.expm1(mean) > 35                       # what the mean would have said


def test_improvement_to_minimize_and_missing_rounds() -> None:
    imp = cs.improvement([90.0, None, 80.0], [100.0, 100.0, None], direction="minimize")
    assert imp is not None and imp.n == 1           # only the first round has both
    assert imp.estimate == pytest.approx(100 * (100 / 90 - 1))
    assert cs.improvement([None], [1.0]) is None


def _cand(key: str, values: list[float | None], p99: float = 10.0, instances: int = 1,
          baseline: bool = False, feasible: int | None = None) -> cs.Candidate:
    return cs.Candidate(key, values, [p99] * len(values), instances=instances,
                        baseline=baseline,
                        feasible_rounds=len(values) if feasible is None else feasible)


BASE = [100.0, 102.0, 98.0, 101.0, 99.0]


def test_better_when_the_winner_is_separated_from_all() -> None:
    v = cs.decide([_cand("trial-0", BASE, baseline=True),
                   _cand("trial-4", [b * 1.20 + d for b, d in zip(BASE, [0, 1, -1, 0.5, -0.5],
                                                                  strict=True)]),
                   _cand("trial-2", [b * 1.05 for b in BASE])])
    assert (v.verdict, v.chosen, v.winner, v.tied) == ("better", "trial-4", "trial-4", [])
    assert cs.separated(v)
    assert v.scored["trial-4"].improvement is not None
    assert v.scored["trial-4"].improvement.low > 5.0
    assert v.rank() == ["trial-4", "trial-2", "trial-0"]


def test_tied_configurations_prefer_lower_p99_then_fewer_instances() -> None:
    noisy = [1.10, 1.14, 1.12]
    other = [1.13, 1.11, 1.12]
    base = BASE[:3]
    v = cs.decide([_cand("trial-0", base, baseline=True),
                   _cand("trial-1", [b * r for b, r in zip(base, noisy, strict=True)], p99=20.0),
                   _cand("trial-3", [b * r for b, r in zip(base, other, strict=True)], p99=12.0,
                         instances=3),
                   _cand("trial-5", [b * r for b, r in zip(base, other, strict=True)], p99=12.0,
                         instances=1)])
    assert v.verdict == "tied"
    assert v.chosen == "trial-5"                     # lowest p99; then fewer instances than 3
    assert set(v.tied) | {v.winner} == {"trial-1", "trial-3", "trial-5"}
    assert not cs.separated(v)


def test_a_tied_configuration_not_itself_above_the_default_is_not_chosen() -> None:
    base = BASE[:3]
    v = cs.decide([_cand("trial-0", base, baseline=True),
                   _cand("trial-1", [b * r for b, r in zip(base, [1.10, 1.11, 1.12],
                                                             strict=True)], p99=50.0),
                   _cand("trial-2", [b * r for b, r in zip(base, [0.97, 1.12, 1.05],
                                                             strict=True)], p99=5.0)])
    assert v.verdict == "tied" and "trial-2" in v.tied
    imp2 = v.scored["trial-2"].improvement
    assert imp2 is not None and imp2.low <= 0
    assert v.chosen == "trial-1"                     # trial-2 is cheaper but not measurably better


def test_a_larger_estimate_that_is_not_proven_does_not_hide_one_that_is() -> None:
    """A run of benchmarks/verdict_stability.py: 3 x 1 has the larger median improvement but
    one burst-hit round puts its interval below 0; 2 x 1 beat the default in every round.
    The verdict is tied with 2 x 1 chosen, not no_better."""
    default = [14.30, 15.91, 16.28, 12.24, 16.96]
    v = cs.decide([_cand("trial-0", default, baseline=True),
                   _cand("trial-3", [18.86, 19.56, 19.92, 20.91, 19.59], instances=2),
                   _cand("trial-4", [21.73, 22.27, 20.94, 18.57, 13.90], instances=3)])
    imp3, imp4 = v.scored["trial-3"].improvement, v.scored["trial-4"].improvement
    assert imp3 is not None and imp4 is not None
    assert imp4.estimate > imp3.estimate and imp4.low <= 0 < imp3.low
    assert (v.verdict, v.winner, v.chosen, v.tied) == ("tied", "trial-3", "trial-3",
                                                       ["trial-4"])
    none = cs.decide([_cand("trial-0", default, baseline=True),
                      _cand("trial-4", [21.73, 22.27, 20.94, 18.57, 13.90], instances=3)])
    assert (none.verdict, none.winner, none.chosen) == ("no_better", "trial-4", "trial-0")


def test_identical_configurations_are_no_better_and_keep_the_default() -> None:
    same = [100.0, 97.0, 103.0, 99.0]
    v = cs.decide([_cand("trial-0", [101.0, 98.0, 100.0, 102.0], baseline=True),
                   _cand("trial-1", same), _cand("trial-2", [x + 1 for x in same])])
    assert v.verdict == "no_better"
    assert v.chosen == "trial-0"
    assert v.winner == "trial-2"
    win = v.scored["trial-2"].improvement
    assert win is not None and win.low <= 0 <= win.high


def test_worse_configurations_are_no_better() -> None:
    v = cs.decide([_cand("trial-0", BASE, baseline=True),
                   _cand("trial-1", [b * 0.8 for b in BASE])])
    assert (v.verdict, v.chosen) == ("no_better", "trial-0")


def test_infeasible_in_most_rounds_is_not_eligible() -> None:
    v = cs.decide([_cand("trial-0", BASE, baseline=True),
                   _cand("trial-1", [b * 1.5 for b in BASE], feasible=2),
                   _cand("trial-2", [b * 1.1 for b in BASE])])
    assert not v.scored["trial-1"].eligible
    assert v.chosen == "trial-2"


def test_still_open_drops_configurations_below_the_winner() -> None:
    v = cs.decide([_cand("trial-0", BASE[:3], baseline=True),
                   _cand("trial-1", [b * r for b, r in zip(BASE[:3], [1.3, 1.31, 1.29],
                                                             strict=True)]),
                   _cand("trial-2", [b * r for b, r in zip(BASE[:3], [1.02, 1.01, 1.03],
                                                             strict=True)]),
                   _cand("trial-3", [b * r for b, r in zip(BASE[:3], [1.1, 1.5, 1.3],
                                                             strict=True)])])
    assert v.winner == "trial-1"
    assert set(cs.still_open(v)) == {"trial-0", "trial-1", "trial-3"}


def test_decide_needs_the_default() -> None:
    with pytest.raises(ValueError, match="default"):
        cs.decide([_cand("trial-1", BASE)])
    assert cs.spread([3.0, 9.0, 5.0]) == 6.0
    assert cs.spread({"a": 1.0}) == 0.0
