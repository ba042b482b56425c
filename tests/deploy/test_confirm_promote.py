"""`tracker promote` after a confirmation: the confirmed choice, not the search's best; the
interval on the registered version; an equivalent or inconclusive study refused unless forced,
saying which. Real Optuna and
MLflow sqlite stores, real logged models; nothing deployed (no settings)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mlflow
import optuna
import pytest

from tests.support import models
from tests.support.deploy import NAME, V1, trial_model_dir
from tracker.deploy.choose import Ask
from tracker.deploy.promote import Release, promote
from tracker.errors import DeployError
from tracker.tracking import flavor
from tracker.verdict import record as confirmed

OBJ = {"perf_throughput": "maximize"}


def _study(tmp: Path, search: list[float]) -> optuna.Study:
    """Trials with what the tuning loop leaves; trial 0 is the default."""
    onnx = models.dynamic_batch(tmp / "tiny.onnx")
    study = optuna.create_study(study_name=NAME, storage=f"sqlite:///{tmp / 'optuna.db'}",
                                direction="maximize")
    client = mlflow.MlflowClient()
    exp = client.create_experiment(NAME)
    for n, value in enumerate(search):
        run = client.create_run(exp)
        flavor.log_triton_model(trial_model_dir(tmp / f"t{n}", onnx, V1), run.info.run_id)
        trial = study.ask()
        for key, attr in {"mlflow_run_id": run.info.run_id, "feasible": True,
                          "baseline": n == 0, "measurements": 3, "concurrency": 4,
                          "metrics": {"perf_throughput": value,
                                      "perf_latency_p99": 2.5}}.items():
            trial.set_user_attr(key, attr)
        study.tell(trial, value)
    return study


def _confirm(study: optuna.Study, table: dict[int, list[float]]) -> None:
    rounds = len(table[0])
    study.set_user_attr(confirmed.ATTR, {
        "status": "done",
        "candidates": [{"trial": n, "baseline": n == 0, "concurrency": 4, "instances": 1}
                       for n in table],
        "rounds": [{"order": list(table), "results": {
            str(n): {"perf_throughput": v[i], "perf_latency_p99": 2.5, "feasible": True}
            for n, v in table.items()}} for i in range(rounds)]})


def _tags(name: str, version: int) -> dict[str, Any]:
    return dict(mlflow.MlflowClient().get_model_version(name, str(version)).tags)


def test_promote_takes_the_confirmed_choice_and_tags_its_interval(
        tmp_path: Path, mlflow_uri: str) -> None:
    study = _study(tmp_path, [100.0, 150.0, 130.0])   # trial 1 was lucky in the search
    _confirm(study, {0: [100.0, 98.0, 101.0, 99.0, 100.0], 1: [101.0, 99.0, 100.0, 98.0, 101.0],
                     2: [120.0, 119.0, 122.0, 119.5, 120.5]})
    done = promote(study, objectives=OBJ, constraints=None, release=Release("reg", NAME))
    assert done.trial == 2
    tags = _tags("reg", done.version)
    assert tags[confirmed.VERDICT_TAG] == "better"
    low, high = (float(tags[f"confirm/improvement_pct_ci_{s}"]) for s in ("low", "high"))
    assert 0 < low < float(tags["confirm/improvement_pct"]) < high
    assert "confirmed in 5 interleaved rounds: trial-2 gives" in done.description


@pytest.mark.parametrize(("table", "word"), [
    ({0: [100.0, 98.0, 101.0, 99.0, 100.0, 99.5], 1: [99.0, 98.5, 100.5, 99.0, 100.2, 99.4]},
     "equivalent"),
    ({0: [100.0, 60.0, 101.0], 1: [130.0, 98.0, 110.0]}, "inconclusive")])
def test_a_study_that_keeps_the_default_is_refused_unless_forced(
        tmp_path: Path, mlflow_uri: str, table: dict[int, list[float]], word: str) -> None:
    study = _study(tmp_path, [100.0, 150.0])
    _confirm(study, table)
    with pytest.raises(DeployError, match=rf"the verdict is {word} .*--force"):
        promote(study, objectives=OBJ, constraints=None, release=Release("reg", NAME))
    assert not mlflow.MlflowClient().search_registered_models()
    forced = promote(study, objectives=OBJ, constraints=None, release=Release("reg", NAME),
                     ask=Ask(force=True))
    assert forced.trial == 1
    assert _tags("reg", forced.version)[confirmed.VERDICT_TAG] == word
