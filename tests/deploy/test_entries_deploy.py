"""A study of two independent entry models (``scale`` and ``label``, two Python-backend models,
no ensemble: what ``model.name: [a, b]`` tunes) promoted and deployed against a real Triton
(explicit model control, the wheel's tritonserver, one server for the module) and a real
sqlite MLflow registry and Optuna study; the trials carry what the study side logs for
several entry models (tests/support/pipeline_deploy.py).

promote v1 -> one registry version holding both models, both answer; promote v2 whose second
model raises in initialize -> exit 1, both back on v1 (the first model's v2 had loaded beside
v1 and is dropped), the registry's pointers stay on v1; v3 deployed by the watcher on an alias
move while a client calls the second model -> no failed request; `tracker status` agrees;
`mlflow deployments` get/predict/list/delete treat the two models as one deployment.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import mlflow
import numpy as np
import pytest
import yaml
from click.testing import CliRunner
from mlflow.deployments import get_deploy_client
from mlflow.exceptions import MlflowException

from tests.support.deploy import RequestLoop
from tests.support.deploy import module_server as module_server  # the fixtures, re-exported
from tests.support.deploy import shared_serving as shared_serving
from tests.support.pipeline_deploy import Names, PipelineStudy, X
from tracker.cli import cli
from tracker.deploy.publish import META_FILE
from tracker.tracking import registry
from tracker.triton.server.local import LocalTritonServer

pytestmark = pytest.mark.triton


def ready(server: LocalTritonServer, names: list[str]) -> dict[str, list[str]]:
    index = server.client().repository_index()
    return {n: sorted(e["version"] for e in index
                      if e["name"] == n and e.get("state") == "READY") for n in names}


def infer(server: LocalTritonServer, model: str, output: str) -> Any:
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(server.endpoints.grpc)
    try:
        x = grpcclient.InferInput("INPUT0", list(X.shape), "FP32")
        x.set_data_from_numpy(X)
        return client.infer(model, [x], client_timeout=10).as_numpy(output)
    finally:
        client.close()


def answers(server: LocalTritonServer, names: Names) -> tuple[list[float], str]:
    """(scale's output, label's label) for [1, 2, 3, 0]."""
    scaled = infer(server, names.scale, "OUTPUT0")
    label = infer(server, names.label, "LABEL")
    return [float(v) for v in np.asarray(scaled).ravel()], label.ravel()[0].decode()


def folders(repo: Path, names: list[str]) -> dict[str, list[str]]:
    return {n: sorted(p.name for p in (repo / n).iterdir() if p.is_dir())
            for n in names if (repo / n).exists()}


def _label(result: Any) -> str:
    return str(result.as_numpy("LABEL").ravel()[0].decode())


def test_two_entry_models_are_one_version_switched_and_rolled_back_together(
        tmp_path: Path, mlflow_uri: str,
        shared_serving: tuple[LocalTritonServer, Path]) -> None:
    server, repo = shared_serving
    names = Names("e")
    both = [names.scale, names.label]
    study = PipelineStudy(tmp_path, mlflow_uri, names, "two", entries=both)
    client = mlflow.MlflowClient(mlflow_uri)
    promote = ["promote", "--study", "two", "--storage", study.storage,
               "--registered-model", "two", "--name", names.scale]
    runner = CliRunner()

    study.add({"scale": 1, "tag": "v1"}, 100.0)
    first = runner.invoke(cli, promote)
    assert first.exit_code == 0, first.output
    assert ready(server, both) == {n: ["1"] for n in both}
    assert answers(server, names) == ([1.0, 2.0, 3.0, 0.0], "v1:6.0")
    # one registered version holds both entry models, each with its production config
    local = Path(mlflow.artifacts.download_artifacts("models:/two/1",
                                                     dst_path=str(tmp_path / "dl")))
    triton = yaml.safe_load((local / "MLmodel").read_text())["flavors"]["triton"]
    assert (triton["entries"], triton["models"], triton["layout"]) == (both, both, "repository")
    meta = json.loads((repo / names.scale / META_FILE).read_text())
    assert (meta["models"], meta["entries"], meta["registry_version"]) == (both, both, "1")
    assert json.loads((repo / names.label / META_FILE).read_text())["part_of"] == names.scale

    # v2: scale's v2 loads beside v1, label's v2 raises in initialize -> both back on v1
    study.add({"scale": 2, "tag": "v2", "label_broken": True}, 200.0)
    second = runner.invoke(cli, promote)
    assert second.exit_code == 1, second.output
    assert f"failed while loading {names.label!r}" in second.output, second.output
    assert "every model is rolled back: version 1 still serves" in second.output
    assert "KeyError" in second.output, second.output
    assert ready(server, both) == {n: ["1"] for n in both}
    assert folders(repo, both) == {n: ["1"] for n in both}
    assert answers(server, names) == ([1.0, 2.0, 3.0, 0.0], "v1:6.0")
    versions = {str(v.version): v for v in registry.all_versions(client, "two")}
    assert {k: v.tags[registry.TAG_DEPLOY_STATUS] for k, v in versions.items()} == {
        "1": "serving", "2": "failed"}
    assert {k: v.current_stage for k, v in versions.items()} == {
        "1": "Production", "2": "None"}  # never entered it
    assert str(client.get_model_version_by_alias("two", "production").version) == "1"

    # v3 through the watcher (an alias move, as the registry UI does) while a client calls
    # the second entry model without a version: no failed request
    study.add({"scale": 2, "tag": "v3"}, 300.0)
    staged = runner.invoke(cli, [*promote, "--no-deploy", "--stage", "Staging",
                                 "--alias", "candidate"])
    assert staged.exit_code == 0, staged.output
    client.set_registered_model_alias("two", "production", "3")
    with RequestLoop(server.endpoints.grpc, names.label, {"INPUT0": X}, _label) as loop:
        loop.wait_for(10)
        watched = runner.invoke(cli, ["watch", "--once", "--model", "two"])
        loop.wait_for(10)
    assert watched.exit_code == 0, watched.output
    assert "two v3 (alias): ok" in watched.output, watched.output
    assert loop.failures == [], loop.failures[:3]
    assert loop.answers["v3:6.0"] > 0, loop.answers
    assert ready(server, both) == {n: ["3"] for n in both}
    assert answers(server, names) == ([2.0, 4.0, 6.0, 0.0], "v3:6.0")
    status = runner.invoke(cli, ["status", "--model", "two"])
    assert status.exit_code == 0, status.output
    assert f"Triton {names.scale!r} serves v3" in status.output, status.output
    assert "(agree)" in status.output, status.output

    # mlflow deployments: one deployment of both models; each entry answers by its name
    target = get_deploy_client("triton")
    got = target.get_deployment(names.scale)
    assert (got["version"], got["models"], got["entries"]) == (3, both, both)
    assert target.predict(names.label, {"INPUT0": X})["outputs"] == {"LABEL": [["v3:6.0"]]}
    assert [d["name"] for d in target.list_deployments()
            if d["name"].startswith("e")] == [names.scale]
    with pytest.raises(MlflowException, match="is a model of deployment"):
        target.delete_deployment(names.label)
    target.delete_deployment(names.scale)
    assert folders(repo, both) == {}
    assert ready(server, both) == {n: [] for n in both}
    assert registry.get_version(client, "two", 3).tags[registry.TAG_DEPLOY_STATUS] == "removed"
