"""A trial budget buys distinct configurations: a repeated configuration (its result reused)
does not use up n_trials, the sampler is asked again, and a study whose sampler keeps
repeating itself stops with the reason."""

from __future__ import annotations

import time

import optuna
from optuna.distributions import CategoricalDistribution

from tracker.search.workers import budget
from tracker.spec import parse_spec
from tracker.trial_record import Attr
from tracker.tuning.loop import MIN_REPEATS, stop_reason

DIST = {"instance_group.count": CategoricalDistribution([1, 2, 3])}


def _tell(study: optuna.Study, count: int, repeat_of: int | None = None) -> None:
    trial = optuna.trial.create_trial(params={"instance_group.count": count}, distributions=DIST,
                                      value=float(count),
                                      user_attrs={} if repeat_of is None
                                      else {Attr.DUPLICATE_OF: repeat_of})
    study.add_trial(trial)


def test_a_repeated_configuration_does_not_use_up_the_budget() -> None:
    study = optuna.create_study(direction="maximize")
    _tell(study, 1)
    _tell(study, 2)
    _tell(study, 1, repeat_of=0)  # the sampler proposed trial 0's configuration again
    got = budget(study)
    assert got.complete == 2 and got.repeats == 1
    assert not got.done(3)  # a third distinct configuration is still to be measured
    _tell(study, 3)
    assert budget(study).done(3)


def test_a_sampler_that_keeps_repeating_itself_stops_the_study() -> None:
    spec = parse_spec({"model": {"name": "m", "path": "m.onnx"},
                       "search": {"n_trials": 5, "space": {"instance_group.count": [1, 2, 3]}}})
    study = optuna.create_study(direction="maximize")
    _tell(study, 1)
    for _ in range(MIN_REPEATS - 1):
        _tell(study, 1, repeat_of=0)
    assert stop_reason(study, spec, time.monotonic(), None) == ""
    _tell(study, 1, repeat_of=0)
    why = stop_reason(study, spec, time.monotonic(), None)
    assert f"proposed {MIN_REPEATS} configurations already measured" in why
