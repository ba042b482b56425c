"""The Optuna study on a real sqlite storage: baseline, samplers, duplicates, patience."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, IntDistribution
from optuna.trial import TrialState

from tracker.errors import StudyError
from tracker.search.baseline import Baseline, fit_baseline
from tracker.search.optuna_study import (
    baseline_trial,
    best_trials,
    default_storage,
    enqueue_baseline,
    find_duplicate,
    grid_of,
    make_sampler,
    open_study,
    trials_without_improvement,
)
from tracker.trial_record import Attr
from tracker.triton.configuration import Configuration
from tracker.triton.model_config import ModelConfig, ModelInfo, parse

Storage = optuna.storages.RDBStorage
MAX = {"perf_throughput": "maximize"}
SPACE = {"instance_group.count": CategoricalDistribution([1, 2, 3]),
         "max_batch_size": CategoricalDistribution([1, 8])}
CONFIG = parse('name: "m"\nmax_batch_size: 4\ndynamic_batching {}\n'
               'input { name: "x" data_type: TYPE_FP32 dims: 4 }\n'
               'output { name: "y" data_type: TYPE_FP32 dims: 4 }\n')


def one_model(cfg: ModelConfig) -> Configuration:
    """The one-model configuration of ``cfg`` (the baseline reads its values)."""
    return Configuration.of(ModelInfo(cfg, supports_batching=True, model_file=Path("m.onnx")))


@pytest.fixture()
def storage(tmp_path: Path) -> optuna.storages.RDBStorage:
    # no heartbeats here: Optuna warns when ask() meets them outside optimize(); the runner's
    # ask goes through search/workers.py, which keeps heartbeats itself
    return optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 'optuna.db'}")


def study_of(storage: Storage, sampler: str = "tpe", name: str = "s") -> optuna.Study:
    return open_study(storage, name, objectives=MAX,
                      sampler=make_sampler(sampler, seed=1, n_objectives=1,
                                           distributions=SPACE))


def tell(study: optuna.Study, value: float, *, feasible: bool = True,
         attrs: dict[str, object] | None = None) -> optuna.trial.FrozenTrial:
    trial = study.ask()
    for key, dist in SPACE.items():
        trial._suggest(key, dist)
    trial.set_constraint("perf_latency_p99.max", -0.5 if feasible else 0.5)
    for k, v in (attrs or {}).items():
        trial.set_user_attr(k, v)
    study.tell(trial, [value])
    return study.trials[-1]


def test_default_storage_sits_beside_the_mlflow_db(tmp_path: Path) -> None:
    assert default_storage(f"sqlite:///{tmp_path}/x/mlflow.db") == \
        f"sqlite:///{tmp_path}/x/optuna.db"
    assert default_storage("http://mlflow:5000", cwd=tmp_path) == f"sqlite:///{tmp_path}/optuna.db"


def test_an_instance_group_without_a_count_is_one_instance() -> None:
    """Triton's own examples write `instance_group [{ kind: KIND_CPU }]`: one instance, not a
    count of 0 to add to the space."""
    cfg = parse('name: "m" max_batch_size: 4 instance_group [{ kind: KIND_CPU }]')
    space, base = fit_baseline(SPACE, one_model(cfg))
    assert base.params["instance_group.count"] == 1
    assert space["instance_group.count"] == SPACE["instance_group.count"]


def test_baseline_widens_the_space_and_is_enqueued_once(storage: Storage) -> None:
    space, base = fit_baseline(SPACE, one_model(CONFIG))
    assert base.is_exact and base.params == {"instance_group.count": 1, "max_batch_size": 4}
    assert space["max_batch_size"] == CategoricalDistribution([1, 4, 8])
    study = study_of(storage)
    assert enqueue_baseline(study, base.params)
    assert not enqueue_baseline(study_of(storage), base.params)  # rerun: already queued
    trial = study.ask()
    got = {k: trial._suggest(k, d) for k, d in space.items()}
    assert got == base.params and trial.user_attrs[Attr.BASELINE] is True


def test_interrupted_baseline_is_enqueued_again(storage: Storage) -> None:
    study = study_of(storage)
    enqueue_baseline(study, {"instance_group.count": 1, "max_batch_size": 8})
    trial = study.ask()
    trial.set_user_attr(Attr.INTERRUPTED, True)
    study.tell(trial, state=TrialState.FAIL)
    assert baseline_trial(study) is None
    assert enqueue_baseline(study, {"instance_group.count": 1, "max_batch_size": 8})


def test_int_range_baseline_off_the_range_extends_it() -> None:
    space, base = fit_baseline({"max_batch_size": IntDistribution(8, 64, step=8)},
                               one_model(CONFIG))
    assert base.params == {"max_batch_size": 4}
    # 4 is off the step of 8..64, so the range becomes its values plus the default
    assert space["max_batch_size"] == CategoricalDistribution([4, *range(8, 65, 8)])
    space, _ = fit_baseline({"max_batch_size": IntDistribution(8, 64, step=4)}, one_model(CONFIG))
    assert space["max_batch_size"] == IntDistribution(4, 64, step=4)


def test_duplicates_reuse_results_but_not_interrupted_trials(storage: Storage) -> None:
    study = study_of(storage, sampler="random")
    first = tell(study, 10.0)
    dup = find_duplicate(study, first.params, number=99)
    assert dup is not None and dup.number == first.number
    # a duplicate of a duplicate points back at the measured trial
    study.enqueue_trial(first.params)
    second = tell(study, 10.0, attrs={Attr.DUPLICATE_OF: first.number})
    dup = find_duplicate(study, first.params, number=second.number + 1)
    assert dup is not None and dup.number == first.number
    # an interrupted trial has no result to reuse
    other = {"instance_group.count": 3, "max_batch_size": 1}
    study.enqueue_trial(other)
    trial = study.ask()
    for k, d in SPACE.items():
        trial._suggest(k, d)
    trial.set_user_attr(Attr.INTERRUPTED, True)
    study.tell(trial, state=TrialState.FAIL)
    assert find_duplicate(study, other, number=100) is None


def test_patience_counts_trials_since_the_last_improvement(storage: Storage) -> None:
    study = study_of(storage, sampler="random")
    for value, feasible in [(10, True), (20, True), (30, False), (15, True), (19, True)]:
        tell(study, float(value), feasible=feasible)
    # 20 was the last improvement; 30 was infeasible and does not count as one
    assert trials_without_improvement(study, MAX) == 3
    assert [t.values for t in best_trials(study)] == [[20.0]]


def test_grid_sampler_survives_an_exhausted_grid_in_ask_tell(storage: Storage) -> None:
    study = study_of(storage, sampler="grid")
    for i in range(7):  # the grid has 6 points; the 7th tell must not raise
        tell(study, float(i))
    seen = {tuple(sorted(t.params.items())) for t in study.trials[:6]}
    assert len(seen) == 6


def test_reopening_with_other_directions_is_refused(storage: Storage) -> None:
    study_of(storage)
    with pytest.raises(StudyError, match="directions"):
        open_study(storage, "s", objectives={"perf_latency_p99": "minimize"},
                   sampler=make_sampler("random", seed=0, n_objectives=1))


def test_nsga2_front_respects_constraints(storage: Storage) -> None:
    two = {"perf_throughput": "maximize", "perf_latency_p99": "minimize"}
    study = open_study(storage, "pareto", objectives=two,
                       sampler=make_sampler("nsga2", seed=0, n_objectives=2))
    for thr, p99, ok in [(100, 5, True), (200, 9, True), (300, 20, False), (150, 9.5, True)]:
        trial = study.ask()
        trial.suggest_int("instance_group.count", 1, 4)
        trial.set_constraint("perf_latency_p99.max", -1 if ok else 1)
        study.tell(trial, [thr, p99])
    front = sorted(t.values[0] for t in best_trials(study))
    assert front == [100.0, 200.0]


def test_grid_of_an_int_log_range_is_what_tracker_check_counts() -> None:
    """A log integer range is a grid of doublings for the sampler too, not every integer:
    `tracker check` must announce the number of configurations a grid study runs."""
    from tracker.search.space import distributions, grid, space_size
    from tracker.spec import Range

    space = {"max_batch_size": Range(low=1, high=64, log=True)}
    dists = distributions(space)
    assert grid_of(dists) == grid(space) == {"max_batch_size": [1, 2, 4, 8, 16, 32, 64]}
    assert space_size(space) == 7


def _grid_study(storage: Storage, space: dict[str, Any], base: Baseline, name: str
                ) -> optuna.Study:
    study = open_study(storage, name, objectives=MAX, sampler=make_sampler(
        "grid", seed=1, n_objectives=1, distributions=space,
        default=base.params if base.is_exact else None))
    enqueue_baseline(study, base.params, base.exact)
    return study


def _run(study: optuna.Study, space: dict[str, Any], n: int) -> list[tuple[Any, ...]]:
    seen = []
    for _ in range(n):
        trial = study.ask()
        seen.append(tuple(trial._suggest(k, d) for k, d in sorted(space.items())))
        study.tell(trial, [1.0])
    return seen


def test_the_default_is_the_grids_first_point_and_no_trial_repeats_it(
        storage: Storage) -> None:
    """A 5-trial grid study measures the default and 4 other points: the grid counts the
    enqueued default as one of its points (Optuna's GridSampler alone counts only the points
    it placed, so a later trial could draw the default's (count 1, max_batch_size 4) again)."""
    # 3 x 3 points, the default (1, 4) among them
    space, base = fit_baseline(SPACE, one_model(CONFIG))
    study = _grid_study(storage, space, base, "grid-default")
    seen = _run(study, space, 5)
    assert seen[0] == (1, 4) and len(set(seen)) == 5
    assert study.trials[0].user_attrs[Attr.BASELINE] is True
    # the rest of the grid: 9 distinct points in all, then it is exhausted
    seen += _run(study, space, 4)
    assert len(set(seen)) == 9
    assert study.sampler.is_exhausted(study)  # type: ignore[attr-defined]


def test_a_default_the_grid_only_approximates_is_not_one_of_its_points(
        storage: Storage) -> None:
    """A baseline whose values the space can only near (``exact_params``) is not counted as
    the point it was rounded to: that point is measured as it is too."""
    space = {"instance_group.count": CategoricalDistribution([1, 2])}
    base = Baseline({"instance_group.count": 1}, {"instance_group.count": 5})
    study = _grid_study(storage, space, base, "grid-approx")
    seen = _run(study, space, 3)
    assert seen[0] == (1,) and sorted(seen[1:]) == [(1,), (2,)]
