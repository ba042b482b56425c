"""The confirmation's plot (tracker/tracking/confirm_plot.py): each pair's ratio to the
default, and the winner's interval after each pair, offline (PNG and HTML)."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest

from tracker.tracking import confirm_plot
from tracker.verdict import stats

RATIOS = [1.61, 1.27, 1.93, 1.44, 1.72, 1.38, 1.55]


def _verdict(ratios: list[float], design: str = "paired") -> stats.Verdict:
    base = stats.Candidate("trial-0", [100.0] * len(ratios), baseline=True,
                           feasible_rounds=len(ratios))
    best = stats.Candidate("trial-3", [100.0 * r for r in ratios],
                           feasible_rounds=len(ratios))
    return replace(stats.decide([base, best]), design=design)


def test_each_pair_s_ratio_and_the_narrowing_interval_are_plotted(tmp_path: Path) -> None:
    v = _verdict(RATIOS)
    files = confirm_plot.ratios(v, tmp_path / "plots", "better: +55% (20 to 99%) in 7 pairs")
    assert set(files) == {"confirm_ratios.png", "confirm_ratios.html"}
    assert files["confirm_ratios.png"].read_bytes()[:4] == b"\x89PNG"
    page = files["confirm_ratios.html"].read_text()
    assert "trial-3: 95% interval after each pair" in page and "pair, in the order measured" in page
    assert all(str(r) in page for r in RATIOS)  # every pair's ratio is a point
    xs, lows, highs = confirm_plot.running_band(v.scored["trial-3"].ratios)
    assert xs[0] == 3 and xs[-1] == len(RATIOS)  # two pairs bound nothing
    assert all(lo <= hi for lo, hi in zip(lows, highs, strict=True))
    assert highs[-1] - lows[-1] < highs[0] - lows[0]  # it narrows as the pairs come in
    imp = v.scored["trial-3"].improvement
    assert imp is not None  # the last band is the verdict's interval, as a ratio
    assert lows[-1] == pytest.approx(1 + imp.low / 100) and highs[-1] == pytest.approx(
        1 + imp.high / 100)


def test_rounds_are_plotted_as_rounds_and_nothing_without_a_ratio(tmp_path: Path) -> None:
    page = confirm_plot.ratios(_verdict(RATIOS, "rounds"), tmp_path)["confirm_ratios.html"]
    assert "round, in the order measured" in page.read_text()
    alone = stats.decide([stats.Candidate("trial-0", [1.0, 2.0], baseline=True),
                          stats.Candidate("trial-3", [None, None])])
    assert confirm_plot.ratios(alone, tmp_path / "none") == {}
    assert confirm_plot.running_band((2.0,)) == ([], [], [])
    assert math.isfinite(confirm_plot.running_band((1.5, 1.6, 1.55))[1][0])
