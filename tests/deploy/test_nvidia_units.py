"""What NVIDIA's mlflow-triton plugin users rely on, checked without a server: its settings
(TRITON_URL, TRITON_MODEL_REPO) and their precedence, its name rules, its predict input and
output shapes, and the model layouts it logs (real MLflow sqlite store)."""

from __future__ import annotations

import json
from pathlib import Path

import mlflow
import numpy as np
import onnx
import pandas as pd
import pytest

from tests.support.nvidia import (
    TWO_IN_TWO_OUT_CONFIG,
    log_nvidia_triton,
    two_in_two_out,
)
from tracker.deploy import nvidia
from tracker.deploy.inference import to_arrays
from tracker.deploy.settings import resolve_settings
from tracker.errors import DeployError
from tracker.tracking import flavor, foreign
from tracker.triton import model_config

OURS = ("TRACKER_TRITON_URL", "TRACKER_TRITON_REPOSITORY")


@pytest.fixture()
def nvidia_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for name in OURS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TRITON_URL", "tritonhost:8000")
    monkeypatch.setenv("TRITON_MODEL_REPO", str(tmp_path))
    return tmp_path


def test_nvidia_settings_alone_mean_http_and_the_local_repository(nvidia_env: Path) -> None:
    s = resolve_settings("triton")
    assert (s.url, s.protocol, s.ssl, s.repository) == ("tritonhost:8000", "http", False,
                                                        nvidia_env)
    assert s.endpoint == "http://tritonhost:8000"


def test_an_https_triton_url_means_tls(nvidia_env: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_URL", "https://secure:443")
    s = resolve_settings("triton")
    assert (s.url, s.protocol, s.ssl, s.endpoint) == ("secure:443", "http", True,
                                                      "https://secure:443")


def test_without_triton_url_nvidia_setups_get_nvidias_default_server(
        nvidia_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRITON_URL")
    assert resolve_settings("triton").endpoint == "http://localhost:8000"
    monkeypatch.setenv("TRACKER_TRITON_REPOSITORY", str(nvidia_env))
    assert resolve_settings("triton").endpoint == "localhost:8001"  # ours: gRPC


def test_our_settings_win_over_nvidias(nvidia_env: Path, monkeypatch: pytest.MonkeyPatch,
                                       tmp_path: Path) -> None:
    ours = tmp_path / "ours"
    monkeypatch.setenv("TRACKER_TRITON_URL", "grpchost:8001")
    monkeypatch.setenv("TRACKER_TRITON_REPOSITORY", str(ours))
    s = resolve_settings("triton")
    assert (s.url, s.protocol, s.repository) == ("grpchost:8001", "grpc", ours)
    # then the target URI and the config win over both
    assert resolve_settings("triton:/urihost:1").url == "urihost:1"
    s = resolve_settings("triton", {"url": "http://cfg:2", "repository": str(nvidia_env)})
    assert (s.endpoint, s.repository) == ("http://cfg:2", nvidia_env)


@pytest.mark.parametrize("repo", ["s3://bucket/models", "s3://https://minio:9000/b/m",
                                  "gs://bucket/models"])
def test_an_object_store_repository_is_refused_naming_what_is_supported(
        nvidia_env: Path, monkeypatch: pytest.MonkeyPatch, repo: str) -> None:
    monkeypatch.setenv("TRITON_MODEL_REPO", repo)
    scheme = repo.split("://")[0]
    with pytest.raises(DeployError, match=rf"TRITON_MODEL_REPO is '{repo}': {scheme}:// "
                                          r"repositories are not supported .*supported: a "
                                          r"local path or file:///path"):
        resolve_settings("triton")


def test_a_file_uri_repository_is_a_local_path(nvidia_env: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_MODEL_REPO", f"file://{nvidia_env}")
    assert resolve_settings("triton").repository == nvidia_env


@pytest.mark.parametrize("name", ["", "     ", " ", "\n", "\t", "\r", "\v", "\f"])
def test_empty_names_are_refused_as_nvidia_does(name: str) -> None:
    with pytest.raises(DeployError, match="Model name cannot be empty"):
        flavor.validate_model_name(name)


@pytest.mark.parametrize("name", ["/opt/sys/", "../../etc/passwd", "../outside/repo",
                                  "test_models/../identity_py", "..", "a/../b", "../x"])
def test_paths_are_refused_as_nvidia_does(name: str) -> None:
    with pytest.raises(DeployError, match="Path traversal is not allowed in model's name: "):
        flavor.validate_model_name(name)


@pytest.mark.parametrize("name", ["model123", "model.version1", "...", "..my_model", "model..1",
                                  "model....1"])
def test_names_with_dots_are_valid_as_nvidia_has_them(name: str) -> None:
    assert flavor.validate_model_name(name) == name


def test_nvidias_predict_input_file_reads_as_one_tensor_per_input() -> None:
    cfg = model_config.parse(TWO_IN_TWO_OUT_CONFIG)
    row = [float(i) for i in range(1, 17)]
    path_like = json.dumps({"inputs": {"INPUT0": [row], "INPUT1": [row, row]}})
    df = pd.read_json(__import__("io").StringIO(path_like))
    got = to_arrays(cfg, df)
    assert got["INPUT0"].shape == (1, 16) and got["INPUT1"].shape == (2, 16)
    assert got["INPUT0"].dtype == np.float32


def test_predictions_are_written_as_outputs_and_read_as_predictions(tmp_path: Path) -> None:
    resp = nvidia.Predictions({"OUTPUT0": [[2, 4]]})
    resp.to_json(str(tmp_path / "out.json"))
    assert json.loads((tmp_path / "out.json").read_text()) == {"outputs": {"OUTPUT0": [[2, 4]]}}
    assert resp["predictions"] == {"OUTPUT0": [[2, 4]]}
    assert resp.get_predictions().to_dict() == {"OUTPUT0": {0: [2, 4]}}
    with pytest.raises(KeyError):
        resp["nothing"]


def test_mlflow_meta_json_is_written_and_read_with_nvidias_keys(tmp_path: Path) -> None:
    nvidia.write_meta(tmp_path, "m", "onnx", "models:/m/1")
    assert json.loads((tmp_path / nvidia.META_FILE).read_text()) == {
        "name": "m", "triton_model_path": str(tmp_path), "mlflow_model_uri": "models:/m/1",
        "flavor": "onnx"}
    keys = nvidia.entry_keys(tmp_path, "READY", {}, "triton")
    assert (keys["flavor"], keys["mlflow_model_uri"], keys["status"]) == ("onnx",
                                                                          "models:/m/1", "READY")
    assert nvidia.has_record(tmp_path, "deployment.json")
    assert not nvidia.has_record(tmp_path / "other", "deployment.json")


def test_the_layouts_nvidia_logs_read_as_triton_model_directories(
        tmp_path: Path, mlflow_uri: str) -> None:
    onnx_file = two_in_two_out(tmp_path / "model.onnx")
    log_nvidia_triton(tmp_path, onnx_file, "nv")
    got = foreign.load_deployable("models:/nv/1", tmp_path / "a", name="nv")
    assert (got.flavor, got.layout, got.source.entry.versions) == ("triton", "nvidia", (1,))
    assert model_config.parse(got.source.entry.config_text).max_batch_size == 8

    with mlflow.start_run():
        mlflow.onnx.log_model(onnx.load(str(onnx_file)), name="triton",
                              registered_model_name="plain")
    got = foreign.load_deployable("models:/plain/1", tmp_path / "b", name="plain")
    cfg = model_config.parse(got.source.entry.config_text)
    assert (got.flavor, got.layout) == ("onnx", "onnx")
    assert (cfg.max_batch_size, [i.name for i in cfg.input]) == (4, ["INPUT0", "INPUT1"])
    assert (got.source.entry.latest_version_dir / "model.onnx").is_file()

    with pytest.raises(DeployError, match=r"has no 'onnx' flavor; it has \['triton'\]"):
        foreign.load_deployable("models:/nv/1", tmp_path / "c", name="nv", flavor="onnx")
    with pytest.raises(DeployError, match="deploys the flavors"):
        foreign.load_deployable("models:/nv/1", tmp_path / "d", name="nv", flavor="sklearn")


def test_an_onnx_model_keeps_its_external_weights(tmp_path: Path, mlflow_uri: str) -> None:
    from onnx import TensorProto, helper, numpy_helper

    weight = numpy_helper.from_array(np.ones((64, 16), np.float32), "W")  # 4 KB: external
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["X", "W"], ["Y"])], "big",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["b", 64])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["b", 16])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    with mlflow.start_run():
        mlflow.onnx.log_model(model, name="m", registered_model_name="big")
    got = foreign.load_deployable("models:/big/1", tmp_path / "x", name="big")
    files = sorted(p.name for p in got.source.entry.latest_version_dir.iterdir())
    assert len(files) == 2 and "model.onnx" in files, files
    loaded = onnx.load(str(got.source.entry.latest_version_dir / "model.onnx"))
    assert numpy_helper.to_array(loaded.graph.initializer[0]).sum() == 64 * 16
