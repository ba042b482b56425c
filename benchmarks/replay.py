"""A recorded landscape and the searches replayed on it (used by search_efficiency.py).

A landscape maps every point (instance count, max_batch_size, concurrency) of a space to what
the tuner measured there. A search pays for a point the first time it asks for it (one
measurement, and the seconds that measurement took when it was recorded); asking again is
free, as both the tuner and Model Analyzer reuse a result. :class:`Budget` counts, and notes
when the best feasible throughput found first reaches each target share of the landscape's
best feasible throughput.
"""

from __future__ import annotations

import csv
import math
import random
import statistics
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna

from tracker.trial_record import Attr

Key = tuple[int, int, int]          # (instance_group.count, max_batch_size, concurrency)
TARGETS = (0.95, 0.98)


@dataclass(frozen=True)
class Point:
    throughput: float
    p99_ms: float
    stable: bool
    seconds: float
    client_limited: bool


@dataclass
class Landscape:
    table: dict[Key, Point]
    p99_max: float
    header: list[str] = field(default_factory=list)
    passes: dict[Key, list[Point]] = field(default_factory=dict)

    @classmethod
    def load(cls, paths: list[Path], p99_max: float) -> Landscape:
        """One landscape from one or more recordings of the same points: a point's
        throughput, p99 and seconds are the mean over the recordings (stable: in all;
        client-limited: in any); an invalid level counts as zero throughput."""
        header: list[str] = []
        passes: dict[Key, list[Point]] = {}
        for path in paths:
            text = path.read_text().splitlines()
            header += [f"{path.name}: {ln[1:].strip()}" for ln in text if ln.startswith("#")]
            for row in csv.DictReader(ln for ln in text if not ln.startswith("#")):
                key = (int(row["instance_group.count"]), int(row["max_batch_size"]),
                       int(row["concurrency"]))
                valid = row["valid"] == "true" and row["perf_latency_p99"] != ""
                passes.setdefault(key, []).append(Point(
                    float(row["perf_throughput"]) if valid else 0.0,
                    float(row["perf_latency_p99"]) if valid else math.inf,
                    row["stable"] == "true", float(row["measurement_s"]),
                    row["client_limited"] == "true"))
        table = {k: Point(statistics.fmean(p.throughput for p in ps),
                          statistics.fmean(p.p99_ms for p in ps),
                          all(p.stable for p in ps), statistics.fmean(p.seconds for p in ps),
                          any(p.client_limited for p in ps))
                 for k, ps in passes.items()}
        land = cls(table, p99_max, header)
        land.passes = passes
        return land

    def write(self, path: Path) -> None:
        """The (averaged) landscape in the recorder's CSV columns (for ma_driver.py)."""
        with path.open("w", newline="") as fh:
            writer = csv.writer(fh, lineterminator="\n")
            writer.writerow(["instance_group.count", "max_batch_size", "concurrency",
                             "perf_throughput", "perf_latency_p99", "stable", "valid",
                             "measurement_s", "client_limited"])
            for key, p in sorted(self.table.items()):
                ok = p.throughput > 0 and math.isfinite(p.p99_ms)
                writer.writerow([*key, p.throughput, p.p99_ms if ok else "",
                                 str(p.stable).lower(), str(ok).lower(), p.seconds,
                                 str(p.client_limited).lower()])

    def pass_spread(self) -> float | None:
        """Median relative difference in throughput between two recordings of a point."""
        diffs = [abs(ps[0].throughput - ps[1].throughput) / max(ps[0].throughput,
                                                                ps[1].throughput)
                 for ps in self.passes.values() if len(ps) >= 2 and ps[0].throughput > 0
                 and ps[1].throughput > 0]
        return statistics.median(diffs) if diffs else None

    def point(self, key: Key) -> Point | None:
        """The recorded point, or for a concurrency between two recorded ones (Model
        Analyzer's binary search) throughput and p99 interpolated linearly in log2."""
        if key in self.table:
            return self.table[key]
        count, mbs, conc = key
        below = [c for (n, b, c) in self.table if (n, b) == (count, mbs) and c < conc]
        above = [c for (n, b, c) in self.table if (n, b) == (count, mbs) and c > conc]
        if not below or not above:
            return None
        lo, hi = self.table[(count, mbs, max(below))], self.table[(count, mbs, min(above))]
        w = (math.log2(conc) - math.log2(max(below))) / (math.log2(min(above))
                                                         - math.log2(max(below)))
        return Point(lo.throughput + w * (hi.throughput - lo.throughput),
                     lo.p99_ms + w * (hi.p99_ms - lo.p99_ms), lo.stable and hi.stable,
                     (lo.seconds + hi.seconds) / 2, lo.client_limited or hi.client_limited)

    def feasible(self, key: Key) -> bool:
        p = self.point(key)
        return p is not None and p.throughput > 0 and p.p99_ms <= self.p99_max

    @property
    def best(self) -> float:
        return max(p.throughput for k, p in self.table.items() if self.feasible(k))

    @property
    def best_key(self) -> Key:
        return max((k for k in self.table if self.feasible(k)),
                   key=lambda k: self.table[k].throughput)

    def axes(self) -> tuple[list[int], list[int], list[int]]:
        return (sorted({k[0] for k in self.table}), sorted({k[1] for k in self.table}),
                sorted({k[2] for k in self.table}))

    @property
    def seconds(self) -> float:
        return sum(p.seconds for p in self.table.values())

    def within(self, share: float) -> int:
        """How many points are feasible and within ``share`` of the best."""
        return sum(1 for k, p in self.table.items()
                   if self.feasible(k) and p.throughput >= share * self.best)


class Budget:
    """What one search run has paid, and when it first reached each target."""

    def __init__(self, land: Landscape) -> None:
        self.land = land
        self.best = land.best
        self.measured: dict[Key, Point] = {}
        self.seconds = 0.0
        self.found = -math.inf
        self.reached: dict[float, tuple[int, float]] = {}
        self.trace: list[float] = []    # best feasible found after each measurement

    def measure(self, key: Key) -> Point:
        point = self.land.point(key)
        if point is None:
            raise KeyError(f"no recorded point near {key}")
        if key not in self.measured:
            self.measured[key] = point
            self.seconds += point.seconds
            if self.land.feasible(key):
                self.found = max(self.found, point.throughput)
            self.trace.append(max(self.found, 0.0))
            for t in TARGETS:
                if t not in self.reached and self.found >= t * self.best:
                    self.reached[t] = (len(self.measured), self.seconds)
        return point

    @property
    def done(self) -> bool:
        return len(self.reached) == len(TARGETS) or len(self.measured) >= len(self.land.table)

    def end(self) -> tuple[int, float]:
        """(measurements made, best feasible throughput found as a share of the best)."""
        return len(self.measured), max(self.found, 0.0) / self.best

    def found_after(self, n: int) -> float:
        """The best feasible throughput found within the first ``n`` measurements, as a
        share of the best (a run that stopped earlier keeps its last value)."""
        if not self.trace or n < 1:
            return 0.0
        return self.trace[min(n, len(self.trace)) - 1] / self.best

    def result(self) -> dict[float, tuple[int, float, bool]]:
        """Per target: (measurements, seconds, reached); a search that never got there
        counts as the whole space (brute force)."""
        whole = (len(self.land.table), self.land.seconds)
        return {t: (*self.reached.get(t, whole), t in self.reached) for t in TARGETS}


# ---- peers that need no Optuna study -------------------------------------------------------

def brute(land: Landscape, budget: Budget, seed: int) -> None:
    """Every point in Model Analyzer's brute-force order: instance count, then
    max_batch_size, then concurrency, ascending."""
    for key in sorted(land.table):
        budget.measure(key)
        if budget.done:
            return


def random_points(land: Landscape, budget: Budget, seed: int) -> None:
    """Points of the space drawn uniformly, without repeats."""
    keys = sorted(land.table)
    random.Random(seed).shuffle(keys)
    for key in keys:
        budget.measure(key)
        if budget.done:
            return


def replay_points(points: Iterable[Iterable[int]]) -> Callable[[Landscape, Budget, int], None]:
    """A search recorded elsewhere (Model Analyzer's generators): its points, in order."""
    asked = [tuple(p) for p in points]

    def run(land: Landscape, budget: Budget, seed: int) -> None:
        for key in asked:
            if land.point(key) is not None:  # type: ignore[arg-type]
                budget.measure(key)  # type: ignore[arg-type]
            if budget.done:
                return
    return run


# ---- ours: the tuner's study, answered from the landscape ----------------------------------

@dataclass
class Warm:
    """The earlier study a warm start reuses (its trials as MLflow holds them), and the warm
    start's setup: ``limit`` remembered configurations at most, ``gate`` (False: all queued at
    once, not one at a time while each holds up), ``hint`` (False: a remembered trial's sweep
    starts where a cold one would, not at its earlier level)."""

    trials: list[Any]
    limit: int = 3                 # tracker.search.warm_start.MAX_REMEMBERED
    gate: bool = True
    hint: bool = True

    def plan(self, dists: Mapping[str, Any], default: Mapping[str, Any]) -> Any:
        from tracker.search.warm_start import PlanInputs, plan

        return plan("earlier", "the earlier study", self.trials,
                    PlanInputs(dists, default, {"perf_throughput": "maximize"}, self.limit))


def earlier_trials(study: optuna.Study) -> list[Any]:
    """A finished replayed study's trials as a later warm start reads them from MLflow
    (tracker.tracking.earlier.EarlierTrial: params as strings, the headline metric)."""
    from tracker.tracking.earlier import EarlierTrial
    from tracker.trial_record import TrialRecord

    out = []
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
        record = TrialRecord.of(t)
        if record.measurements == 0 and not record.baseline:
            continue  # a repeat: MLflow's duplicate_of runs are not read back
        out.append(EarlierTrial(t.number, f"run{t.number}", {k: str(v) for k, v in
                                                               t.params.items()},
                                {"perf_throughput": float(t.values[0])}, bool(record.feasible),
                                record.baseline,
                                None if record.concurrency is None else int(record.concurrency)))
    return out


class BestAtLevelPruner(optuna.pruners.BasePruner):
    """Ablation (not in the tuner): stop a trial's climb when its throughput at a level is
    below the best completed feasible trial's throughput at that same level, by more than
    ``margin`` (a share)."""

    def __init__(self, margin: float = 0.0) -> None:
        self.margin = margin

    def prune(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> bool:
        step = trial.last_step
        if step is None:
            return False
        done = [t for t in study.get_trials(deepcopy=False,
                                            states=(optuna.trial.TrialState.COMPLETE,))
                if t.values is not None and all(v <= 0 for v in t.constraints.values())]
        if not done:
            return False
        best = max(done, key=lambda t: t.values[0])
        theirs = best.intermediate_values.get(step)
        return theirs is not None and trial.intermediate_values[step] < theirs * (1 - self.margin)


@dataclass
class Ours:
    """One setup of the tuner's search. ``ordered``: "none" (the tuner: listed choices are
    categories), "batch" (max_batch_size as an ordered integer, its index in the ascending
    list) or "both" (the instance count too); ``startup``: TPE's random start-up trials;
    ``guess``: start each
    sweep where the tuner's ``search.sweep: guided`` does (tracker.search.sweep_plan.
    start_index: the best feasible trial's level, Model Analyzer's formula before there is
    one) instead of the lowest level; ``incumbent``: False starts every sweep at the formula
    (the setup before the best trial's level was used); ``prune``: BestAtLevelPruner's
    margin (None: no pruning, as the tuner runs). ``warm``: the earlier study a warm start
    starts from (tracker.search.warm_start, as ``search.warm_start`` runs it); ``until_target``:
    False runs all ``max_trials`` distinct configurations (an earlier study, whole)."""

    startup: int = 1               # tracker.search.optuna_study.TPE_STARTUP_TRIALS
    ordered: str = "none"
    guess: bool = True
    incumbent: bool = True
    prune: float | None = None
    max_trials: int = 200
    warm: Warm | None = None
    until_target: bool = True

    def __call__(self, land: Landscape, budget: Budget, seed: int) -> None:
        from tracker.feasibility import constraint_keys
        from tracker.measure.types import Measurement, SweepLevel
        from tracker.search.objective import Scoring, pick_best_level
        from tracker.search.optuna_study import make_sampler
        from tracker.search.sweep_plan import LevelPlan, incumbent_level, start_index
        from tracker.trial_record import TrialRecord, write_measured
        from tracker.tuning.trial import suggest

        counts, batches, levels = land.axes()
        constraints = {"perf_latency_p99": {"max": land.p99_max}}
        objectives = {"perf_throughput": "maximize"}
        dists = self.distributions(counts, batches)
        pruner = (optuna.pruners.NopPruner() if self.prune is None
                  else BestAtLevelPruner(self.prune))  # an ablation: not in the tuner
        study = optuna.create_study(direction="maximize", pruner=pruner, sampler=make_sampler(
            "tpe", seed=seed, n_objectives=1, distributions=dists, n_startup_trials=self.startup))
        default = {"instance_group.count": 1, "max_batch_size": 4}
        study.enqueue_trial(self.encode(default), user_attrs={Attr.BASELINE: True})
        warm = self.warm.plan(dists, self.encode(default)) if self.warm else None
        self._follow(study, warm)
        told: dict[tuple[int, int], tuple[list[float], dict[str, float], int]] = {}
        repeats = 0
        for _ in range(self.max_trials * (1 if self.until_target else 10)):  # repeats too
            trial = study.ask()
            params = self.decode({n: suggest(trial, n, d) for n, d in dists.items()})
            cfg = (int(params["instance_group.count"]), int(params["max_batch_size"]))
            if cfg in told:  # a repeated configuration reuses its result
                repeats += 1
                if repeats >= 40:
                    return  # the sampler keeps proposing what it has measured
                values, cons, judged = told[cfg]
                write_measured(trial, cons, feasible=all(v <= 0 for v in cons.values()),
                               concurrency=judged, metrics={}, measurements=0)
                study.tell(trial, values)
                self._follow(study, warm)
                continue
            repeats = 0
            incumbent = incumbent_level(study) if self.incumbent else None
            remembered = TrialRecord.of(trial).warm_level if self.warm and self.warm.hint else None
            start = (start_index(levels, params, default, incumbent, remembered)
                     if self.guess else 0)
            plan = LevelPlan(levels, start, constraints)
            done: list[SweepLevel] = []
            while (index := plan.next(done)) is not None:  # as tracker.measure.sweep runs it
                level = levels[index]
                p = budget.measure((*cfg, level))
                m = Measurement(concurrency=level, throughput=p.throughput,
                                latency_p99_ms=p.p99_ms if math.isfinite(p.p99_ms) else None,
                                stable=p.stable, valid=p.throughput > 0,
                                duration_s=p.seconds)
                done.append(SweepLevel({"m": m}, index))
                if self.prune is not None and p.throughput > 0 and land.feasible((*cfg, level)):
                    trial.report(m.throughput, step=level)
                    if trial.should_prune():
                        plan.stop(f"pruned at {m.level}")
                if budget.done and self.until_target:
                    return
            choice = pick_best_level(done, constraints, objectives,
                                     Scoring(["m"], lambda _entry, metric: metric))
            cons = {k: choice.violations[k] for k in constraint_keys(constraints)}
            write_measured(trial, cons, feasible=choice.feasible, concurrency=choice.concurrency,
                           metrics=choice.metrics, measurements=len(done))
            study.tell(trial, choice.values)
            told[cfg] = (choice.values, cons, choice.concurrency)
            self.study = study
            if len(told) >= len(counts) * len(batches) or (
                    not self.until_target and len(told) >= self.max_trials):
                return  # every configuration measured, or the earlier study's budget
            self._follow(study, warm)

    def _follow(self, study: optuna.Study, warm: Any) -> None:
        """The warm start's next remembered configuration (as the tuner's loop queues it)."""
        if warm is None:
            return
        from tracker.search.warm_start import enqueue_next

        if self.warm is not None and not self.warm.gate:  # ablation: the whole queue at once
            for r in warm.queue:
                study.enqueue_trial(dict(r.params), user_attrs={
                    Attr.WARM_START: r.key, **({Attr.WARM_LEVEL: r.level} if r.level else {})})
            warm.queue.clear()
            return
        enqueue_next(study, warm, "maximize")

    def distributions(self, counts: list[int], batches: list[int]
                      ) -> dict[str, optuna.distributions.BaseDistribution]:
        """As tracker.search.space.distributions builds them; with ``ordered`` some knobs
        as ordered integers (the index into the ascending list)."""
        from tracker.search.space import distributions

        self._axes = {"instance_group.count": counts, "max_batch_size": batches}
        dists = distributions(dict(self._axes))  # type: ignore[arg-type]
        for k in self._encoded:
            dists[k] = optuna.distributions.IntDistribution(0, len(self._axes[k]) - 1)
        return dists

    @property
    def _encoded(self) -> tuple[str, ...]:
        return {"both": ("instance_group.count", "max_batch_size"),
                "batch": ("max_batch_size",)}.get(str(self.ordered), ())

    def encode(self, params: Mapping[str, Any]) -> dict[str, Any]:
        return {k: self._axes[k].index(v) if k in self._encoded else v
                for k, v in params.items()}

    def decode(self, params: Mapping[str, Any]) -> dict[str, Any]:
        return {k: self._axes[k][int(v)] if k in self._encoded else v
                for k, v in params.items()}
