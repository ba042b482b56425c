"""The confirmation's statistics and verdict rules on known data (tracker/verdict/stats.py); the
stopping rule on simulated rounds is tests/verdict/test_sequence.py."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest

from tracker.verdict import anytime as seq
from tracker.verdict import stats as confirm_stats


def test_t_quantiles_match_scipy() -> None:
    stats = pytest.importorskip("scipy.stats")
    for df in range(1, 31):
        assert confirm_stats.t975(df) == pytest.approx(float(stats.t.ppf(0.975, df)), abs=1e-3)
    assert confirm_stats.t975(200) == pytest.approx(1.96)
    with pytest.raises(ValueError, match="df >= 1"):
        confirm_stats.t975(0)


def test_level_is_the_median_with_the_anytime_interval_of_the_mean() -> None:
    iv = confirm_stats.level([10.0, 12.0, 17.0])
    assert iv.estimate == 12.0                       # the median, not the mean (13)
    half = seq.factor(3) * math.sqrt(13.0)           # s = sqrt(13)
    assert (iv.low, iv.high) == pytest.approx((max(13 - half, 0.0), 13 + half), abs=1e-6)
    one = confirm_stats.level([5.0])
    assert (one.low, one.estimate, one.n) == (0.0, 5.0, 1) and math.isinf(one.high)
    assert not one.bounded
    # wider than the fixed-sample t-interval, which holds only for a round count fixed ahead
    values = [10.0, 12.0, 17.0, 11.0, 13.0, 12.5]
    _, t_low, t_high = confirm_stats.mean_interval(values)
    wide = confirm_stats.level(values)
    assert wide.low < t_low and wide.high > t_high


def test_cv_across_rounds() -> None:
    assert confirm_stats.cv_pct([9.0, 10.0, 11.0]) == pytest.approx(10.0)
    assert confirm_stats.cv_pct([3.0]) == 0.0


def test_pairing_by_round_cancels_drift_that_hits_a_whole_round() -> None:
    """The machine doubles its speed between rounds; the configuration stays 10% ahead in
    each: the paired improvement is exactly 10% with a zero-width interval, while the
    unpaired intervals of the two configurations overlap widely."""
    base = [100.0, 200.0, 300.0]
    conf = [110.0, 220.0, 330.0]
    imp = confirm_stats.improvement(conf, base)
    assert imp is not None
    assert (imp.estimate, imp.low, imp.high) == pytest.approx((10.0, 10.0, 10.0))
    assert confirm_stats.level(conf).overlaps(confirm_stats.level(base))


def test_the_improvement_is_the_median_ratio_with_the_interval_of_the_mean_log_ratio() -> None:
    """One round hit by a burst (the default at half speed) moves the median ratio little;
    the interval, on the mean, widens to show it."""
    base = [100.0, 100.0, 50.0, 100.0, 100.0]
    conf = [120.0, 118.0, 121.0, 122.0, 119.0]
    imp = confirm_stats.improvement(conf, base)
    assert imp is not None and imp.estimate == pytest.approx(20.0)  # 120 / 100, the median
    logs = [math.log(v / b) for v, b in zip(conf, base, strict=True)]
    mean, low, high = seq.interval(logs)
    assert (imp.low, imp.high) == pytest.approx((100 * math.expm1(low), 100 * math.expm1(high)))
    assert 100 * math.expm1(mean) > 35                       # what the mean would have said
    assert confirm_stats.log_ratios(conf, base) == pytest.approx(logs)


def test_improvement_to_minimize_and_missing_rounds() -> None:
    imp = confirm_stats.improvement([90.0, None, 80.0], [100.0, 100.0, None], direction="minimize")
    assert imp is not None and imp.n == 1           # only the first round has both
    assert imp.estimate == pytest.approx(100 * (100 / 90 - 1))
    assert confirm_stats.improvement([None], [1.0]) is None


def _cand(key: str, values: Sequence[float | None], p99: float = 10.0, instances: int = 1,
          baseline: bool = False, feasible: int | None = None) -> confirm_stats.Candidate:
    return confirm_stats.Candidate(key, list(values), [p99] * len(values), instances=instances,
                                   baseline=baseline,
                                   feasible_rounds=len(values) if feasible is None else feasible)


BASE = [100.0, 102.0, 98.0, 101.0, 99.0]


def _times(base: list[float], ratios: list[float]) -> list[float | None]:
    return [b * r for b, r in zip(base, ratios, strict=True)]


BASE6 = [*BASE, 100.5]


def test_better_when_the_winner_is_proven_and_nothing_overlaps() -> None:
    v = confirm_stats.decide([
        _cand("trial-0", BASE6, baseline=True),
        _cand("trial-4", _times(BASE6, [1.20, 1.21, 1.19, 1.205, 1.195, 1.2])),
        _cand("trial-2", _times(BASE6, [1.02, 1.03, 1.01, 1.02, 1.025, 1.015]))])
    assert (v.verdict, v.chosen, v.winner, v.tied) == ("better", "trial-4", "trial-4", [])
    assert v.decided and not v.keeps_default
    imp = v.scored["trial-4"].improvement
    assert imp is not None and 15.0 < imp.low < 20.0 < imp.high < 25.0
    assert v.rank() == ["trial-4", "trial-2", "trial-0"]


def test_tied_configurations_prefer_lower_p99_then_steadier_then_fewer_instances() -> None:
    base = BASE6
    steady = [1.12, 1.121, 1.119, 1.12, 1.1205, 1.1195]
    swings = [1.10, 1.14, 1.12, 1.09, 1.15, 1.12]
    v = confirm_stats.decide([_cand("trial-0", base, baseline=True),
                              _cand("trial-1", _times(base, steady), p99=20.0),       # slow p99
                              _cand("trial-3", _times(base, swings), p99=12.0, instances=1),
                              _cand("trial-5", _times(base, steady), p99=12.2, instances=3)])
    assert v.verdict == "tied"
    assert set(v.tied) | {v.winner} == {"trial-1", "trial-3", "trial-5"}
    # trial-1's p99 is far off; 3 and 5 are within the 5% margin of each other on p99, and
    # trial-5's readings are steadier although it takes more instances
    assert v.chosen == "trial-5"
    assert v.scored["trial-5"].cv_pct < v.scored["trial-3"].cv_pct
    cheapest = confirm_stats.cheapest([v.scored["trial-3"], v.scored["trial-5"]], margin_pct=1.0)
    assert cheapest.key == "trial-3"                 # p99 12.2 is not within 1% of 12.0


def test_a_tied_configuration_not_itself_above_the_default_is_not_chosen() -> None:
    v = confirm_stats.decide([_cand("trial-0", BASE6, baseline=True),
                              _cand("trial-1", _times(BASE6, [1.10, 1.11, 1.12, 1.11, 1.10, 1.12]),
                                    p99=50.0),
                              _cand("trial-2", _times(BASE6, [0.97, 1.25, 1.05, 1.2, 0.95, 1.1]),
                                    p99=5.0)])
    assert v.verdict == "tied" and "trial-2" in v.tied
    imp2 = v.scored["trial-2"].improvement
    assert imp2 is not None and imp2.low <= 0
    assert v.chosen == "trial-1"                     # trial-2 is cheaper but not measurably better


def test_a_larger_estimate_that_is_not_proven_does_not_hide_one_that_is() -> None:
    """After a benchmark run: 3 x 1 has the larger median improvement but burst-hit rounds keep
    its interval reaching 0; 2 x 1 beat the default in every round. The verdict is tied with
    2 x 1 chosen, not a kept default."""
    default = [14.30, 15.91, 16.28, 12.24, 16.96, 15.1, 14.8]
    v = confirm_stats.decide([_cand("trial-0", default, baseline=True),
                              _cand("trial-3", [18.86, 19.56, 19.92, 16.91, 20.59, 19.2, 18.9],
                                    instances=2),
                              _cand("trial-4", [21.73, 22.27, 20.94, 12.57, 13.90, 24.1, 22.0],
                                    instances=3)])
    imp3, imp4 = v.scored["trial-3"].improvement, v.scored["trial-4"].improvement
    assert imp3 is not None and imp4 is not None
    assert imp4.estimate > imp3.estimate and imp4.low <= 0 < imp3.low
    assert (v.verdict, v.winner, v.chosen, v.tied) == ("tied", "trial-3", "trial-3",
                                                       ["trial-4"])
    alone = confirm_stats.decide([
        _cand("trial-0", default, baseline=True),
        _cand("trial-4", [21.73, 22.27, 20.94, 12.57, 13.90, 24.1, 22.0])])
    assert (alone.verdict, alone.winner, alone.chosen) == ("inconclusive", "trial-4", "trial-0")
    assert alone.keeps_default and not alone.decided


def test_equal_within_the_margin_is_equivalent_and_keeps_the_default() -> None:
    base = [100.0, 97.0, 103.0, 99.0, 101.0, 98.0]
    v = confirm_stats.decide([
        _cand("trial-0", base, baseline=True),
        _cand("trial-1", _times(base, [1.0, 1.005, 0.995, 1.002, 0.998, 1.0])),
        _cand("trial-2", _times(base, [0.99, 1.0, 0.985, 0.995, 0.99, 0.99]))])
    assert (v.verdict, v.chosen, v.winner) == ("equivalent", "trial-0", "trial-1")
    win = v.scored["trial-1"].improvement
    assert win is not None and win.low <= 0 <= win.high < v.margin_pct
    # the same rounds with a tighter margin cannot say so yet
    tight = confirm_stats.decide([
        _cand("trial-0", base, baseline=True),
        _cand("trial-1", _times(base, [1.0, 1.005, 0.995, 1.002, 0.998, 1.0]))],
        margin_pct=0.5)
    assert tight.verdict == "inconclusive"


def test_measurably_worse_configurations_are_equivalent_the_default_is_as_good() -> None:
    v = confirm_stats.decide([_cand("trial-0", BASE6, baseline=True),
                              _cand("trial-1", [b * 0.8 for b in BASE6])])
    assert (v.verdict, v.chosen) == ("equivalent", "trial-0")


def test_few_noisy_rounds_are_inconclusive() -> None:
    v = confirm_stats.decide([_cand("trial-0", [100.0, 60.0, 95.0], baseline=True),
                              _cand("trial-1", [130.0, 90.0, 110.0])])
    assert v.verdict == "inconclusive" and v.chosen == "trial-0"
    imp = v.scored["trial-1"].improvement
    assert imp is not None and imp.low < 0 and imp.high > v.margin_pct
    n = confirm_stats.more_rounds(v, [_cand("trial-0", [100.0, 60.0, 95.0], baseline=True),
                                      _cand("trial-1", [130.0, 90.0, 110.0])])
    assert n is not None and n > 3


def test_more_rounds_may_lean_toward_a_decision_by_the_mean_s_standard_error() -> None:
    # the pair ratios of a 3-trial quickstart confirmation stopped by its floor (7 pairs, mean
    # +1.5%, spread 8%): taken at face value they need more than 30 pairs to prove the two
    # within the 5% margin; with the mean one standard error (3%) lower, about 24
    ratios = [1.02, 0.95, 0.96, 1.09, 0.93, 1.01, 1.17]
    cands = [_cand("trial-0", [100.0] * 7, baseline=True),
             _cand("trial-4", [100.0 * r for r in ratios])]
    v = confirm_stats.decide(cands)
    assert v.verdict == "inconclusive"
    assert confirm_stats.more_rounds(v, cands, most=30) is None
    assert confirm_stats.more_rounds(v, cands, most=30, lean=1.0) == 24
    nearer = confirm_stats.more_rounds(v, cands, most=30, lean=2.0)
    assert nearer is not None and nearer < 24


def test_infeasible_in_most_rounds_is_not_eligible() -> None:
    v = confirm_stats.decide([_cand("trial-0", BASE, baseline=True),
                              _cand("trial-1", [b * 1.5 for b in BASE], feasible=2),
                              _cand("trial-2", [b * 1.1 for b in BASE])])
    assert not v.scored["trial-1"].eligible
    assert v.chosen == "trial-2"


def test_still_open_drops_what_can_no_longer_change_the_outcome() -> None:
    v = confirm_stats.decide([_cand("trial-0", BASE6, baseline=True),
                              _cand("trial-1", _times(BASE6, [1.3, 1.31, 1.29, 1.3, 1.3, 1.31])),
                              _cand("trial-2", _times(BASE6, [0.9, 0.91, 0.9, 0.89, 0.9, 0.9])),
                              _cand("trial-3", _times(BASE6, [1.1, 1.5, 1.25, 1.15, 1.45, 1.2]))])
    assert v.winner == "trial-1"
    # trial-2 is measurably worse
    assert set(confirm_stats.still_open(v)) == {"trial-0", "trial-1", "trial-3"}
    undecided = confirm_stats.decide([_cand("trial-0", [100.0, 60.0, 95.0], baseline=True),
                                      _cand("trial-1", [130.0, 90.0, 110.0]),
                                      _cand("trial-2", [80.0, 70.0, 76.0])])
    assert set(confirm_stats.still_open(undecided)) == {"trial-0", "trial-1", "trial-2"}


def test_robustness_names_the_configuration_that_swings() -> None:
    default = [14.3, 8.9, 16.3, 10.2, 17.0, 9.1]     # one session over both cores: bursts hit it
    v = confirm_stats.decide([_cand("trial-0", default, baseline=True),
                   _cand("trial-3", [20.1, 19.6, 19.9, 20.9, 20.6, 19.2]),
                   _cand("trial-4", [21.7, 22.3, 20.9, 21.6, 22.9, 21.1])])
    got = confirm_stats.swinging(v.scored)
    assert got is not None and got[0] == "trial-0"
    assert got[1] > 2 * got[2] and got[1] > confirm_stats.SWING_FLOOR_PCT
    assert v.scored["trial-0"].worst == 8.9 and v.scored["trial-4"].worst == 20.9
    calm = confirm_stats.decide([_cand("trial-0", BASE6, baseline=True),
                      _cand("trial-1", _times(BASE6, [1.2, 1.1, 1.3, 1.2, 1.1, 1.3]))])
    assert confirm_stats.swinging(calm.scored) is None
    latency = confirm_stats.score([_cand("trial-0", [5.0, 7.0], baseline=True)],
                                  direction="minimize")
    assert latency["trial-0"].worst == 7.0       # to minimize, the worst round is the highest


def test_decide_needs_the_default() -> None:
    with pytest.raises(ValueError, match="default"):
        confirm_stats.decide([_cand("trial-1", BASE)])
    assert confirm_stats.spread([3.0, 9.0, 5.0]) == 6.0
    assert confirm_stats.spread({"a": 1.0}) == 0.0
