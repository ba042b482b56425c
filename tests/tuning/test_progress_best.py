"""The progress line's "best" with two objectives names the trial ``tracker promote`` would
register without a confirmation: the Pareto front's point best on the first objective, not
the front's lowest-numbered trial."""

from __future__ import annotations

import optuna

from tracker.trial_record import metric_attrs
from tracker.tuning.loop import best_text

OBJECTIVES = {"perf_throughput": "maximize", "perf_latency_p99": "minimize"}


def _trial(throughput: float, p99: float, feasible: bool = True) -> optuna.trial.FrozenTrial:
    metrics = {"perf_throughput": throughput, "perf_latency_p99": p99}
    return optuna.trial.create_trial(values=[throughput, p99], user_attrs=metric_attrs(metrics),
                                     constraints={"p99": -1.0 if feasible else 1.0})


def test_the_best_named_is_the_fronts_best_on_the_first_objective() -> None:
    study = optuna.create_study(directions=["maximize", "minimize"])
    assert best_text(study, OBJECTIVES) == "none feasible yet"
    for t in (_trial(100.0, 2.0), _trial(300.0, 5.0), _trial(900.0, 1.0, feasible=False),
              _trial(200.0, 3.0)):
        study.add_trial(t)
    text = best_text(study, OBJECTIVES)
    assert text.startswith("trial 1 (perf_throughput 300"), text
    assert text.endswith("+2 on the front"), text
    flipped = dict(reversed(list(OBJECTIVES.items())))  # latency first: the fastest point
    assert best_text(study, flipped).startswith("trial 0 (perf_latency_p99 2"), flipped
