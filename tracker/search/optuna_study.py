"""The Optuna study: storage, sampler, the baseline trial, the budget, duplicates, patience.

One study per (storage, study name). ``load_if_exists`` makes a rerun of the same command
resume it. What a trial leaves on the study, besides params and values, is kept in its user
attributes (names in :class:`Attr`) so that the study alone can rebuild the report.

Budget rule (docs/tuning.md; search/workers.py enforces it across workers): ``n_trials`` is
the number of distinct configurations the study should measure: a COMPLETE trial that
repeats an earlier configuration reuses its result and does not count (the sampler is asked
again; the runner stops once as many repeats as ``n_trials``, at least 10, were proposed,
and when every configuration of a finite space was tried). FAIL trials (Triton refused the
config, the measurement failed, Ctrl-C) do not count; the runner stops a study whose failures
reach ``n_trials``.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.samplers import BaseSampler, GridSampler, NSGAIISampler, RandomSampler, TPESampler
from optuna.trial import FrozenTrial, TrialState

from tracker.errors import StudyError
from tracker.samplers import SAMPLERS
from tracker.search.objective import better
from tracker.search.space import doublings
from tracker.trial_record import Attr
from tracker.triton import sequence

# TPE setup, chosen with benchmarks/search_efficiency.py (docs/tuning.md): one random start-up
# trial after the default config, and more EI candidates than Optuna's default, suit budgets of
# 10-40 trials. On the Model Analyzer-shaped 440-point landscape (p99 <= 60 ms, 20 seeds) one
# start-up trial reached 98% of the best in a median 35.5 measurements, three in 37.5, ten in
# 45.5 (on its second recording alone at 40 ms: 56, 76.5, 94); on the earlier 105-point
# landscape three beat Optuna's ten. The candidate count was within the noise there.
TPE_STARTUP_TRIALS = 1
TPE_EI_CANDIDATES = 64
NSGA2_POPULATION = 6
GRID_LIMIT = 100_000


# ---- storage -------------------------------------------------------------------------------

def default_storage(tracking_uri: str, cwd: Path | None = None) -> str:
    """sqlite ``optuna.db`` beside the MLflow sqlite database, else in the working folder."""
    prefix = "sqlite:///"
    if tracking_uri.startswith(prefix) and tracking_uri != prefix + ":memory:":
        db = Path(tracking_uri[len(prefix):])
        if not db.is_absolute():
            db = (cwd or Path.cwd()) / db
        return prefix + str(db.parent / "optuna.db")
    return prefix + str((cwd or Path.cwd()) / "optuna.db")


# ---- samplers ------------------------------------------------------------------------------

class _AskTellGridSampler(GridSampler):
    """GridSampler without its ``study.stop()`` call, which only works inside
    ``study.optimize``; the runner stops by itself when the space is exhausted.

    An enqueued trial (the default configuration) counts as the grid point its values are
    (unless they only approximate it, ``exact_params``): Optuna's GridSampler gives a trial of
    number k < the grid's size point k of its (seeded, shuffled) list and counts only the
    trials it placed itself, so the default's point (``first``) is moved to place 0 and no
    later trial repeats it."""

    def __init__(self, search_space: Mapping[str, Sequence[Any]], seed: int | None = None,
                 first: Mapping[str, Any] | None = None) -> None:
        super().__init__(search_space, seed=seed)
        point = self._point_of(first) if first else None
        if point:  # None: not a point of the grid; 0: already first
            self._all_grids.insert(0, self._all_grids.pop(point))

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        fixed = trial.system_attrs.get("fixed_params")
        approximated = Attr.EXACT_PARAMS in trial.user_attrs  # a default the grid only nears
        if isinstance(fixed, dict) and "grid_id" not in trial.system_attrs and not approximated:
            point = self._point_of(fixed)
            if point is not None:
                study._storage.set_trial_system_attr(trial._trial_id, "search_space",
                                                     self._search_space)
                study._storage.set_trial_system_attr(trial._trial_id, "grid_id", point)
        super().before_trial(study, trial)

    def _point_of(self, params: Mapping[str, Any]) -> int | None:
        """The grid id of ``params`` (None when they are not a point of the grid)."""
        if set(params) != set(self._param_names):
            return None
        want = [params[name] for name in self._param_names]
        return next((i for i, grid in enumerate(self._all_grids)
                     if all(_same(g, w) for g, w in zip(grid, want, strict=True))), None)

    def after_trial(self, study: optuna.Study, trial: FrozenTrial, state: TrialState,
                    values: Sequence[float] | None) -> None:
        return None


def grid_of(distributions: Mapping[str, BaseDistribution]) -> dict[str, list[Any]]:
    """Every value of each discrete distribution (StudyError for a continuous one)."""
    grid: dict[str, list[Any]] = {}
    for name, dist in distributions.items():
        if isinstance(dist, CategoricalDistribution):
            grid[name] = list(dist.choices)
        elif isinstance(dist, IntDistribution) and not dist.log:
            grid[name] = list(range(dist.low, dist.high + 1, dist.step))
        elif isinstance(dist, FloatDistribution) and dist.step is not None and not dist.log:
            n = round((dist.high - dist.low) / dist.step)
            grid[name] = [round(dist.low + i * dist.step, 12) for i in range(n + 1)]
        elif isinstance(dist, IntDistribution):  # log: the same doublings `tracker check` counts
            grid[name] = list(doublings(dist.low, dist.high))
        else:
            raise StudyError(f"the grid sampler needs a finite space, but `{name}` is "
                             f"continuous ({dist}); give it a step or list its values")
    size = math.prod(len(v) for v in grid.values())
    if size > GRID_LIMIT:
        raise StudyError(f"the grid must have at most {GRID_LIMIT} points, but got {size}")
    return grid


def _tpe(seed: int | None, n_objectives: int, _d: Mapping[str, BaseDistribution],
         startup: int) -> BaseSampler:
    return TPESampler(seed=seed, n_startup_trials=startup, n_ei_candidates=TPE_EI_CANDIDATES,
                      multivariate=n_objectives == 1, constant_liar=True)


#: how each sampler of tracker/samplers.py is built
_BUILD: dict[str, Callable[[int | None, int, Mapping[str, BaseDistribution], int,
                            Mapping[str, Any]], BaseSampler]] = {
    "tpe": lambda seed, n, d, s, _f: _tpe(seed, n, d, s),
    "random": lambda seed, _n, _d, _s, _f: RandomSampler(seed=seed),
    "grid": lambda seed, _n, d, _s, first: _AskTellGridSampler(grid_of(d), seed=seed,
                                                                first=first),
    "nsga2": lambda seed, _n, _d, _s, _f: NSGAIISampler(seed=seed,
                                                        population_size=NSGA2_POPULATION),
}


def make_sampler(kind: str, *, seed: int | None, n_objectives: int,
                 distributions: Mapping[str, BaseDistribution] | None = None,
                 n_startup_trials: int = TPE_STARTUP_TRIALS,
                 default: Mapping[str, Any] | None = None) -> BaseSampler:
    """The sampler named in the spec (tracker/samplers.py). Constraints reach every sampler
    through ``trial.set_constraint`` (the runner sets them before ``tell``): TPE ranks
    infeasible trials by their total violation, NSGA-II uses constrained domination.
    ``default``: the default configuration's params (the baseline trial's): the grid's first
    point, counted as one of its points."""
    if kind not in SAMPLERS or kind not in _BUILD:
        raise StudyError(f"sampler must be one of {', '.join(SAMPLERS)}, but got {kind!r}")
    return _BUILD[kind](seed, n_objectives, distributions or {}, n_startup_trials,
                        default or {})


# ---- the study -----------------------------------------------------------------------------

def open_study(storage: str | optuna.storages.BaseStorage, name: str, *,
               objectives: Mapping[str, str], sampler: BaseSampler) -> optuna.Study:
    """Create the study, or load it when it exists (a rerun resumes). StudyError when the
    stored study optimises in other directions than the spec asks."""
    if isinstance(storage, str):
        from tracker.search.storage import make_storage

        storage = make_storage(storage)
    directions = list(objectives.values())
    if any(d not in ("maximize", "minimize") for d in directions):
        raise StudyError(f"objective directions must be 'maximize' or 'minimize', but got "
                         f"{dict(objectives)}")
    try:
        study = optuna.create_study(storage=storage, study_name=name, sampler=sampler,
                                    directions=directions,  # type: ignore[arg-type]
                                    load_if_exists=True)
    except Exception as exc:
        raise StudyError(f"cannot create or load study {name!r}: {exc}") from exc
    stored = [d.name.lower() for d in study.directions]
    if stored != directions:
        raise StudyError(f"study {name!r} already exists with directions {stored}, but the spec's "
                         f"objectives {dict(objectives)} need {directions}; choose another "
                         "study name (search.study_name / --study-name)")
    if study.metric_names != list(objectives):  # optuna-dashboard names the objectives
        with warnings.catch_warnings():  # experimental since Optuna 3.2, stable in use
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names(list(objectives))
    known = study.user_attrs.get("objectives")
    if known is None:
        study.set_user_attr("objectives", dict(objectives))
    elif list(known) != list(objectives):
        raise StudyError(f"study {name!r} optimises {list(known)}, but the spec's objectives are "
                         f"{list(objectives)}; choose another study name")
    return study


def finished(study: optuna.Study) -> list[FrozenTrial]:
    """Trials with a result (COMPLETE, or failed for a reason of their own), by number."""
    return [t for t in study.get_trials(deepcopy=False)
            if t.state == TrialState.COMPLETE
            or (t.state == TrialState.FAIL and Attr.FAIL_REASON in t.user_attrs)]


def failed(study: optuna.Study) -> list[FrozenTrial]:
    """Trials that failed for a reason of their own (not interrupted, not a dead worker)."""
    return [t for t in study.get_trials(deepcopy=False, states=(TrialState.FAIL,))
            if Attr.FAIL_REASON in t.user_attrs]


# ---- the baseline --------------------------------------------------------------------------

def baseline_trial(study: optuna.Study) -> FrozenTrial | None:
    """The trial holding the default configuration's result (or waiting/running for it)."""
    for t in study.get_trials(deepcopy=False):
        if not t.user_attrs.get(Attr.BASELINE):
            continue
        if t.state in (TrialState.COMPLETE, TrialState.WAITING, TrialState.RUNNING):
            return t
        if t.state == TrialState.FAIL and Attr.FAIL_REASON in t.user_attrs:
            return t
    return None


def enqueue_baseline(study: optuna.Study, params: Mapping[str, Any],
                     exact: Mapping[str, Any] | None = None) -> bool:
    """Put the default configuration first in the queue, once per study (False when the study
    already has it; an interrupted baseline is enqueued again)."""
    if baseline_trial(study) is not None:
        return False
    attrs: dict[str, Any] = {Attr.BASELINE: True}
    if exact:
        attrs[Attr.EXACT_PARAMS] = dict(exact)
    study.enqueue_trial(dict(params), user_attrs=attrs)
    return True


# ---- duplicates ----------------------------------------------------------------------------

def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        try:
            return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-12)
        except (TypeError, ValueError):
            return False
    return bool(a == b) and type(a) is type(b)


def same_params(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """The same configuration: the same values of the knobs that act (a stateful model's
    ``sequence_batching.oldest.*`` do not under the ``direct`` strategy)."""
    a, b = sequence.effective(a), sequence.effective(b)
    return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)


def find_duplicate(study: optuna.Study, params: Mapping[str, Any], *, number: int,
                   include_running: bool = False) -> FrozenTrial | None:
    """An earlier trial with a result for exactly these params (following ``duplicate_of``
    back to the measured one). A baseline whose config the space can only approximate
    (``exact_params``) is never a duplicate of a suggested trial."""
    states = {TrialState.COMPLETE, TrialState.FAIL}
    if include_running:
        states.add(TrialState.RUNNING)
    by_number = {t.number: t for t in study.get_trials(deepcopy=False)}
    for t in by_number.values():
        if t.number == number or t.state not in states or Attr.EXACT_PARAMS in t.user_attrs:
            continue
        if t.state == TrialState.FAIL and Attr.FAIL_REASON not in t.user_attrs:
            continue  # interrupted or crashed: no result to reuse
        if same_params(t.params, params):
            origin = t.user_attrs.get(Attr.DUPLICATE_OF)
            return by_number.get(origin, t) if isinstance(origin, int) else t
    return None


# ---- stopping rules ------------------------------------------------------------------------

def _feasible(t: FrozenTrial) -> bool:
    return all(v <= 0 for v in t.constraints.values())


def _dominates(a: Sequence[float], b: Sequence[float], directions: Sequence[str]) -> bool:
    no_worse = all(not better(y, x, d) for x, y, d in zip(a, b, directions, strict=True))
    return no_worse and any(better(x, y, d) for x, y, d in zip(a, b, directions, strict=True))


def trials_without_improvement(study: optuna.Study, objectives: Mapping[str, str]) -> int:
    """How many trials with a result came after the last one that improved the study: a new
    best feasible value (one objective) or a new point on the feasible Pareto front (two)."""
    directions = list(objectives.values())
    front: list[Sequence[float]] = []
    since = 0
    for t in finished(study):
        improved = False
        if t.state == TrialState.COMPLETE and t.values is not None and _feasible(t):
            vals = t.values
            if not any(_dominates(p, vals, directions) or list(p) == list(vals) for p in front):
                front = [p for p in front if not _dominates(vals, p, directions)] + [vals]
                improved = True
        since = 0 if improved else since + 1
    return since


def best_trials(study: optuna.Study) -> list[FrozenTrial]:
    """The feasible best trial (one objective) or the feasible Pareto front (two), as Optuna
    itself (and so optuna-dashboard) computes them from the stored constraints; a duplicate
    stands for the trial it repeats. Empty when no trial is feasible."""
    try:
        found = ([study.best_trial] if len(study.directions) == 1 else study.best_trials)
    except ValueError:  # nothing complete, or nothing feasible
        return []
    by_number = {t.number: t for t in study.get_trials(deepcopy=False)}
    out: dict[int, FrozenTrial] = {}
    for t in found:
        origin = t.user_attrs.get(Attr.DUPLICATE_OF)
        t = by_number.get(origin, t) if isinstance(origin, int) else t
        if _feasible(t) and t.values is not None:
            out.setdefault(t.number, t)
    return sorted(out.values(), key=lambda t: t.number)

