"""The trial repository and the onnxruntime shim: which config is production and which is
served, the provider choice, thread settings, and batching done for real by Triton."""

from __future__ import annotations

import importlib.util
import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType

import numpy as np
import onnxruntime as ort
import pytest

from tracker.errors import ModelError
from tracker.triton import model_config
from tracker.triton.client import TritonClient
from tracker.triton.formats.onnx import SHIM
from tracker.triton.repository import write_repository
from tracker.triton.server.local import LocalTritonServer


def _shim() -> ModuleType:
    spec = importlib.util.spec_from_file_location("tracker_shim_model", SHIM)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _args(repo_path: Path, cfg: model_config.ModelConfig, kind: str) -> dict[str, str]:
    """What Triton's Python backend passes to initialize()."""
    from google.protobuf import json_format

    return {"model_config": json_format.MessageToJson(cfg, preserving_proto_field_name=True),
            "model_instance_kind": kind, "model_instance_device_id": "0",
            "model_repository": str(repo_path / cfg.name), "model_version": "1",
            "model_name": cfg.name}


def test_choose_providers() -> None:
    choose = _shim().choose_providers
    assert choose("CPU") == ["CPUExecutionProvider"]
    assert choose("KIND_CPU") == ["CPUExecutionProvider"]
    assert choose("GPU", 1) == [("CUDAExecutionProvider", {"device_id": 1}),
                                "CPUExecutionProvider"]
    assert choose("KIND_GPU")[0][0] == "CUDAExecutionProvider"


def test_production_and_served_configs(tmp_path: Path,
                                       quickstart_info: model_config.ModelInfo) -> None:
    cfg = model_config.apply(quickstart_info, {"instance_group.count": 2, "max_batch_size": 8},
                             supports_batching=True)
    repo = write_repository(tmp_path, quickstart_info, cfg, serving="python", ort_threads=(2, 1))
    prod, served = repo.production_config, repo.served_config
    assert (prod.backend, prod.platform) == ("onnxruntime", "onnxruntime_onnx")
    assert prod.parameters["intra_op_thread_count"].string_value == "2"
    assert prod.parameters["inter_op_thread_count"].string_value == "1"
    assert "onnx_file" not in prod.parameters
    assert (served.backend, served.platform) == ("python", "")
    assert served.parameters["onnx_file"].string_value == "model.onnx"
    for c in (prod, served):  # the knobs under test are the same in both
        assert (c.max_batch_size, c.instance_group[0].count) == (8, 2)
    model_dir = tmp_path / "quickstart"
    text = (model_dir / "config.pbtxt").read_text()
    assert text.startswith("# Served config") and model_config.parse(text) == served
    assert model_config.load(model_dir / "production_config.pbtxt") == prod
    assert (model_dir / "1" / "model.py").read_text() == SHIM.read_text()
    onnx_copy = model_dir / "1" / "model.onnx"
    assert onnx_copy.read_bytes() == Path(quickstart_info.model_file).read_bytes()

    native = write_repository(tmp_path / "native", quickstart_info, cfg, serving="onnxruntime")
    assert native.served_config == native.production_config
    assert not (tmp_path / "native" / "quickstart" / "1" / "model.py").exists()
    assert not (tmp_path / "native" / "quickstart" / "production_config.pbtxt").exists()
    assert os.path.samefile(onnx_copy, tmp_path / "native" / "quickstart" / "1" / "model.onnx")


def test_missing_model_file_is_a_model_error(tmp_path: Path,
                                             quickstart_info: model_config.ModelInfo) -> None:
    from dataclasses import replace

    info = replace(quickstart_info, model_file=tmp_path / "gone.onnx")
    with pytest.raises(ModelError, match=r"gone\.onnx"):
        write_repository(tmp_path / "r", info, info.config, serving="python")


def test_session_follows_instance_kind_and_threads(tmp_path: Path,
                                                   quickstart_info: model_config.ModelInfo) -> None:
    """make_session is what initialize() runs: the CPU kind gets a CPU session with the
    configured threads; a GPU instance without the CUDA provider is refused with a reason."""
    shim = _shim()
    repo = write_repository(tmp_path, quickstart_info, quickstart_info.config, serving="python",
                            ort_threads=(2, 1))
    session = shim.make_session(_args(tmp_path, repo.served_config, "CPU"))
    assert session.get_providers() == ["CPUExecutionProvider"]
    options = session.get_session_options()
    assert (options.intra_op_num_threads, options.inter_op_num_threads) == (2, 1)
    if "CUDAExecutionProvider" in ort.get_available_providers():
        gpu = shim.make_session(_args(tmp_path, repo.served_config, "GPU"))
        assert gpu.get_providers()[0] == "CUDAExecutionProvider"
    else:
        with pytest.raises(RuntimeError, match=r"needs onnxruntime provider.*CUDAExecution"):
            shim.make_session(_args(tmp_path, repo.served_config, "GPU"))


@pytest.mark.triton
def test_dynamic_batching_merges_requests_and_splits_answers(
        tmp_path: Path, quickstart_info: model_config.ModelInfo) -> None:
    """16 concurrent requests of different batch sizes, a queue delay so Triton merges them:
    every answer must be its own request's result, and Triton must have run fewer batches
    than requests."""
    cfg = model_config.apply(quickstart_info, {
        "max_batch_size": 16, "instance_group.count": 1,
        "dynamic_batching.max_queue_delay_microseconds": 20000}, supports_batching=True)
    repo = write_repository(tmp_path, quickstart_info, cfg, serving="python")
    reference = ort.InferenceSession(str(quickstart_info.model_file))
    rng = np.random.default_rng(3)
    inputs = [rng.random((1 + i % 3, 64)).astype(np.float32) for i in range(16)]
    with LocalTritonServer() as server:
        server.start(repo.path)
        endpoints = server.endpoints

        def one(x: np.ndarray) -> np.ndarray:
            with TritonClient(endpoints) as client:
                return client.infer_once("quickstart", repo.served_config, {"INPUT0": x})[
                    "OUTPUT0"]

        with ThreadPoolExecutor(16) as pool:
            answers = list(pool.map(one, inputs))
        with server.client() as client:
            stats = client.statistics("quickstart")
        log = server.log_text()
    # the stub's per-response DLPack capsule traceback is silenced (said once, not per answer)
    assert "Traceback" not in log, log[-2000:]
    assert log.count("PyCapsule_GetPointer") <= 1
    for x, got in zip(inputs, answers, strict=True):
        np.testing.assert_allclose(got, reference.run(None, {"INPUT0": x})[0],
                                   rtol=1e-5, atol=1e-6)
    assert stats.inference_count == sum(len(x) for x in inputs)
    assert stats.success_count == 16
    assert stats.execution_count < 16, f"no request was batched: {stats}"


def test_served_config_round_trips_as_a_load_override(quickstart_info: model_config.ModelInfo,
                                                      tmp_path: Path) -> None:
    """The JSON sent with load_model(config=...) parses back to the same ModelConfig."""
    from google.protobuf import json_format

    repo = write_repository(tmp_path, quickstart_info, quickstart_info.config, serving="python")
    text = json_format.MessageToJson(repo.served_config, preserving_proto_field_name=True)
    back = json_format.Parse(text, model_config.ModelConfig())
    assert back == repo.served_config
    assert json.loads(text)["backend"] == "python"


def test_tensor_path_follows_the_stubs_numpy_abi() -> None:
    """The stubs on PyPI are built for numpy 1: with numpy 1 the shim must use their numpy glue
    (a DLPack output kills nvidia-pytriton 0.7.0's stub), with numpy 2 DLPack (the glue hands
    the server zero-sized arrays). Both paths are exercised for real by the triton tests of
    the locked set (numpy 2) and of the plain install (numpy 1, scripts/plain-install.sh)."""
    glue = _shim().numpy_glue_works
    assert glue("1.26.4") and glue("1.24.0")
    assert not glue("2.0.0") and not glue("2.4.6")
    assert glue() == (int(np.__version__.split(".")[0]) < 2)
