"""Capacity at the SLA: the highest offered open-loop rate a configuration holds, found by a
search over rates that the sweep drives (``objectives: {perf_capacity: maximize}``).

**A rate holds** (:func:`why_not`) when, at that offered open-loop rate, measured with the
sweep's windows and stability rule: the level is valid (no window over
``load.max_error_pct`` failed requests, the server answered), errors over the measured
windows stay under that bound, the achieved rate is within 2% of the offered one (for
Poisson arrivals and traces also within 3 standard deviations of a Poisson count), the queue
does not grow (requests sent minus requests ended over the windows stays within 2% of those
sent), and every constraint (the SLA) holds at that level (tracker/feasibility.py's rule).

**The search** (:class:`Bisection`, pure; :class:`CapacityPlan` drives it from the sweep) is:

1. a short closed-loop probe at the spec's highest concurrency level: its request rate ``X``
   is about what the configuration serves flat out;
2. the first rate is ``0.85 X``; while rates hold it grows by 1.25x, while none holds it
   shrinks to 0.6x, until a rate that holds lies below one that does not (the bracket);
3. bisection of the bracket until ``(high - low) / low`` is within
   ``load.capacity_tolerance_pct`` (default 5), or ``load.capacity_max_probes`` rates were
   measured (a rate measured twice counts twice), or no rate of at least 1 request/s holds
   (capacity 0).

A rate that does not hold is measured once more at once, and fails only when both readings
fail: on a shared machine one reading's p99 is often broken by a stall of the load
generator or the server (another process took the cores for a tenth of a second), well
below the rate the configuration serves, and one such reading early in the search would
otherwise send it down to 0.6x that rate. A rate holds when one of its readings held.

The capacity is the highest rate that held (``perf_capacity``, requests/s), with the bracket
(``perf_capacity_low``, ``perf_capacity_high``: the lowest rate above it that did not hold,
absent when every rate tried held) and the readings taken (``perf_capacity_probes``); with
the spec's ``capacity`` section, ``replicas`` and ``cost_per_million`` (tracker/search/cost.py).
A configuration is judged at the level of its capacity (:func:`choose`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tracker.errors import MeasurementError
from tracker.feasibility import for_models, judge, named_violations
from tracker.measure.sweep import Probe
from tracker.measure.types import Measurement, SweepLevel, SweepResult
from tracker.metrics import CAPACITY
from tracker.search.cost import deployment
from tracker.search.objective import LevelChoice, Scoring, level_metrics, objective_values

if TYPE_CHECKING:
    from tracker.spec import StudySpec
    from tracker.spec.capacity import CapacitySection
    from tracker.triton.configuration import Configuration

ACHIEVED_PCT = 2.0       # the achieved rate within this percent of the offered one
BACKLOG_PCT = 2.0        # requests sent but not ended, as a percent of those sent
START, GROW, SHRINK = 0.85, 1.25, 0.6
FLOOR_RPS = 1.0
FAIL_READINGS = 2        # a rate fails when this many of its readings failed (none held)


def wanted(spec: StudySpec) -> bool:
    """Whether the study judges configurations by their capacity."""
    return CAPACITY in spec.objectives


@dataclass
class Bisection:
    """The search over rates, on (rate, held) readings only: the planner's contract, tested
    on a synthetic response. :meth:`first` gives the first rate from the closed-loop rate;
    :meth:`next` the next one after :meth:`tell`, or None (``reason`` says why). A rate
    whose only reading failed is asked again before the search moves on (the module doc)."""

    tolerance_pct: float = 5.0
    max_probes: int = 8
    history: list[tuple[float, bool]] = field(default_factory=list)
    reason: str = ""

    def first(self, closed_loop_rps: float) -> float:
        return max(START * closed_loop_rps, FLOOR_RPS)

    def tell(self, rate: float, held: bool) -> None:
        self.history.append((rate, held))

    def verdict(self, rate: float) -> bool | None:
        """Whether ``rate`` holds (one reading held), fails (:data:`FAIL_READINGS` readings
        failed), or is undecided (None: fewer failed readings, or none taken)."""
        readings = [ok for r, ok in self.history if r == rate]
        if any(readings):
            return True
        return False if len(readings) >= FAIL_READINGS else None

    def bracket(self) -> tuple[float | None, float | None]:
        """(highest rate that held, lowest rate above it that did not; a rate with one
        failed reading counts as failed here, the best figure before it is measured again)."""
        low = max((r for r, ok in self.history if ok), default=None)
        high = min((r for r, _ in self.history if self.verdict(r) is not True
                    and (low is None or r > low)), default=None)
        return low, high

    def _again(self) -> float | None:
        """The last rate measured, when its one reading failed."""
        if not self.history or self.history[-1][1]:
            return None
        rate = self.history[-1][0]
        return rate if self.verdict(rate) is None else None

    def next(self) -> float | None:
        spent = len(self.history) >= self.max_probes
        again = self._again()
        if again is not None and not spent:
            return again
        low, high = self.bracket()
        if low is not None and high is not None and (high - low) / low * 100 \
                <= self.tolerance_pct:
            self.reason = (f"capacity bracketed within {self.tolerance_pct:g}%: "
                           f"{low:,.1f} to {high:,.1f} requests/s")
            return None
        if spent:
            self.reason = f"step budget spent: {self.max_probes} readings taken"
            return None
        if low is None:
            rate = SHRINK * (high if high is not None else FLOOR_RPS / SHRINK)
            if rate < FLOOR_RPS:
                self.reason = f"no rate of at least {FLOOR_RPS:g} request/s holds the SLA"
                return None
            return rate
        return GROW * low if high is None else (low + high) / 2


def achieved_rps(m: Measurement) -> float:
    """Requests answered per second over the measured windows."""
    return m.requests / m.duration_s if m.duration_s > 0 else 0.0


def _rate_problem(m: Measurement, max_error_pct: float, bursty: bool) -> str | None:
    offered = float(m.request_rate or 0.0)
    got, ended = achieved_rps(m), m.requests + m.errors
    expected = offered * m.duration_s
    slack = max(ACHIEVED_PCT / 100 * expected, 3 * math.sqrt(expected) if bursty else 0.0, 2.0)
    if ended and 100 * m.errors / ended > max_error_pct:
        return f"{m.errors} of {ended} requests failed (> {max_error_pct:g}%)"
    if got * m.duration_s < expected - slack:
        return f"achieved {got:,.1f}/s of {offered:,.1f}/s offered"
    if m.sent - ended > max(BACKLOG_PCT / 100 * m.sent, 2):
        return f"the queue grows: {m.sent - ended} of {m.sent} requests sent did not end"
    return None


def why_not(level: SweepLevel, constraints: Mapping[str, object] | None,
            max_error_pct: float, bursty: bool = False) -> str | None:
    """Why an open-loop level does not hold (the module doc's rule), None when it does;
    ``constraints`` as the spec gives them, ``bursty``: Poisson arrivals or a trace."""
    for name, m in level.measurements.items():
        if not m.valid:
            return f"{name or m.level}: {m.invalid_reason}"
        why = _rate_problem(m, max_error_pct, bursty)
        if why is not None:
            return why
    names = list(level.measurements)
    broken = [c.words() if c.value is not None else f"{c.metric} not measured"
              for c in judge(level.metrics(), for_models(constraints, names))
              if c.violation > 0]
    return "; ".join(broken) if broken else None


def _open_loop(level: SweepLevel) -> float | None:
    rates = [m.request_rate for m in level.measurements.values()]
    return None if any(r is None for r in rates) else float(rates[0] or 0.0)


@dataclass(frozen=True)
class CapacitySettings:
    """What the search needs of the spec."""

    constraints: Mapping[str, Any] | None
    max_error_pct: float = 1.0
    bursty: bool = False
    tolerance_pct: float = 5.0
    max_probes: int = 8
    probe_concurrency: int = 16
    deploy: CapacitySection | None = None   # the spec's ``capacity``: replicas and cost
    batch_size: int = 1

    @classmethod
    def of(cls, spec: StudySpec) -> CapacitySettings:
        load = spec.load
        return cls(spec.constraints, load.max_error_pct,
                   load.arrival == "poisson" or load.trace is not None,
                   load.capacity_tolerance_pct, load.capacity_max_probes,
                   max(load.concurrency_levels()), spec.capacity, load.batch_size)


class CapacityPlan:
    """The sweep's level planner (tracker.measure.sweep.LevelPlanner) for one configuration:
    the closed-loop probe, then the rates :class:`Bisection` asks for."""

    def __init__(self, settings: CapacitySettings) -> None:
        self.settings = settings
        self.search = Bisection(settings.tolerance_pct, settings.max_probes)
        self.reason = "capacity search not started"

    def next(self, done: Sequence[SweepLevel]) -> int | Probe | None:
        s = self.settings
        if not done:
            return Probe(concurrency=s.probe_concurrency)
        last = done[-1]
        rate = _open_loop(last)
        if rate is None:  # the closed-loop probe
            if not last.valid:
                self.reason = f"the closed-loop probe failed: {why_not(last, None, 100.0)}"
                return None
            first = min(achieved_rps(m) for m in last.measurements.values())
            return Probe(request_rate=round(self.search.first(first), 1))
        self.search.tell(rate, why_not(last, s.constraints, s.max_error_pct, s.bursty) is None)
        following = self.search.next()
        if following is None:
            self.reason = self.search.reason
            return None
        return Probe(request_rate=round(following, 1))


def choose(result: SweepResult, settings: CapacitySettings, objectives: Mapping[str, str],
           how: Scoring) -> LevelChoice:
    """The level a configuration is judged by: the highest open-loop rate that held, with the
    capacity figures of the module doc (no rate held: capacity 0, judged at its lowest
    rate, or at the closed-loop probe when no rate was measured)."""
    search = Bisection(settings.tolerance_pct, settings.max_probes)
    rated: list[tuple[int, float]] = []
    for i, level in enumerate(result.levels):
        rate = _open_loop(level)
        if rate is not None:
            rated.append((i, rate))
            search.tell(rate, why_not(level, settings.constraints, settings.max_error_pct,
                                      settings.bursty) is None)
    if not rated and not all(level.valid for level in result.levels):
        raise MeasurementError(f"the capacity search measured no rate: {result.stop_reason}")
    low, high = search.bracket()
    held = [(i, r) for (i, r), (_, ok) in zip(rated, search.history, strict=True) if ok]
    index = (max(held, key=lambda x: x[1])[0] if held
             else min(rated, key=lambda x: x[1])[0] if rated else 0)
    level = result.levels[index]
    metrics = level_metrics(level, how.name)
    metrics.update({CAPACITY: low or 0.0, "perf_capacity_low": low or 0.0,
                    "perf_capacity_probes": float(len(rated))})
    if high is not None:
        metrics["perf_capacity_high"] = high
    metrics.update(deployment(settings.deploy, low or 0.0, settings.batch_size))
    violations = named_violations(metrics, for_models(settings.constraints, how.entries,
                                                      how.name))
    values = objective_values(metrics, objectives)
    return LevelChoice(index, 0, metrics, values, violations, stable=level.stable)


def problems(spec: StudySpec, conf: Configuration) -> list[str]:
    """Why ``tracker check`` refuses a capacity study (one line each); [] when it can run."""
    if not wanted(spec):
        return []
    out: list[str] = []  # several entry models: the spec itself asks for weighted_gain
    if conf.entry_info.config.HasField("sequence_batching"):
        out.append(f"objectives: {CAPACITY} needs requests that arrive on their own, but "
                   f"model {conf.entry!r} is stateful: its sequences at a rate wait for a free "
                   "sequence slot (the load is not open loop)")
    if "concurrency" in spec.search.space:
        out.append(f"search.space.concurrency: a capacity search sets the load itself; "
                   f"remove the knob (objective {CAPACITY})")
    return out
