"""A warm start's queue (tracker/search/warm_start.py): an earlier study's trials mapped onto a
changed space, ranked, and queued one at a time in a real Optuna study while each holds up."""

from __future__ import annotations

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

from tracker.search import warm_start
from tracker.search.optuna_study import enqueue_baseline
from tracker.search.warm_start import PlanInputs, map_params, parse_value, plan, refusal
from tracker.tracking.earlier import EarlierTrial
from tracker.trial_record import Attr, TrialRecord, write_measured

DISTS = {"instance_group.count": CategoricalDistribution([1, 2, 3]),
         "max_batch_size": IntDistribution(1, 32),
         "dynamic_batching.max_queue_delay_microseconds": CategoricalDistribution([0, 100]),
         "response_cache.enable": CategoricalDistribution([False, True]),
         "parameters.x": FloatDistribution(0.0, 1.0)}
DEFAULTS = {"instance_group.count": 1, "max_batch_size": 4,
            "dynamic_batching.max_queue_delay_microseconds": 0,
            "response_cache.enable": False, "parameters.x": 0.5}


def _trial(number: int, value: float, *, feasible: bool = True, baseline: bool = False,
           role: str | None = None, **params: str) -> EarlierTrial:
    return EarlierTrial(number, f"r{number}", params, {"perf_throughput": value}, feasible,
                        baseline, 16, role, 1 if role == "chosen" else 3 if role else None)


def test_values_are_read_back_from_mlflow_strings_in_the_new_space() -> None:
    assert parse_value("2", DISTS["instance_group.count"]) == 2
    assert parse_value("2.0", DISTS["instance_group.count"]) == 2
    assert parse_value("True", DISTS["response_cache.enable"]) is True
    assert parse_value("8", DISTS["max_batch_size"]) == 8
    assert parse_value("0.25", DISTS["parameters.x"]) == 0.25
    for text, key in (("4", "instance_group.count"), ("64", "max_batch_size"),
                      ("8.5", "max_batch_size"), ("unset", "max_batch_size"),
                      ("2", "parameters.x")):
        assert parse_value(text, DISTS[key]) is warm_start._SKIP, (text, key)


def test_changed_space_drops_missing_knobs_defaults_new_ones_and_skips_outside_values() -> None:
    earlier = {"instance_group.count": "3", "max_batch_size": "16", "instance_group.kind":
               "KIND_CPU"}  # kind is gone from the new space; queue delay etc. are new
    assert map_params(earlier, DISTS, DEFAULTS) == {**DEFAULTS, "instance_group.count": 3,
                                                    "max_batch_size": 16}
    assert map_params({"instance_group.count": "5"}, DISTS, DEFAULTS) is None


def test_plan_ranks_confirmed_first_then_by_value_and_says_what_changed() -> None:
    trials = [_trial(0, 900.0, baseline=True, **{"instance_group.count": "1",
                                                 "max_batch_size": "4"}),
              _trial(1, 3000.0, role="worse", **{"instance_group.count": "2",
                                                 "max_batch_size": "8"}),
              _trial(2, 2000.0, role="chosen", **{"instance_group.count": "3",
                                                  "max_batch_size": "8"}),
              _trial(3, 5000.0, feasible=False, **{"instance_group.count": "3",
                                                   "max_batch_size": "32"}),
              _trial(4, 2500.0, **{"instance_group.count": "9", "max_batch_size": "8"}),
              _trial(5, 2400.0, **{"instance_group.count": "2", "max_batch_size": "8.0"}),
              _trial(6, 1000.0, **{"instance_group.count": "1", "max_batch_size": "4"}),
              _trial(7, 1500.0, **{"instance_group.count": "1", "max_batch_size": "2"}),
              _trial(8, 1400.0, **{"instance_group.count": "1", "max_batch_size": "1"})]
    dists = {k: DISTS[k] for k in ("instance_group.count", "max_batch_size",
                                   "dynamic_batching.max_queue_delay_microseconds")}
    defaults = {k: DEFAULTS[k] for k in dists}
    got = plan("src", "study 'a'", trials, PlanInputs(dists, defaults,
                                                     {"perf_throughput": "maximize"}))
    # chosen first; the infeasible one, the default (twice), the repeat of trial 1 left out;
    # trial 4's count 9 is outside the new space; three at most
    assert [r.number for r in got.queue] == [2, 1, 7]
    assert got.queue[0].key == "r2/trial-2" and got.queue[0].level == 16
    assert got.skipped == 1 and got.added == ["dynamic_batching.max_queue_delay_microseconds"]
    words = got.words()
    assert "trial-2, trial-1, trial-7" in words and "outside this space" in words
    assert "new knobs at their defaults: dynamic_batching" in words


def _study() -> optuna.Study:
    return optuna.create_study(direction="maximize",
                               sampler=optuna.samplers.RandomSampler(seed=0))


def _run_next(study: optuna.Study, value: float, feasible: bool = True) -> TrialRecord:
    trial = study.ask()
    trial.suggest_categorical("instance_group.count", [1, 2, 3])
    write_measured(trial, {"perf_latency_p99": -1.0 if feasible else 1.0}, feasible=feasible,
                   concurrency=4, metrics={}, measurements=2)
    study.tell(trial, [value])
    return TrialRecord.of(study.trials[trial.number])


@pytest.mark.parametrize(("second", "queued"), [(950.0, 3), (800.0, 2)])
def test_queue_goes_on_only_while_the_remembered_configuration_holds_up(
        second: float, queued: int) -> None:
    """After the default, the first remembered configuration; the next only once the one
    before is feasible and within 10% of this study's best (950 of 1000 holds, 800 not)."""
    warm = warm_start.WarmPlan("src", "s", [
        warm_start.Remembered(f"src/trial-{n}", {"instance_group.count": n}, 8, n)
        for n in (1, 2, 3)])
    study = _study()
    assert warm_start.enqueue_next(study, warm, "maximize") is None  # no default queued yet
    enqueue_baseline(study, {"instance_group.count": 1})
    assert warm_start.enqueue_next(study, warm, "maximize") is not None
    assert warm_start.enqueue_next(study, warm, "maximize") is None  # one waits already
    assert _run_next(study, 500.0).baseline
    first = _run_next(study, 1000.0)
    assert first.warm_start == "src/trial-1" and first.warm_level == 8
    assert warm_start.enqueue_next(study, warm, "maximize") is not None
    assert _run_next(study, second).warm_start == "src/trial-2"
    warm_start.enqueue_next(study, warm, "maximize")
    assert len([t for t in study.trials if Attr.WARM_START in t.user_attrs]) == queued


def test_refusal_names_the_model_backend_inputs_or_objectives() -> None:
    mine = {"model": "m", "objectives": {"perf_throughput": "maximize"},
            "signature": {"models": ["m"], "backend": "onnxruntime",
                          "inputs": ["INPUT0 FP32 [64]"]}}
    assert refusal(mine, mine) is None
    assert refusal({**mine, "signature": None}, mine) is None  # not recorded: not checked
    other = refusal({**mine, "model": "n"}, mine)
    assert other == "it tuned model 'n', not 'm'"
    sig = dict(mine["signature"])  # type: ignore[call-overload]
    assert "backend" in str(refusal({**mine, "signature": {**sig, "backend": "python"}}, mine))
    inputs = refusal({**mine, "signature": {**sig, "inputs": ["INPUT0 FP32 [128]"]}}, mine)
    assert inputs == "its inputs were INPUT0 FP32 [128], not INPUT0 FP32 [64]"
    assert "optimised" in str(refusal({**mine, "objectives": {"perf_latency_p99": "minimize"}},
                                      mine))


def test_a_remembered_configurations_sweep_starts_at_its_earlier_level() -> None:
    from tracker.search.sweep_plan import start_index

    levels, params = [1, 2, 4, 8, 16], {"max_batch_size": 1, "instance_group.count": 1}
    assert start_index(levels, params, {}, 2) == 1          # the best trial's level
    assert start_index(levels, params, {}, 2, remembered=8) == 3
    assert start_index(levels, params, {}, None, remembered=12) == 3  # rounded down


def test_hardware_differences_name_what_changed() -> None:
    names = {"cpu": "CPU", "gpus": "GPUs", "mode": "launch mode"}
    got = warm_start.hardware_differences({"cpu": "Xeon", "gpus": "T4, 15360 MB", "mode": "local"},
                                          {"cpu": "Xeon", "gpus": "H100, 81559 MB", "mode": ""},
                                          names)
    assert got == ["GPUs T4, 15360 MB (now H100, 81559 MB)"]
