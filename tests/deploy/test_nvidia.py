"""NVIDIA mlflow-triton plugin users switch without changing a command: a real Triton in
explicit model control mode (the wheel's tritonserver), a real sqlite registry, and only that
plugin's settings in the environment (TRITON_URL, the HTTP endpoint; TRITON_MODEL_REPO).

The model is the plugin's example (two FP32 [16] inputs, two INT32 [16] outputs, max_batch_size
8), logged the two ways its users log models: its `triton` flavor layout and
`mlflow.onnx.log_model` (with and without a config.pbtxt logged beside it). The commands are
the plugin README's, run through MLflow's own CLI.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import mlflow
import numpy as np
import pytest
from mlflow.deployments import get_deploy_client
from mlflow.exceptions import MlflowException

from tests.support.nvidia import (
    TWO_IN_TWO_OUT_CONFIG,
    log_nvidia_triton,
    log_onnx,
    triton_model_dir,
    two_in_two_out,
)
from tests.support.nvidia import nvidia_serving as nvidia_serving  # the fixture, re-exported
from tracker.deploy.nvidia import META_FILE
from tracker.deploy.publish import LOCK_FILE
from tracker.deploy.publish import META_FILE as OUR_META
from tracker.tracking import registry
from tracker.triton import model_config
from tracker.triton.server.local import LocalTritonServer

pytestmark = pytest.mark.triton
REPO_ROOT = Path(__file__).resolve().parents[2]
ROW = [float(i) for i in range(1, 17)]
INPUT = {"inputs": {"INPUT0": [ROW], "INPUT1": [ROW]}}  # the plugin's examples/input.json
EXPECTED = {"outputs": {"OUTPUT0": [[2 * v for v in range(1, 17)]],
                        "OUTPUT1": [[0] * 16]}}  # its examples/expected_output.json


def mlflow_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """`mlflow deployments ARGS -t triton` as a user runs it, with this checkout's tracker."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    assert not [k for k in env if k.startswith("TRACKER_TRITON_")]
    assert env["TRITON_URL"] and env["TRITON_MODEL_REPO"]
    done = subprocess.run([sys.executable, "-m", "mlflow", "deployments", *args[:1], "-t",
                           "triton", *args[1:]], capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 0, f"{args}: {done.stdout}\n{done.stderr}"
    return done


def version_files(root: Path) -> list[str]:
    """A version folder's files (without the Python backend's __pycache__)."""
    return sorted(p.name for p in root.iterdir() if p.name != "__pycache__")


def test_the_plugins_triton_flavor_deploys_with_its_commands(
        tmp_path: Path, nvidia_serving: tuple[LocalTritonServer, Path]) -> None:
    server, repo = nvidia_serving
    name = "onnx_float32_int32_int32"
    log_nvidia_triton(tmp_path, two_in_two_out(tmp_path / "model.onnx"), name)
    # a model put there by other means is no deployment (the plugin's own test has one too)
    triton_model_dir(repo, tmp_path / "model.onnx", "existing_model")

    made = mlflow_cli("create", "--flavor", "triton", "--name", name, "-m",
                      f"models:/{name}/1")
    assert f"triton deployment {name} is created" in made.stdout
    listed = mlflow_cli("list").stdout
    assert f"'name': '{name}'" in listed and "'status': 'READY'" in listed
    assert "existing_model" not in listed
    got = mlflow_cli("get", "--name", name).stdout
    for line in (f"name: {name}", "flavor: triton", "status: READY",
                 f"mlflow_model_uri: models:/{name}/1", "version: 1"):
        assert line in got.splitlines(), got

    (tmp_path / "input.json").write_text(json.dumps(INPUT))
    mlflow_cli("predict", "--name", name, "--input-path", str(tmp_path / "input.json"),
               "--output-path", str(tmp_path / "output.json"))
    assert json.loads((tmp_path / "output.json").read_text()) == EXPECTED

    # what the repository holds: the version folder (the registry's number), the config the
    # server loads, our record and the plugin's
    assert sorted(p.name for p in (repo / name).iterdir()) == sorted(
        ["1", "config.pbtxt", OUR_META, META_FILE])
    mode = json.loads((repo / name / OUR_META).read_text())["serving"]
    assert version_files(repo / name / "1") == (
        ["model.onnx", "model.py"] if mode == "python" else ["model.onnx"])
    assert json.loads((repo / name / META_FILE).read_text()) == {
        "name": name, "triton_model_path": str(repo / name),
        "mlflow_model_uri": f"models:/{name}/1", "flavor": "triton"}
    served = server.client().model_config(name)
    assert (served.max_batch_size, [i.name for i in served.input]) == (8, ["INPUT0", "INPUT1"])

    mlflow_cli("delete", "--name", name)
    assert sorted(p.name for p in repo.iterdir()) == [LOCK_FILE, "existing_model"]
    assert not server.client().model_ready(name)
    assert registry.get_version(mlflow.MlflowClient(), name,
                                1).tags[registry.TAG_DEPLOY_STATUS] == "removed"


def test_onnx_models_deploy_with_the_config_logged_beside_them_or_one_derived(
        tmp_path: Path, nvidia_serving: tuple[LocalTritonServer, Path]) -> None:
    server, repo = nvidia_serving
    name = "onnx_model_with_files"
    onnx_file = two_in_two_out(tmp_path / "model.onnx")
    log_onnx(onnx_file, name, with_config=True)   # version 1: config.pbtxt beside it
    log_onnx(onnx_file, name, with_config=False)  # version 2: no config

    made = mlflow_cli("create", "--flavor", "onnx", "--name", name, "-m", f"models:/{name}/1")
    assert f"onnx deployment {name} is created" in made.stdout
    served = server.client().model_config(name)
    logged = model_config.parse(TWO_IN_TWO_OUT_CONFIG)
    assert served.max_batch_size == logged.max_batch_size == 8
    assert [(t.name, list(t.dims)) for t in served.output] == \
        [(t.name, list(t.dims)) for t in logged.output]
    (tmp_path / "in.json").write_text(json.dumps(INPUT))
    mlflow_cli("predict", "--name", name, "--input-path", str(tmp_path / "in.json"),
               "--output-path", str(tmp_path / "out.json"))
    assert json.loads((tmp_path / "out.json").read_text()) == EXPECTED

    # update to version 2: its config is derived from the ONNX file (Triton's default 4)
    mlflow_cli("update", "--flavor", "onnx", "--name", name, "-m", f"models:/{name}/2")
    assert server.client().model_config(name).max_batch_size == 4
    entry = get_deploy_client("triton").get_deployment(name)
    assert (entry["version"], entry["flavor"], entry["status"], entry["mlflow_model_uri"]) == \
        (2, "onnx", "READY", f"models:/{name}/2")
    assert sorted(p.name for p in (repo / name).iterdir()) == sorted(
        ["2", "config.pbtxt", OUR_META, META_FILE])
    assert json.loads((repo / name / META_FILE).read_text())["flavor"] == "onnx"
    mlflow_cli("delete", "--name", name)
    assert sorted(p.name for p in repo.iterdir()) == [LOCK_FILE]


def test_names_as_the_plugin_treats_them(
        tmp_path: Path, nvidia_serving: tuple[LocalTritonServer, Path]) -> None:
    server, repo = nvidia_serving
    onnx_file = two_in_two_out(tmp_path / "model.onnx")
    # MLflow 3 refuses registered model names that start with '..': such deployments serve a
    # model registered under another name
    log_onnx(onnx_file, "dots", with_config=False)
    client = get_deploy_client("triton")
    for bad in ("", "   ", "\t"):
        with pytest.raises(MlflowException, match="Model name cannot be empty"):
            client.create_deployment(bad, "models:/dots/1", flavor="onnx")
    for bad in ("..", "../x", "a/../b", "/opt/sys/", "../../etc/passwd"):
        with pytest.raises(MlflowException, match="Path traversal is not allowed in model's "
                                                  f"name: {bad}"):
            client.create_deployment(bad, "models:/dots/1", flavor="onnx")
    assert not (tmp_path / "x").exists() and not (repo / "b").exists()
    assert list(repo.iterdir()) == []  # nothing was written for a refused name

    x = {"INPUT0": np.array([ROW], np.float32), "INPUT1": np.ones((1, 16), np.float32)}
    for name in ("...", "..my_model", "model..1", "model.version1"):
        source = "dots"
        if not name.startswith(".."):
            log_onnx(onnx_file, name, with_config=False)
            source = name
        made = client.create_deployment(name, f"models:/{source}/1", flavor="onnx")
        assert (made["name"], made["flavor"]) == (name, "onnx")
        assert [d["name"] for d in client.list_deployments()] == [name]
        assert client.get_deployment(name)["status"] == "READY"
        out = client.predict(name, x)["outputs"]
        np.testing.assert_array_equal(np.array(out["OUTPUT1"]), [[v - 1 for v in ROW]])
        assert (repo / name / META_FILE).is_file() and server.client().model_ready(name)
        client.delete_deployment(name)
        assert not (repo / name).exists()
    # one of them through the CLI end to end
    mlflow_cli("create", "--flavor", "onnx", "--name", "...", "-m", "models:/dots/1")
    assert "'name': '...'" in mlflow_cli("list").stdout
    mlflow_cli("delete", "--name", "...")
    assert sorted(p.name for p in repo.iterdir()) == [LOCK_FILE]
