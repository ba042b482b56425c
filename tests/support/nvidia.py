"""Helpers for the tests of NVIDIA mlflow-triton plugin compatibility: the model of that
plugin's example (two FP32 [16] inputs, two INT32 [16] outputs: sum and difference), its
config.pbtxt, a logger that writes the plugin's `triton` flavor layout (as its
scripts/publish_model_to_mlflow.py does), and a real Triton in explicit mode reached with the
plugin's settings only (TRITON_URL over HTTP, TRITON_MODEL_REPO; TRACKER_TRITON_* unset)."""

from __future__ import annotations

import os
import shutil
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mlflow
import onnx
import pytest
from mlflow.models import Model
from onnx import TensorProto, helper

from tracker.spec import ServerSection
from tracker.triton.server.local import LocalTritonServer

#: the config.pbtxt of the plugin's example model, as users log it (no name, version policy)
TWO_IN_TWO_OUT_CONFIG = """platform: "onnxruntime_onnx"
max_batch_size: 8
version_policy: { latest { num_versions: 1 }}
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
input [ { name: "INPUT1" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
"""


def two_in_two_out(path: Path) -> Path:
    """INPUT0, INPUT1 FP32 [batch, 16] -> OUTPUT0 = int32(INPUT0 + INPUT1), OUTPUT1 =
    int32(INPUT0 - INPUT1), INT32 [batch, 16]."""
    f, i32 = TensorProto.FLOAT, TensorProto.INT32
    graph = helper.make_graph(
        [helper.make_node("Add", ["INPUT0", "INPUT1"], ["sum"]),
         helper.make_node("Cast", ["sum"], ["OUTPUT0"], to=i32),
         helper.make_node("Sub", ["INPUT0", "INPUT1"], ["diff"]),
         helper.make_node("Cast", ["diff"], ["OUTPUT1"], to=i32)],
        "two_in_two_out",
        [helper.make_tensor_value_info(n, f, ["batch", 16]) for n in ("INPUT0", "INPUT1")],
        [helper.make_tensor_value_info(n, i32, ["batch", 16]) for n in ("OUTPUT0", "OUTPUT1")])
    model = helper.make_model(graph, producer_name="tracker-tests",
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def triton_model_dir(root: Path, onnx_file: Path, dirname: str) -> Path:
    """A Triton model directory as a plugin user has it: config.pbtxt + 1/model.onnx."""
    d = root / dirname
    (d / "1").mkdir(parents=True)
    shutil.copyfile(onnx_file, d / "1" / "model.onnx")
    (d / "config.pbtxt").write_text(TWO_IN_TWO_OUT_CONFIG)
    return d


def _save_nvidia_layout(triton_model_path: str, path: str, mlflow_model: Model) -> None:
    """The plugin's triton flavor: the model directory copied under its own name into the
    MLflow model, MLmodel `flavors: {triton: {data: <dirname>}}`."""
    src = Path(triton_model_path)
    Path(path).mkdir(parents=True)
    shutil.copytree(src, Path(path) / src.name)
    mlflow_model.add_flavor("triton", data=src.name)
    mlflow_model.save(os.path.join(path, "MLmodel"))


NVIDIA_TRITON_FLAVOR = types.ModuleType("nvidia_triton_flavor")
NVIDIA_TRITON_FLAVOR.save_model = _save_nvidia_layout  # type: ignore[attr-defined]


def log_nvidia_triton(tmp: Path, onnx_file: Path, registered: str,
                      dirname: str = "onnx_float32_int32_int32") -> Any:
    """Log the example model in the plugin's triton layout and register it (version 1)."""
    model_dir = triton_model_dir(tmp / f"src-{registered}", onnx_file, dirname)
    with mlflow.start_run():
        return Model.log(artifact_path="triton", flavor=NVIDIA_TRITON_FLAVOR,
                         triton_model_path=str(model_dir), registered_model_name=registered)


def log_onnx(onnx_file: Path, registered: str, *, with_config: bool) -> None:
    """As the plugin's README and tests: mlflow.onnx.log_model, then optionally the
    config.pbtxt logged beside it with mlflow.log_artifact(path, "triton")."""
    with mlflow.start_run():
        mlflow.onnx.log_model(onnx.load(str(onnx_file)), name="triton",
                              registered_model_name=registered)
        if with_config:
            cfg = onnx_file.parent / "config.pbtxt"
            cfg.write_text(TWO_IN_TWO_OUT_CONFIG)
            mlflow.log_artifact(str(cfg), "triton")


@pytest.fixture()
def nvidia_serving(tmp_path: Path, mlflow_uri: str,
                   monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[LocalTritonServer, Path]]:
    """A Triton in explicit mode; only NVIDIA's settings in the environment."""
    repo = tmp_path / "models"
    repo.mkdir()
    for name in [n for n in os.environ if n.startswith("TRACKER_TRITON_")]:
        monkeypatch.delenv(name)
    with LocalTritonServer(ServerSection(startup_timeout_s=60)) as server:
        server.start(repo, explicit=True)
        http = server.endpoints.http
        assert http is not None
        monkeypatch.setenv("TRITON_URL", http.split("://", 1)[1])
        monkeypatch.setenv("TRITON_MODEL_REPO", str(repo))
        monkeypatch.setenv("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
        yield server, repo
