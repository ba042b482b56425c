"""A pipeline (an ensemble of two Python-backend models, a string output) promoted and deployed
against a real Triton (explicit model control, the wheel's tritonserver, one server for the
module: each test deploys its own model names) and a real sqlite MLflow registry and Optuna
study; the trials carry what the study side logs (tests/support/pipeline_deploy.py).

promote v1 -> every model loads, the ensemble answers; promote v2 while a client sends
requests -> every model on v2, no failed request; promote v3 whose composing model raises in
initialize -> exit 1, every model back on v2, the ensemble answers as before, the registry's
production pointers name v2. Also: the deployments target (create, predict with a string
output through `mlflow deployments predict`, a refused entry rolled back, list/delete as one
deployment, composing models not taken over), a failed first deploy leaving nothing, the
watcher deploying on an alias move, and an ONNX step served through the shim.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import mlflow
import pytest
import yaml
from click.testing import CliRunner
from mlflow.deployments import get_deploy_client
from mlflow.exceptions import MlflowException

from tests.support import models
from tests.support.deploy import RequestLoop
from tests.support.deploy import module_server as module_server  # the fixtures, re-exported
from tests.support.deploy import shared_serving as shared_serving
from tests.support.pipeline_deploy import Names, PipelineStudy, X
from tracker.cli import cli
from tracker.deploy.publish import META_FILE
from tracker.deploy.shadow import SUFFIX
from tracker.tracking import registry
from tracker.triton.server.local import LocalTritonServer

pytestmark = pytest.mark.triton
V1 = {"scale": 1, "tag": "v1"}
V2 = {"scale": 2, "tag": "v2"}


def ready(server: LocalTritonServer, names: list[str]) -> dict[str, list[str]]:
    """The READY versions of each model, as Triton's repository index says."""
    index = server.client().repository_index()
    return {n: sorted(e["version"] for e in index
                      if e["name"] == n and e.get("state") == "READY") for n in names}


def answer(server: LocalTritonServer, entry: str) -> list[str]:
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(server.endpoints.grpc)
    try:
        x = grpcclient.InferInput("INPUT", list(X.shape), "FP32")
        x.set_data_from_numpy(X)
        out = client.infer(entry, [x], client_timeout=10).as_numpy("LABEL")
    finally:
        client.close()
    assert out is not None
    return [v.decode() for v in out.ravel()]


def folders(repo: Path, names: list[str]) -> dict[str, list[str]]:
    return {n: sorted(p.name for p in (repo / n).iterdir() if p.is_dir())
            for n in names if (repo / n).exists()}


def loaded_order(server: LocalTritonServer, offset: int, version: str) -> list[str]:
    """The models in the order the server log says they started loading ``version`` (after
    ``offset``)."""
    with open(server.log_path, "rb") as fh:
        fh.seek(offset)
        text = fh.read().decode(errors="replace")
    found = re.findall(rf'"loading: ([^:"]+):{version}"', text)
    return [n for n in dict.fromkeys(found) if not n.endswith(SUFFIX)]  # checked as shadows


def _label(result: Any) -> str:
    return str(result.as_numpy("LABEL").ravel()[0].decode())


def requests(url: str, entry: str) -> RequestLoop:
    """Sends [1, 2, 3, 0] to the entry without a version, from a thread, until stopped;
    counted by the label that came back."""
    return RequestLoop(url, entry, {"INPUT": X}, _label)


def test_promote_deploys_every_model_and_rolls_every_model_back(
        tmp_path: Path, mlflow_uri: str,
        shared_serving: tuple[LocalTritonServer, Path]) -> None:
    server, repo = shared_serving
    names = Names("a")
    study = PipelineStudy(tmp_path, mlflow_uri, names, "pipes")
    client = mlflow.MlflowClient(mlflow_uri)
    promote = ["promote", "--study", "pipes", "--storage", study.storage,
               "--registered-model", "pipes", "--name", names.entry]
    runner = CliRunner()

    study.add(V1, 100.0)
    first = runner.invoke(cli, promote)
    assert first.exit_code == 0, first.output
    assert ready(server, names.order) == {n: ["1"] for n in names.order}
    assert answer(server, names.entry) == ["v1:6.0"]

    # the registered version holds every model with its production config, in load order
    local = Path(mlflow.artifacts.download_artifacts("models:/pipes/1",
                                                     dst_path=str(tmp_path / "dl")))
    mlmodel = yaml.safe_load((local / "MLmodel").read_text())["flavors"]["triton"]
    assert (mlmodel["entry_model"], mlmodel["models"], mlmodel["layout"]) == (
        names.entry, names.order, "repository")
    for model in names.order:
        assert (local / model / "config.pbtxt").read_text() == study.trial_configs[0][model]
    assert (local / names.scale / "1" / "model.py").is_file()

    study.add(V2, 200.0)
    log_start = server.log_path.stat().st_size
    with requests(server.endpoints.grpc, names.entry) as loop:
        loop.wait_for(20)
        second = runner.invoke(cli, promote)
        loop.wait_for(20)
    assert second.exit_code == 0, second.output
    assert loop.failures == [], loop.failures[:3]
    assert loop.answers["v2:12.0"] > 0, loop.answers
    assert ready(server, names.order) == {n: ["2"] for n in names.order}
    assert folders(repo, names.order) == {n: ["2"] for n in names.order}
    assert answer(server, names.entry) == ["v2:12.0"]
    assert loaded_order(server, log_start, "2") == names.order  # composing first, entry last

    # v3: its composing model raises in initialize -> every model back on v2
    study.add({**V2, "tag": "v3", "broken": True}, 300.0)
    third = runner.invoke(cli, promote)
    assert third.exit_code == 1, third.output
    assert f"failed while loading {names.scale!r}" in third.output, third.output
    assert "every model is rolled back: version 2 still serves" in third.output
    assert "could not convert string to float" in third.output, third.output
    assert ready(server, names.order) == {n: ["2"] for n in names.order}
    assert folders(repo, names.order) == {n: ["2"] for n in names.order}
    assert answer(server, names.entry) == ["v2:12.0"]
    versions = {str(v.version): v for v in registry.all_versions(client, "pipes")}
    assert {k: v.tags[registry.TAG_DEPLOY_STATUS] for k, v in versions.items()} == {
        "1": "replaced", "2": "serving", "3": "failed"}
    assert {k: v.current_stage for k, v in versions.items()} == {
        "1": "Archived", "2": "Production", "3": "None"}  # never entered it
    production = client.get_model_version_by_alias("pipes", "production")
    assert str(production.version) == "2"
    got = Path(mlflow.artifacts.download_artifacts("models:/pipes@production",
                                                   dst_path=str(tmp_path / "prod")))
    assert 'string_value: "v2"' in (got / names.label / "config.pbtxt").read_text()

    # the deployment is the entry; its record names every model
    entry_meta = json.loads((repo / names.entry / META_FILE).read_text())
    assert entry_meta["models"] == names.order and entry_meta["registry_version"] == "2"
    part = json.loads((repo / names.scale / META_FILE).read_text())
    assert part["part_of"] == names.entry


def test_target_deploys_a_pipeline_predicts_strings_and_rolls_back_a_refused_entry(
        tmp_path: Path, mlflow_uri: str,
        shared_serving: tuple[LocalTritonServer, Path]) -> None:
    server, repo = shared_serving
    names = Names("b")
    study = PipelineStudy(tmp_path, mlflow_uri, names, "bp")
    client = mlflow.MlflowClient(mlflow_uri)
    register = ["promote", "--study", "bp", "--storage", study.storage, "--registered-model",
                "bp", "--name", names.entry, "--no-deploy"]
    study.add(V1, 100.0)
    assert CliRunner().invoke(cli, register).exit_code == 0
    study.add({**V2, "wrong_tensor": True}, 200.0)  # the entry is refused
    assert CliRunner().invoke(cli, register).exit_code == 0
    target = get_deploy_client("triton")

    made = target.create_deployment(names.entry, "models:/bp/1")
    assert (made["name"], made["version"], made["state"], made["models"]) == (
        names.entry, 1, "READY", names.order)
    assert target.predict(names.entry, {"INPUT": X})["outputs"] == {"LABEL": [["v1:6.0"]]}
    # `mlflow deployments predict` writes the strings as JSON
    (tmp_path / "in.json").write_text(json.dumps({"INPUT": X.tolist()[0]}))
    env = {**os.environ, "MLFLOW_TRACKING_URI": mlflow_uri}
    out = subprocess.run([sys.executable, "-m", "mlflow", "deployments", "predict", "-t",
                          "triton", "--name", names.entry, "--input-path",
                          str(tmp_path / "in.json"), "--output-path", str(tmp_path / "o.json")],
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads((tmp_path / "o.json").read_text()) == {"outputs": {"LABEL": [["v1:6.0"]]}}

    # v2: the composing models load beside v1, the entry is refused -> all back on v1
    with pytest.raises(MlflowException, match=f"failed while loading {names.entry!r}") as err:
        target.update_deployment(names.entry, "models:/bp/2")
    assert "NOPE" in str(err.value), err.value
    assert ready(server, names.order) == {n: ["1"] for n in names.order}
    assert folders(repo, names.order) == {n: ["1"] for n in names.order}
    assert answer(server, names.entry) == ["v1:6.0"]
    assert registry.get_version(client, "bp", 2).tags[registry.TAG_DEPLOY_STATUS] == "failed"

    # one deployment listed; a composing model is neither listed nor deleted alone
    listed = [d for d in target.list_deployments() if d["name"].startswith("b")]
    assert [(d["name"], d["models"]) for d in listed] == [(names.entry, names.order)]
    with pytest.raises(MlflowException, match="is a model of deployment"):
        target.delete_deployment(names.scale)
    # another pipeline may not take over this one's composing models
    with pytest.raises(MlflowException, match="not taken over"):
        target.create_deployment("bother", "models:/bp/1")
    assert not (repo / "bother").exists()
    assert ready(server, names.order) == {n: ["1"] for n in names.order}

    target.delete_deployment(names.entry)
    assert folders(repo, names.order) == {}
    assert ready(server, names.order) == {n: [] for n in names.order}
    assert registry.get_version(client, "bp", 1).tags[registry.TAG_DEPLOY_STATUS] == "removed"


def test_a_first_deploy_that_fails_leaves_nothing_behind(
        tmp_path: Path, mlflow_uri: str,
        shared_serving: tuple[LocalTritonServer, Path]) -> None:
    server, repo = shared_serving
    names = Names("c")
    study = PipelineStudy(tmp_path, mlflow_uri, names, "cp")
    study.add({**V1, "refused": True}, 100.0)  # Triton refuses the composing model's config
    result = CliRunner().invoke(cli, ["promote", "--study", "cp", "--storage", study.storage,
                                      "--registered-model", "cp", "--name", names.entry])
    assert result.exit_code == 1
    assert "nothing served before, nothing serves now" in result.output, result.output
    assert "preferred size must be <= max batch size" in result.output, result.output
    assert folders(repo, names.order) == {}
    assert ready(server, names.order) == {n: [] for n in names.order}
    assert registry.get_version(mlflow.MlflowClient(mlflow_uri), "cp", 1).tags[
        registry.TAG_DEPLOY_STATUS] == "failed"


def test_watch_deploys_a_pipeline_when_the_alias_moves(
        tmp_path: Path, mlflow_uri: str,
        shared_serving: tuple[LocalTritonServer, Path]) -> None:
    server, _repo = shared_serving
    names = Names("w")
    study = PipelineStudy(tmp_path, mlflow_uri, names, "wp")
    client = mlflow.MlflowClient(mlflow_uri)
    register = ["promote", "--study", "wp", "--storage", study.storage, "--registered-model",
                "wp", "--name", names.entry]
    study.add(V1, 100.0)
    assert CliRunner().invoke(cli, register).exit_code == 0
    study.add(V2, 200.0)
    assert CliRunner().invoke(cli, [*register, "--no-deploy", "--stage", "Staging",
                                    "--alias", "candidate"]).exit_code == 0
    assert answer(server, names.entry) == ["v1:6.0"]

    client.set_registered_model_alias("wp", "production", "2")  # as the registry UI does
    watched = CliRunner().invoke(cli, ["watch", "--once", "--model", "wp"])
    assert watched.exit_code == 0, watched.output
    assert "wp v2 (alias): ok" in watched.output, watched.output
    assert ready(server, names.order) == {n: ["2"] for n in names.order}
    assert answer(server, names.entry) == ["v2:12.0"]
    in_production = [str(v.version) for v in registry.versions_in_stage(client, "wp",
                                                                        "Production")]
    assert in_production == ["2"]
    assert str(client.get_model_version_by_alias("wp", "production").version) == "2"


def test_an_onnx_step_is_served_through_the_shim_inside_the_pipeline(
        tmp_path: Path, mlflow_uri: str,
        shared_serving: tuple[LocalTritonServer, Path]) -> None:
    import onnxruntime

    server, repo = shared_serving
    names = Names("o")
    onnx = models.dynamic_batch(tmp_path / "net.onnx", features_in=4, features_out=4)
    study = PipelineStudy(tmp_path, mlflow_uri, names, "op", onnx=onnx)
    study.add(V1, 100.0)
    result = CliRunner().invoke(cli, ["promote", "--study", "op", "--storage", study.storage,
                                      "--registered-model", "op", "--name", names.entry])
    assert result.exit_code == 0, result.output
    assert "the server has no onnxruntime backend" in result.output, result.output
    assert ready(server, names.order) == {n: ["1"] for n in names.order}
    expected = onnxruntime.InferenceSession(str(onnx)).run(None, {"INPUT0": X})[0].sum()
    assert answer(server, names.entry) == [f"v1:{expected:.1f}"]
    assert server.client().model_config(names.scale).backend == "python"
    meta = json.loads((repo / names.entry / META_FILE).read_text())
    assert meta["model_serving"] == {names.scale: "python", names.label: "python",
                                     names.entry: "ensemble"}
    # the same version again: nothing to do
    again = get_deploy_client("triton").update_deployment(names.entry, "models:/op/1")
    assert again["version"] == 1
    assert json.loads((repo / names.entry / META_FILE).read_text())["deployed_at"] == \
        meta["deployed_at"]


def test_a_step_the_new_version_drops_is_removed_after_the_switch(
        tmp_path: Path, mlflow_uri: str,
        shared_serving: tuple[LocalTritonServer, Path]) -> None:
    from tests.support.pipeline_deploy import configs, stored_folder
    from tracker.tracking.flavor import inspect_repository_dir, log_repository

    server, repo = shared_serving
    names = Names("d")
    client = mlflow.MlflowClient(mlflow_uri)
    run = client.create_run(client.create_experiment("d")).info.run_id
    files = stored_folder(tmp_path / "files", names)
    texts = configs(names, V1)
    # v2 drops the scale step: the ensemble calls label (SCALE 2 would have made it 12.0)
    texts2 = configs(names, V2)
    texts2[names.entry] = (texts2[names.entry].split("ensemble_scheduling")[0]
              + f'''ensemble_scheduling {{ step [ {{ model_name: "{names.label}"
      model_version: -1 input_map {{ key: "INPUT0" value: "INPUT" }}
      output_map {{ key: "LABEL" value: "LABEL" }} }} ] }}
''')
    for n, (order, cfgs) in enumerate(((names.order, texts),
                                       ([names.label, names.entry], texts2)), start=1):
        root = tmp_path / f"repo{n}"
        for model in order:
            (root / model).mkdir(parents=True)
            for item in (files / model).iterdir():
                if item.is_dir():
                    (root / model / item.name).mkdir()
                    for f in item.iterdir():
                        (root / model / item.name / f.name).write_bytes(f.read_bytes())
            (root / model / "config.pbtxt").write_text(cfgs[model])
        logged = log_repository(inspect_repository_dir(root, order), run,
                                tracking_uri=mlflow_uri)
        registry.register_version(client, "dp", registry.VersionRequest(
            source=logged.model_uri, run_id=run, model_id=logged.model_id))
    target = get_deploy_client("triton")
    target.create_deployment(names.entry, "models:/dp/1")
    assert answer(server, names.entry) == ["v1:6.0"]
    updated = target.update_deployment(names.entry, "models:/dp/2")
    assert updated["models"] == [names.label, names.entry]
    assert answer(server, names.entry) == ["v2:6.0"]  # label alone: the input unscaled
    assert not (repo / names.scale).exists()
    assert ready(server, names.order) == {names.scale: [], names.label: ["2"],
                                          names.entry: ["2"]}


def test_a_pipeline_version_that_answers_unlike_the_study_is_refused(
        tmp_path: Path, mlflow_uri: str,
        shared_serving: tuple[LocalTritonServer, Path]) -> None:
    """The output check at deploy sends the study's probes to the pipeline's entry: version
    2 (its label step altered after the study) answers them differently, is refused before
    it takes the traffic, and every model stays on version 1."""
    import numpy as np

    from tracker.deploy import verify
    from tracker.outputs.probes import ProbeSet, Tolerance
    from tracker.outputs.stored import store_reference

    server, _repo = shared_serving
    names = Names("k")
    study = PipelineStudy(tmp_path, mlflow_uri, names, "kp")
    reference = ProbeSet([{"INPUT": ("FP32", X)}], ["LABEL"],
                         [{"LABEL": np.array([[b"v1:6.0"]], dtype=np.object_)}])
    store_reference(study.study, study.client, study.parent, reference, Tolerance(1e-4, 1e-5))
    promote = ["promote", "--study", "kp", "--storage", study.storage, "--registered-model",
               "kp", "--name", names.entry]
    study.add(V1, 100.0)
    first = CliRunner().invoke(cli, promote)
    assert first.exit_code == 0, first.output
    study.add(V2, 200.0)
    second = CliRunner().invoke(cli, promote)
    assert second.exit_code == 1, second.output
    assert verify.STEP in second.output and "version 1 still serves" in second.output
    assert "output 'LABEL' of probe 0" in second.output, second.output
    assert ready(server, names.order) == {n: ["1"] for n in names.order}
    assert answer(server, names.entry) == ["v1:6.0"]
    refused = mlflow.MlflowClient(mlflow_uri).get_model_version("kp", "2")
    assert verify.STEP in refused.tags["tracker.deploy.refused"]
