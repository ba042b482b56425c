"""The statistics of a confirmation: per-configuration intervals, paired improvements, the verdict.

Pure functions on plain numbers (no I/O; imports only :mod:`tracker.verdict.anytime`), so the
rules can be tested with known data and read in one place. docs/tuning.md explains them.

Input: for each configuration, one value per round of the first objective (``None`` where that
round's measurement failed), and the default configuration's values in the same rounds.

- **Every interval is anytime-valid** (:mod:`tracker.verdict.anytime`): the confirmation looks
  after every round and stops when the figures decide, so a fixed-sample interval would
  exclude the truth far more often than its 5%. These 95% intervals hold at every round at
  once.
- **Per configuration**: the median over the rounds is the point estimate; the interval is the
  one of the mean, its low end cut at 0 (throughput and latency are not negative).
- **Improvement over the default, paired by round**: per round the ratio of the configuration
  to the default *in that round* (``x / default`` to maximize, ``default / x`` to minimize),
  so drift that hits a whole round cancels. The point estimate is the median ratio (one round
  that a burst hit hard does not move it), the interval the one of the mean log-ratio:
  ``100 * (median ratio - 1)`` with ``100 * (exp(low or high) - 1)``.
- **Robustness**: the round-to-round coefficient of variation (``s / mean``, percent) and the
  worst round (the lowest to maximize, the highest to minimize).
- **Outcome** (``margin``: the tie margin in percent):

  - ``better``: some eligible configuration's improvement interval lies above 0. The winner is
    the measurably better one with the largest estimate; a configuration whose interval
    overlaps the winner's is *tied* with it (``tied`` when there is one). The one chosen is
    the cheapest among the winner and the tied ones that are measurably better themselves:
    the lowest median p99 (p99 within the margin of the lowest count as equal), then the
    steadiest (lowest CV), then fewer instances, then the larger estimate.
  - ``equivalent``: no configuration is measurably better and every eligible one's interval
    lies below ``+margin``: none beats the default by more than the margin; keep it.
  - ``inconclusive``: neither yet (or nothing eligible): measure more, or keep the default.

  The default configuration is the one chosen unless the outcome is better or tied.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import tracker.verdict.anytime as seq

#: the outcomes (``tracker.verdict``); ``no_better`` is what records before them say
BETTER, TIED, EQUIVALENT, INCONCLUSIVE = "better", "tied", "equivalent", "inconclusive"
DECIDED = (BETTER, TIED, EQUIVALENT)
OLD_NO_BETTER = "no_better"
TIE_MARGIN_PCT = 5.0
#: a configuration whose round-to-round CV is this many times the others' (and at least
#: SWING_FLOOR_PCT) swings "far more" than they do
SWING_RATIO, SWING_FLOOR_PCT = 2.0, 10.0

# two-sided 95%: t(0.975, df) for df = 1..30; beyond that the normal quantile is close enough
_T975 = (12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281,
         2.2010, 2.1788, 2.1604, 2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860,
         2.0796, 2.0739, 2.0687, 2.0639, 2.0595, 2.0555, 2.0518, 2.0484, 2.0452, 2.0423)


def t975(df: int) -> float:
    """The 0.975 quantile of Student's t with ``df`` degrees of freedom (df >= 1)."""
    if df < 1:
        raise ValueError(f"`df >= 1` must hold, but got df={df}")
    return _T975[df - 1] if df <= len(_T975) else 1.96


@dataclass(frozen=True)
class Interval:
    """A point estimate with its 95% interval (the bounds may be infinite: too few rounds)."""

    estimate: float
    low: float
    high: float
    n: int

    def overlaps(self, other: Interval) -> bool:
        return self.low <= other.high and other.low <= self.high

    def holds(self, value: float) -> bool:
        return self.low <= value <= self.high

    @property
    def bounded(self) -> bool:
        return math.isfinite(self.low) and math.isfinite(self.high)


def mean_interval(values: Sequence[float]) -> tuple[float, float, float]:
    """(mean, low, high): the fixed-sample t-interval of the mean, valid only when the number of
    values was fixed in advance (the benchmark's reference measurement); a single value has a
    zero-width one. The confirmation uses :func:`tracker.verdict.anytime.interval`."""
    if not values:
        raise ValueError("no values")
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, mean, mean
    half = t975(len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return mean, mean - half, mean + half


def level(values: Sequence[float]) -> Interval:
    """The median of ``values`` with the anytime-valid 95% interval of their mean (see the
    module doc), its low end cut at 0."""
    _, low, high = seq.interval(values)
    return Interval(statistics.median(values), max(low, 0.0), high, len(values))


def cv_pct(values: Sequence[float]) -> float:
    """Coefficient of variation across rounds in percent (0 for fewer than 2 values)."""
    if len(values) < 2:
        return 0.0
    mean, sd = seq.mean_sd(values)
    return 100.0 * sd / abs(mean) if mean else math.inf


def paired(values: Sequence[float | None],
           base: Sequence[float | None]) -> list[tuple[float, float]]:
    """The rounds where both were measured (and positive), as (value, default) pairs."""
    return [(v, b) for v, b in zip(values, base, strict=True)
            if v is not None and b is not None and v > 0 and b > 0]


def ratio_of_gain(gain: float) -> float:
    """Model Analyzer's relative gain ``(x - r) / mean(x, r)`` (in (-2, 2)) as the ratio
    ``x / r`` it stands for with one model: ``(1 + g/2) / (1 - g/2)``. Several models'
    weighted gain against the default of the same round, put on this scale, is what the
    confirmation of several entry models compares (the default is 1 in every round)."""
    return (1.0 + gain / 2.0) / (1.0 - gain / 2.0)


def gain_of_ratio(ratio: float) -> float:
    """The inverse of :func:`ratio_of_gain`: ``2 (r - 1) / (r + 1)``."""
    if math.isinf(ratio):
        return 2.0 if ratio > 0 else math.nan
    return 2.0 * (ratio - 1.0) / (ratio + 1.0)


def gain_interval(iv: Interval) -> Interval:
    """An interval on the ratio scale as weighted gains (:func:`gain_of_ratio` of each end)."""
    return Interval(gain_of_ratio(iv.estimate), gain_of_ratio(iv.low), gain_of_ratio(iv.high),
                    iv.n)


def log_ratios(values: Sequence[float | None], base: Sequence[float | None],
               direction: str = "maximize") -> list[float]:
    """Per paired round, the log of how much better than the default (positive = better)."""
    return [math.log(v / b) if direction == "maximize" else math.log(b / v)
            for v, b in paired(values, base)]


def improvement(values: Sequence[float | None], base: Sequence[float | None],
                direction: str = "maximize") -> Interval | None:
    """Improvement over the default in percent, paired by round, with its anytime-valid 95%
    interval (of the mean log-ratio). None without a single paired round."""
    logs = log_ratios(values, base, direction)
    if not logs:
        return None
    _, low, high = seq.interval(logs)
    return Interval(100.0 * math.expm1(statistics.median(logs)), _pct(low), _pct(high),
                    len(logs))


def _pct(log_value: float) -> float:
    if log_value == math.inf:
        return math.inf
    return 100.0 * math.expm1(log_value) if log_value > -math.inf else -100.0


@dataclass(frozen=True)
class Candidate:
    """One configuration's rounds as the verdict sees them."""

    key: str                               # e.g. "trial-4"
    values: list[float | None]             # first objective, one per round
    p99: list[float | None] = field(default_factory=list)
    instances: int = 1
    baseline: bool = False
    feasible_rounds: int = 0               # rounds in which it met the constraints


@dataclass(frozen=True)
class Scored:
    key: str
    baseline: bool
    value: Interval | None                 # the first objective over the rounds
    p99: Interval | None
    cv_pct: float
    improvement: Interval | None           # None for the default itself
    eligible: bool                         # measured and feasible in most of its rounds
    instances: int
    worst: float | None = None             # the worst round's value of the first objective
    ratios: tuple[float, ...] = ()         # per paired round, how many times better (> 1)


@dataclass(frozen=True)
class Verdict:
    verdict: str                           # better | tied | equivalent | inconclusive
    chosen: str                            # key of the configuration to deploy
    winner: str | None                     # the best measured (largest estimate)
    tied: list[str]                        # tied with the winner (winner not included)
    scored: dict[str, Scored]
    rounds: int
    margin_pct: float = TIE_MARGIN_PCT
    design: str = "rounds"                 # rounds | paired: what a round is (a pair)
    design_reason: str = ""                # why that design, in words

    @property
    def decided(self) -> bool:
        return self.verdict in DECIDED

    @property
    def keeps_default(self) -> bool:
        return self.verdict not in (BETTER, TIED)

    def rank(self) -> list[str]:
        """Keys, the chosen first, then by improvement estimate (the default last)."""
        rest = sorted((s for s in self.scored.values() if s.key != self.chosen),
                      key=lambda s: (s.baseline, -(s.improvement.estimate
                                                   if s.improvement else -math.inf)))
        return [self.chosen, *(s.key for s in rest)]


def _present(values: Sequence[float | None]) -> list[float]:
    return [v for v in values if v is not None]


def score(candidates: Sequence[Candidate], direction: str = "maximize") -> dict[str, Scored]:
    base = next((c for c in candidates if c.baseline), None)
    if base is None:
        raise ValueError("the default configuration is not among the candidates")
    out = {}
    for c in candidates:
        got = _present(c.values)
        p99 = _present(c.p99)
        imp = None if c.baseline else improvement(c.values, base.values, direction)
        eligible = (not c.baseline and imp is not None
                    and 2 * c.feasible_rounds > len(got) and len(got) > 0)
        worst = (min(got) if direction == "maximize" else max(got)) if got else None
        ratios = () if c.baseline else tuple(
            math.exp(x) for x in log_ratios(c.values, base.values, direction))
        out[c.key] = Scored(c.key, c.baseline, level(got) if got else None,
                            level(p99) if p99 else None, cv_pct(got), imp, eligible,
                            c.instances, worst, ratios)
    return out


def _estimate(s: Scored) -> float:
    return s.improvement.estimate if s.improvement is not None else -math.inf


def decide(candidates: Sequence[Candidate], direction: str = "maximize",
           margin_pct: float = TIE_MARGIN_PCT) -> Verdict:
    """The outcome of the module doc from the candidates' rounds."""
    scored = score(candidates, direction)
    base = next(c.key for c in candidates if c.baseline)
    rounds = max((len(_present(c.values)) for c in candidates), default=0)
    pool = [s for s in scored.values() if s.eligible and s.improvement is not None]
    if not pool:
        return Verdict(INCONCLUSIVE, base, None, [], scored, rounds, margin_pct)

    def best(among: list[Scored]) -> Scored:
        return max(among, key=lambda s: (_estimate(s), -s.instances))

    proven = [s for s in pool if s.improvement is not None and s.improvement.low > 0]
    win = best(proven or pool)
    assert win.improvement is not None
    tied = [s.key for s in pool if s.key != win.key and s.improvement is not None
            and s.improvement.overlaps(win.improvement)]
    if not proven:
        below = all(s.improvement is not None and s.improvement.high < margin_pct for s in pool)
        return Verdict(EQUIVALENT if below else INCONCLUSIVE, base, win.key, tied, scored,
                       rounds, margin_pct)
    choices = [win, *(scored[k] for k in tied
                      if (imp := scored[k].improvement) is not None and imp.low > 0)]
    chosen = cheapest(choices, margin_pct)
    return Verdict(TIED if tied else BETTER, chosen.key, win.key, tied, scored, rounds,
                   margin_pct)


def cheapest(choices: Sequence[Scored], margin_pct: float = TIE_MARGIN_PCT) -> Scored:
    """Among configurations tied on the objective: the lowest median p99 (those within the
    margin of the lowest count as equal), then the steadiest (lowest round-to-round CV), then
    fewer instances, then the larger improvement estimate."""
    def p99(s: Scored) -> float:
        return s.p99.estimate if s.p99 is not None else math.inf

    lowest = min(p99(s) for s in choices)
    fast = [s for s in choices if p99(s) <= lowest * (1 + margin_pct / 100.0)]
    return min(fast, key=lambda s: (s.cv_pct, s.instances, -_estimate(s)))


def still_open(verdict: Verdict) -> list[str]:
    """Keys worth measuring in another round: the default (the pairs need it) and every
    eligible configuration that could still change the outcome: its interval reaches above
    the margin and, once a winner is measurably better, above the winner's low end."""
    win = verdict.scored[verdict.winner].improvement if verdict.winner else None
    floor = verdict.margin_pct
    if win is not None and win.low > 0:
        floor = min(floor, win.low)

    def open_(s: Scored) -> bool:
        return s.eligible and s.improvement is not None and s.improvement.high >= floor

    return [key for key, s in verdict.scored.items() if s.baseline or open_(s)]


def swinging(scored: Mapping[str, Scored]) -> tuple[str, float, float] | None:
    """(key, its CV, the largest CV of the others) of a configuration whose readings swing far
    more than every other's: CV at least SWING_RATIO times theirs and SWING_FLOOR_PCT."""
    measured = [s for s in scored.values() if s.value is not None and s.value.n > 1]
    if len(measured) < 2:
        return None
    top = max(measured, key=lambda s: s.cv_pct)
    others = max(s.cv_pct for s in measured if s is not top)
    if top.cv_pct >= SWING_FLOOR_PCT and top.cv_pct >= SWING_RATIO * others:
        return top.key, top.cv_pct, others
    return None


def more_rounds(verdict: Verdict, candidates: Sequence[Candidate],
                direction: str = "maximize", most: int = 100, lean: float = 0.0) -> int | None:
    """For an undecided verdict: about how many rounds in all would decide it if the best
    configuration's per-round ratios went on spreading as they do (None: not within
    ``most``). ``lean``: standard errors of the mean log-ratio by which the mean may lie
    nearer a decision than its estimate (0: the estimate itself; 1: what is still plausible
    after few rounds, whose mean is uncertain)."""
    base = next(c for c in candidates if c.baseline)
    cand = next((c for c in candidates if c.key == verdict.winner), None)
    if cand is None:
        return None
    logs = log_ratios(cand.values, base.values, direction)
    if len(logs) < 2:
        return None
    mean, sd = seq.mean_sd(logs)
    shift = lean * sd / math.sqrt(len(logs))
    room = max(mean + shift, math.log1p(verdict.margin_pct / 100.0) - (mean - shift))
    return seq.rounds_to_decide(logs, room, most=most)


def spread(values: Mapping[str, float] | Sequence[float]) -> float:
    """max - min (0 for fewer than two values)."""
    vals = list(values.values()) if isinstance(values, Mapping) else list(values)
    return max(vals) - min(vals) if len(vals) > 1 else 0.0
