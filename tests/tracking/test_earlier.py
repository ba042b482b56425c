"""Earlier studies read back from a real MLflow sqlite store (tracker/tracking/earlier.py) for
``search.warm_start``, and the refusals of an incompatible one (tracker/invocation/remembered.py).
The studies are written with the tracker's own writers (tracking/runs.py, registry.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mlflow import MlflowClient

from tests.support.tune import build_quickstart
from tracker import tags
from tracker.errors import StudyError, TrackingError
from tracker.invocation import remembered
from tracker.invocation.session import spec_configuration
from tracker.search.warm_start import signature
from tracker.spec import load_spec
from tracker.tracking import registry, runs
from tracker.tracking.earlier import Current, find_study

KNOBS = ("instance_group.count", "max_batch_size")


def _study(uri: str, name: str, *, model: str = "quickstart", experiment: str = "quickstart",
           knobs: tuple[str, ...] = KNOBS, status: str = "FINISHED",
           signature_of: dict[str, object] | None = None) -> tuple[str, list[str]]:
    """A finished study of three trials (the default, a better one, an infeasible one):
    (its parent run id, its trial run ids)."""
    parent = runs.open_study_run(tracking_uri=uri, experiment=experiment, study_name=name,
                                 storage="sqlite:///x.db", run_id="",
                                 params={"study.model": model, "study.server_mode": "local",
                                         "study.objectives": {"perf_throughput": "maximize"}})
    machine = {tags.HOST_CPU: "Old CPU", tags.HOST_CPU_CORES: "64"}
    if signature_of is not None:
        machine[tags.MODEL_SIGNATURE] = json.dumps(signature_of)
    runs.set_tags(parent.client, parent.run_id, machine)
    ids = []
    for number, (count, value, feasible) in enumerate([(1, 900.0, True), (2, 3000.0, True),
                                                       (2, 5000.0, False)]):
        params = {k: v for k, v in {"instance_group.count": count, "max_batch_size": 8,
                                    "dynamic_batching.max_queue_delay_microseconds": 100,
                                    }.items() if k in knobs}
        run_id = runs.start_trial_run(parent, number, params,
                                      tags={tags.BASELINE: str(number == 0).lower()})
        runs.log_metrics(parent.client, run_id, {"perf_throughput": value}, step=16)
        runs.set_tags(parent.client, run_id, {tags.FEASIBLE: str(feasible).lower(),
                                              tags.CONCURRENCY: 16})
        runs.finish_run(parent.client, run_id, "FINISHED", state="COMPLETE")
        ids.append(run_id)
    runs.finish_run(parent.client, parent.run_id, status)
    return parent.run_id, ids


def _current(name: str = "new", knobs: tuple[str, ...] = KNOBS) -> Current:
    return Current("quickstart", frozenset(knobs), name, "sqlite:///y.db")


def test_auto_finds_the_latest_finished_study_of_the_model_and_knobs(mlflow_uri: str) -> None:
    client = MlflowClient(mlflow_uri)
    assert find_study(client, "auto", _current()) is None  # nothing yet: the study starts cold
    older, _ = _study(mlflow_uri, "older")
    newest, trial_ids = _study(mlflow_uri, "newest")
    _study(mlflow_uri, "other-model", model="resnet", experiment="resnet")
    _study(mlflow_uri, "three-knobs", knobs=(*KNOBS, "dynamic_batching."
                                             "max_queue_delay_microseconds"))
    _study(mlflow_uri, "killed", status="KILLED")
    found = find_study(client, "auto", _current())
    assert found is not None and found.run_id == newest and found.name == "newest"
    assert [t.number for t in found.trials] == [0, 1, 2]
    assert found.trials[1].params == {"instance_group.count": "2", "max_batch_size": "8"}
    assert found.trials[1].metrics["perf_throughput"] == 3000.0 and found.trials[1].feasible
    assert found.trials[0].baseline and found.trials[1].concurrency == 16
    assert found.machine[tags.HOST_CPU] == "Old CPU"
    assert found.machine[tags.LAUNCH_MODE] == "local"  # from study.server_mode
    # never the study that starts (same name and storage: a resume)
    again = find_study(client, "auto", Current("quickstart", frozenset(KNOBS), "newest",
                                               "sqlite:///x.db"))
    assert again is not None and again.run_id == older
    # named: by the parent's or a trial's run id, the study's name, its experiment
    assert find_study(client, newest, _current()).run_id == newest  # type: ignore[union-attr]
    assert find_study(client, trial_ids[1], _current()).run_id == newest  # type: ignore[union-attr]
    assert find_study(client, "older", _current()).run_id == older  # type: ignore[union-attr]
    assert find_study(client, "resnet", _current()).model == "resnet"  # type: ignore[union-attr]
    with pytest.raises(TrackingError, match="no study, experiment, run or registered model "
                                            "named 'nothing'"):
        find_study(client, "nothing", _current())
    with pytest.raises(TrackingError, match="KILLED, not FINISHED"):
        find_study(client, "killed", _current())


def test_a_registered_model_names_the_study_of_its_production_version(mlflow_uri: str) -> None:
    client = MlflowClient(mlflow_uri)
    parent, trial_ids = _study(mlflow_uri, "registered")
    version = registry.register_version(client, "qs", registry.VersionRequest(
        source=f"runs:/{trial_ids[1]}/model", run_id=trial_ids[1],
        tags={tags.MODEL_RUN_ID: trial_ids[1]}))
    with pytest.raises(TrackingError, match="has no version in Production"):
        find_study(client, "qs", _current())
    registry.transition_stage(client, "qs", version.version, registry.PRODUCTION)
    found = find_study(client, "qs", _current())
    assert found is not None and found.run_id == parent


@pytest.fixture(scope="module")
def spec_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("warm")
    model = build_quickstart(folder)
    path = folder / "study.yaml"
    path.write_text(f"model: {{name: quickstart, path: {model}}}\n"
                    "search:\n  warm_start: {from: WHICH}\n  space:\n"
                    "    instance_group.count: [1, 2]\n    max_batch_size: [1, 8]\n")
    return path


def _resolve(spec_file: Path, uri: str, which: str) -> remembered.Resolved:
    text = spec_file.read_text().replace("WHICH", which)
    path = spec_file.with_name(f"study-{abs(hash(which))}.yaml")
    path.write_text(text)
    spec = load_spec(path)
    conf = spec_configuration(spec)
    dists, base = remembered.space_of(spec, conf)
    return remembered.resolve(spec, conf, MlflowClient(uri), (dists, base.params),
                              "sqlite:///y.db", {tags.GPU_NAMES: "none"})


def test_incompatible_studies_are_refused_unless_forced(mlflow_uri: str,
                                                        spec_file: Path) -> None:
    spec = load_spec(spec_file)
    mine = signature(spec_configuration(spec))
    _study(mlflow_uri, "fine", signature_of=mine)
    _study(mlflow_uri, "resnet-study", model="resnet", experiment="resnet")
    _study(mlflow_uri, "wider", signature_of={**mine, "inputs": ["INPUT0 FP32 [128]"]})
    _study(mlflow_uri, "python", signature_of={**mine, "backend": "python"})
    fine = _resolve(spec_file, mlflow_uri, "fine").plan
    assert fine is not None and [r.params for r in fine.queue] == [
        {"instance_group.count": 2, "max_batch_size": 8}]
    assert "CPU Old CPU (now" in fine.words()  # the earlier study ran on other hardware
    for which, why in (("resnet-study", "it tuned model 'resnet', not 'quickstart'"),
                       ("wider", "its inputs were INPUT0 FP32 [128], not INPUT0 FP32 [64]"),
                       ("python", "ran on the python backend, not onnxruntime")):
        with pytest.raises(StudyError, match="cannot be started from") as err:
            _resolve(spec_file, mlflow_uri, which)
        assert why in str(err.value) and "force: true" in str(err.value)
        assert "\n" not in str(err.value)
        forced = _resolve(spec_file, mlflow_uri, f"{which}, force: true").plan
        assert forced is not None and forced.refused is not None and why in forced.refused
    # auto never fails a study: the latest same-model study ("python") is refused, so cold
    cold = _resolve(spec_file, mlflow_uri, "auto")
    assert cold.plan is None and "starts cold" in cold.cold and "python backend" in cold.cold
