"""The statistics of a confirmation: per-configuration intervals, paired improvements, the verdict.

Pure functions on plain numbers (no I/O, imports nothing from the package), so the rules can be
tested with known data and read in one place. docs/tuning.md explains them for users.

Input: for each configuration, one value per round of the first objective (``None`` where that
round's measurement failed), and the default configuration's values in the same rounds.

- **Per configuration**: the median over the rounds is the point estimate; its 95% interval is
  the Student t-interval of the mean (``mean +- t(0.975, n-1) * s / sqrt(n)``). With 3 to 5
  rounds a distribution-free interval for the median cannot reach 95% (the widest one, min to
  max, covers 75% with 3 rounds and 94% with 5), so the t-interval is the honest choice; it
  assumes roughly symmetric round-to-round noise, which is what a shared machine gives. Its
  low end is cut at 0 (throughput and latency are not negative).
- **Improvement over the default, paired by round**: per round the ratio of the configuration
  to the default *in that round* (``x / default`` to maximize, ``default / x`` to minimize),
  so drift that hits a whole round cancels. As for a configuration, the point estimate is the
  median (of the per-round ratios: one round that a burst on the machine hit hard does not
  move it) and the 95% interval is the t-interval of the mean log-ratio, in percent:
  ``100 * (median ratio - 1)`` with ``100 * (exp(mean +- h) - 1)``.
- **Noise**: the coefficient of variation across rounds, ``s / mean``, in percent.
- **Verdict**: a configuration is *measurably better* when its improvement interval lies
  above 0. The winner is the measurably better eligible configuration with the largest
  improvement estimate; a configuration whose improvement interval overlaps the winner's is
  *tied* with it (whether or not it is itself measurably better: its estimate may even be
  larger). If no configuration is measurably better: ``no_better`` (the winner named is then
  the one with the largest estimate) and the default configuration is kept. Otherwise the
  chosen configuration is the cheapest among the winner and the tied configurations that are
  measurably better themselves (lower median p99, then fewer instances, then the better
  estimate); the verdict is ``tied`` when any configuration is tied with the winner, else
  ``better``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

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
    """A point estimate with its 95% interval (``low == high == estimate`` from one value)."""

    estimate: float
    low: float
    high: float
    n: int

    def overlaps(self, other: Interval) -> bool:
        return self.low <= other.high and other.low <= self.high

    def holds(self, value: float) -> bool:
        return self.low <= value <= self.high


def mean_interval(values: Sequence[float]) -> tuple[float, float, float]:
    """(mean, low, high): the t-interval of the mean; a single value has a zero-width one."""
    if not values:
        raise ValueError("no values")
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, mean, mean
    half = t975(len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return mean, mean - half, mean + half


def level(values: Sequence[float]) -> Interval:
    """The median of ``values`` with the 95% t-interval of their mean (see the module doc).
    What it is used for (throughput, latency) cannot be negative, so neither can the
    interval's low end: a wide interval from few rounds is cut at 0."""
    _, low, high = mean_interval(values)
    return Interval(statistics.median(values), max(low, 0.0), high, len(values))


def cv_pct(values: Sequence[float]) -> float:
    """Coefficient of variation across rounds in percent (0 for fewer than 2 values)."""
    if len(values) < 2:
        return 0.0
    mean = statistics.fmean(values)
    return 100.0 * statistics.stdev(values) / abs(mean) if mean else math.inf


def paired(values: Sequence[float | None],
           base: Sequence[float | None]) -> list[tuple[float, float]]:
    """The rounds where both were measured (and positive), as (value, default) pairs."""
    return [(v, b) for v, b in zip(values, base, strict=True)
            if v is not None and b is not None and v > 0 and b > 0]


def improvement(values: Sequence[float | None], base: Sequence[float | None],
                direction: str = "maximize") -> Interval | None:
    """Improvement over the default in percent, paired by round, with its 95% interval
    (t-interval on the per-round log-ratios). None without a single paired round."""
    pairs = paired(values, base)
    if not pairs:
        return None
    logs = [math.log(v / b) if direction == "maximize" else math.log(b / v) for v, b in pairs]
    _, low, high = mean_interval(logs)
    return Interval(100.0 * math.expm1(statistics.median(logs)), 100.0 * math.expm1(low),
                    100.0 * math.expm1(high), len(logs))


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


@dataclass(frozen=True)
class Verdict:
    verdict: str                           # better | tied | no_better
    chosen: str                            # key of the configuration to deploy
    winner: str | None                     # best improvement estimate among the eligible
    tied: list[str]                        # tied with the winner (winner not included)
    scored: dict[str, Scored]
    rounds: int

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
        out[c.key] = Scored(c.key, c.baseline, level(got) if got else None,
                            level(p99) if p99 else None, cv_pct(got), imp, eligible,
                            c.instances)
    return out


def decide(candidates: Sequence[Candidate], direction: str = "maximize") -> Verdict:
    """The verdict of the module doc from the candidates' rounds."""
    scored = score(candidates, direction)
    base = next(c.key for c in candidates if c.baseline)
    rounds = max((len(_present(c.values)) for c in candidates), default=0)
    pool = [s for s in scored.values() if s.eligible and s.improvement is not None]
    if not pool:
        return Verdict("no_better", base, None, [], scored, rounds)

    def best(among: list[Scored]) -> Scored:
        return max(among, key=lambda s: (s.improvement.estimate if s.improvement else -math.inf,
                                         -s.instances))

    proven = [s for s in pool if s.improvement is not None and s.improvement.low > 0]
    win = best(proven or pool)
    assert win.improvement is not None
    tied = [s.key for s in pool if s.key != win.key and s.improvement is not None
            and s.improvement.overlaps(win.improvement)]
    if not proven:
        return Verdict("no_better", base, win.key, tied, scored, rounds)
    choices = [win, *(scored[k] for k in tied
                      if (imp := scored[k].improvement) is not None and imp.low > 0)]
    chosen = min(choices, key=lambda s: (s.p99.estimate if s.p99 else math.inf, s.instances,
                                         -(s.improvement.estimate if s.improvement else 0.0)))
    return Verdict("tied" if tied else "better", chosen.key, win.key, tied, scored, rounds)


def separated(verdict: Verdict) -> bool:
    """The winner is better than the default and its interval overlaps no other's: more rounds
    would not change the decision."""
    return verdict.verdict == "better"


def still_open(verdict: Verdict) -> list[str]:
    """Keys worth measuring again: the default (the pairs need it), the winner and every
    configuration whose interval still reaches the winner's (tied or not yet decided)."""
    if verdict.winner is None:
        return list(verdict.scored)
    win = verdict.scored[verdict.winner].improvement
    def reaches(s: Scored) -> bool:
        return (s.eligible and s.improvement is not None and win is not None
                and s.improvement.high >= win.low)

    return [key for key, s in verdict.scored.items()
            if s.baseline or key == verdict.winner or win is None or reaches(s)]


def spread(values: Mapping[str, float] | Sequence[float]) -> float:
    """max - min (0 for fewer than two values)."""
    vals = list(values.values()) if isinstance(values, Mapping) else list(values)
    return max(vals) - min(vals) if len(vals) > 1 else 0.0
