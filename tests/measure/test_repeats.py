"""Repeated inputs (load.repeat) and the response cache's figures from the metrics text."""

from __future__ import annotations

import pytest

from tracker.measure.cache_metrics import CacheRates, cache_counters, cache_figures
from tracker.measure.repeats import repeat_order, repeated
from tracker.spec.load_repeat import RepeatSection

METRICS = """# HELP nv_cache_num_hits_per_model Number of cache hits per model
nv_cache_num_hits_per_model{model="a",version="1"} %d
nv_cache_num_hits_per_model{model="b",version="1"} 1
nv_cache_hit_duration_per_model{model="a",version="1"} %d
nv_cache_num_misses_per_model{model="a",version="1"} %d
nv_cache_miss_duration_per_model{model="a",version="1"} %d
nv_cache_num_hits 0
"""


@pytest.mark.parametrize("pct", [0.0, 50.0, 90.0])
def test_a_pass_repeats_the_share_asked_and_sends_every_distinct_request(pct: float) -> None:
    repeat = RepeatSection(pct=pct, hot=8, distinct=992)
    order = repeat_order(1000, repeat)
    assert set(order) == set(range(1000))  # every distinct request once at least
    assert order[:8] == list(range(8))  # each hot request first sent once (a miss)
    repeats = len(order) - 1000
    assert repeats == round(pct / (100 - pct) * 992)
    assert all(i < 8 for i in order if order.count(i) > 1)  # only hot ones repeat
    assert repeat_order(1000, repeat) == order  # seeded


def test_without_repeat_the_payloads_stay_as_they_are() -> None:
    assert repeated(["a", "b"], None) == ["a", "b"]
    once = repeated(["a", "b", "c"], RepeatSection(pct=50, hot=1))
    assert once[0] == "a" and sorted(once) == list("aaabc")  # b, c once; 2 repeats of a


def test_cache_figures_are_the_span_between_two_readings() -> None:
    earlier = cache_counters(METRICS % (10, 100, 10, 1000))
    assert earlier == {"hits": 11.0, "hit_us": 100.0, "misses": 10.0, "miss_us": 1000.0}
    later = cache_counters(METRICS % (40, 400, 20, 2000))
    figures = cache_figures(earlier, later, 2.0)
    assert figures == {"cache_hit_ratio": 75.0, "cache_hits_per_s": 15.0,
                       "cache_misses_per_s": 5.0, "cache_hit_time_us": 10.0,
                       "cache_miss_time_us": 100.0}
    assert cache_figures(later, later, 2.0) == {}  # no lookups: nothing to say
    rates = CacheRates()
    assert rates.update("nv_cpu_utilization 0.5\n") == {}  # a server without a cache
    assert rates.update(METRICS % (1, 1, 1, 1)) == {}  # the first reading
    assert rates.update(METRICS % (3, 3, 1, 1))["cache_hit_ratio"] == 100.0
