"""`tracker promote --trial N`: another point of a two-objective Pareto front (or any feasible
COMPLETE trial) registered instead of the study's choice, tagged as chosen by hand; a
duplicate promotes the trial it repeats; an infeasible, failed, pruned, running, queued or
unknown trial is refused in one line saying why, and nothing is registered. One real Optuna
study (sqlite) and one real MLflow store (sqlite, real logged models) for the module; nothing
deployed (--no-deploy)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlflow
import optuna
import pytest
from click.testing import CliRunner, Result
from optuna.trial import TrialState

from tests.support import models
from tests.support.deploy import NAME, V1, V2, trial_model_dir
from tracker.cli import cli
from tracker.deploy.choose import Ask
from tracker.deploy.promote import Release, promote
from tracker.errors import DeployError
from tracker.tracking import flavor
from tracker.verdict import record as confirmed

OBJECTIVES = {"perf_throughput": "maximize", "perf_latency_p99": "minimize"}
REASON = "Triton refused the config: preferred_batch_size 64 > max_batch_size 8"


@dataclass
class Front:
    tmp: Path
    uri: str
    spec: Path
    storage: str


def _told(study: optuna.Study, client: mlflow.MlflowClient, exp: str, tmp: Path, *,
          values: tuple[float, float], feasible: bool = True, model: dict[str, Any] | None = None,
          **attrs: Any) -> None:
    """A trial as the tuning loop leaves it; with ``model`` its run holds a real Triton model."""
    run = client.create_run(exp).info.run_id
    n = len(study.trials)
    if model is not None:
        onnx = tmp / "tiny.onnx"
        flavor.log_triton_model(trial_model_dir(tmp / f"t{n}", onnx, model), run)
    trial = study.ask()
    thr, p99 = values
    for key, value in {"mlflow_run_id": run, "feasible": feasible, "baseline": n == 0,
                       "measurements": 3, "concurrency": 4,
                       "metrics": {"perf_throughput": thr, "perf_latency_p99": p99},
                       **attrs}.items():
        trial.set_user_attr(key, value)
    study.tell(trial, list(values))


def _build(tmp: Path, uri: str) -> optuna.Study:
    """Trials 0-2 feasible (1 and 2 the Pareto front: the fastest and the quickest), 3
    infeasible, 4 a duplicate of 2, 5 failed, 6 pruned, 7 running, 8 queued."""
    models.dynamic_batch(tmp / "tiny.onnx")
    storage = f"sqlite:///{tmp / 'optuna.db'}"
    study = optuna.create_study(study_name=NAME, storage=storage,
                                directions=["maximize", "minimize"])
    study.set_user_attr("objectives", OBJECTIVES)
    client = mlflow.MlflowClient(uri)
    exp = client.create_experiment(NAME)
    _told(study, client, exp, tmp, values=(100.0, 3.0))  # the default: never registered
    _told(study, client, exp, tmp, values=(200.0, 4.0), model=V2)
    _told(study, client, exp, tmp, values=(150.0, 1.5), model=V1)
    _told(study, client, exp, tmp, values=(300.0, 80.0), feasible=False)
    _told(study, client, exp, tmp, values=(150.0, 1.5), duplicate_of=2, measurements=0)
    failed = study.ask()
    failed.set_user_attr("fail_reason", REASON + "\nthe server log's tail ...")
    study.tell(failed, state=TrialState.FAIL)
    study.tell(study.ask(), state=TrialState.PRUNED)
    study.ask()  # running
    study.enqueue_trial({})
    return study


@pytest.fixture(scope="module")
def front(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Front]:
    tmp = tmp_path_factory.mktemp("front")
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    with pytest.MonkeyPatch.context() as mp:
        for var in ("MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI"):
            mp.setenv(var, uri)
        mp.setenv("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
        mp.chdir(tmp)
        _build(tmp, uri)
        spec = tmp / "study.yaml"
        spec.write_text(f"""
model: {{name: {NAME}, path: {tmp / 'tiny.onnx'}}}
objectives: {{perf_throughput: maximize, perf_latency_p99: minimize}}
constraints: {{perf_latency_p99: {{max: 50}}}}
search: {{study_name: {NAME}, storage: "sqlite:///{tmp / 'optuna.db'}"}}
mlflow: {{tracking_uri: "{uri}", registered_model: reg}}
""")
        yield Front(tmp, uri, spec, f"sqlite:///{tmp / 'optuna.db'}")


def _promote(front: Front, *args: str) -> Result:
    return CliRunner().invoke(cli, ["promote", str(front.spec), "--no-deploy", *args])


def _versions(front: Front) -> int:
    return len(mlflow.MlflowClient(front.uri).search_model_versions("name = 'reg'"))


def test_promote_takes_the_fastest_point_of_the_front_and_trial_takes_another(
        front: Front) -> None:
    client = mlflow.MlflowClient(front.uri)
    chosen = _promote(front)
    assert chosen.exit_code == 0, chosen.output
    assert "(trial 1) is in Production" in chosen.output
    first = client.get_model_version_by_alias("reg", "production")
    assert (first.tags["tracker.trial"], first.tags["tracker.chosen_by"]) == ("1", "search")
    assert "2 configurations form the Pareto front" in (first.description or "")

    other = _promote(front, "--trial", "2")
    assert other.exit_code == 0, other.output
    assert "(trial 2, chosen by hand)" in other.output
    mv = client.get_model_version_by_alias("reg", "production")
    assert int(mv.version) == int(first.version) + 1
    assert mv.tags["tracker.trial"] == "2"
    assert mv.tags["tracker.chosen_by"] == "hand (--trial 2)"
    assert mv.tags["tracker.constraint"] == "perf_latency_p99 <= 50.00 ms (measured 1.50 ms)"
    assert mv.run_id == optuna.load_study(study_name=NAME, storage=front.storage).trials[
        2].user_attrs["mlflow_run_id"]
    assert "Promoted by hand: trial-2 (150.0 infer/s, 1.50 ms p99)." in (mv.description or "")
    assert client.get_model_version("reg", first.version).current_stage == "Archived"


def test_a_duplicate_promotes_the_trial_it_repeats(front: Front) -> None:
    result = _promote(front, "--trial", "4")
    assert result.exit_code == 0, result.output
    assert ("trial 4 repeats trial 2 (the same configuration, not measured again): promoting "
            "trial 2") in result.output
    mv = mlflow.MlflowClient(front.uri).get_model_version_by_alias("reg", "production")
    assert mv.tags["tracker.trial"] == "2"
    assert mv.tags["tracker.chosen_by"] == "hand (--trial 4, a repeat of trial 2)"


@pytest.mark.parametrize(("number", "why"), [
    (3, "trial 3 of study 'tiny' does not meet the constraints (perf_latency_p99 <= 50.00 ms "
        "(measured 80.00 ms)): only a feasible COMPLETE trial can be promoted"),
    (5, f"trial 5 of study 'tiny' failed ({REASON}): only a feasible COMPLETE trial"),
    (6, "trial 6 of study 'tiny' was pruned (stopped before its measurement finished)"),
    (7, "trial 7 of study 'tiny' is still running: only"),
    (8, "trial 8 of study 'tiny' is queued and has not run: only"),
    (42, "study 'tiny' has no trial 42 (it has trials 0 to 8)"),
])
def test_a_trial_that_cannot_serve_is_refused_saying_why(
        front: Front, number: int, why: str) -> None:
    before = _versions(front)
    result = _promote(front, "--trial", str(number))
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and why in lines[0], result.output
    assert _versions(front) == before


def test_a_trial_chosen_by_hand_needs_no_force_and_carries_no_verdict(
        front: Front, monkeypatch: pytest.MonkeyPatch) -> None:
    """After an inconclusive confirmation the study's choice is refused unless forced; a trial
    chosen by hand is registered, and its tags do not claim the verdict."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", front.uri)
    storage = f"sqlite:///{front.tmp / 'confirmed.db'}"
    study = optuna.create_study(study_name="confirmed", storage=storage, direction="maximize")
    trials = optuna.load_study(study_name=NAME, storage=front.storage).trials
    for n in (0, 1):  # the front study's trials 0 and 1, their runs and models
        trial = study.ask()
        for key, value in trials[n].user_attrs.items():
            trial.set_user_attr(key, value)
        study.tell(trial, trials[n].values[0])
    study.set_user_attr(confirmed.ATTR, {
        "status": "done",
        "candidates": [{"trial": n, "baseline": n == 0, "concurrency": 4, "instances": 1}
                       for n in (0, 1)],
        "rounds": [{"order": [0, 1], "results": {
            str(n): {"perf_throughput": v, "perf_latency_p99": 2.5, "feasible": True}
            for n, v in ((0, a), (1, b))}} for a, b in ((100.0, 130.0), (60.0, 98.0),
                                                         (101.0, 110.0))]})
    one = {"perf_throughput": "maximize"}
    with pytest.raises(DeployError, match=r"the verdict is inconclusive .*--trial N"):
        promote(study, objectives=one, constraints=None, release=Release("reg-confirmed", NAME),
                log=lambda line: None)
    done = promote(study, objectives=one, constraints=None, release=Release("reg-confirmed", NAME),
                   ask=Ask(1), log=lambda line: None)
    tags = mlflow.MlflowClient(front.uri).get_model_version("reg-confirmed",
                                                            str(done.version)).tags
    assert (done.trial, tags["tracker.chosen_by"]) == (1, "hand (--trial 1)")
    assert confirmed.VERDICT_TAG not in tags
    assert "inconclusive" in done.description and "Promoted by hand: trial-1" in done.description
