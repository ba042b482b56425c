"""The model formats without a server: which format reads which directory, the knobs each
backend reads, and what `tracker check` refuses before anything starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.support import models
from tests.support.formats import python_scale_model, spec, torchscript_model
from tracker.cli import cli
from tracker.errors import ConfigError, ModelError, SpecError
from tracker.search.space import check_space
from tracker.triton import formats, model_config
from tracker.triton.configuration import Configuration
from tracker.triton.formats.knobs import BY_BACKEND, SHARED
from tracker.triton.repository import write_repository


def _check(path: Path) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["check", str(path)])
    return result.exit_code, result.output


def test_each_format_reads_its_directory(tmp_path: Path) -> None:
    py = formats.load_model_info(python_scale_model(tmp_path), "scaled")
    assert (py.format, py.config.backend, py.config.name) == ("python", "python", "scaled")
    assert py.supports_batching and py.model_file == tmp_path / "pyscale"
    ts = formats.load_model_info(torchscript_model(tmp_path), "ts")
    assert (ts.format, ts.config.platform) == ("config", "pytorch_libtorch")
    onnx = formats.load_model_info(models.dynamic_batch(tmp_path / "m.onnx"), "m")
    assert onnx.format == "onnx" and onnx.config.backend == "onnxruntime"


def test_python_model_knobs_are_its_parameters_and_the_shared_ones(tmp_path: Path) -> None:
    info = formats.load_model_info(python_scale_model(tmp_path), "pyscale")
    paths = [k.path for k in formats.format_of(info).knobs(info)]
    assert paths[:len(SHARED)] == [k.path for k in SHARED]
    assert "parameters.SCALE" in paths and "parameters.FORCE_CPU_ONLY_INPUT_TENSORS" in paths
    check_space({"parameters.SCALE": [2, 3], "instance_group.count": [1, 2]},
                Configuration.of(info))
    with pytest.raises(SpecError, match=r"search.space.parameters.intra_op_thread_count: the "
                                        r"python backend does not read this knob.*SCALE"):
        check_space({"parameters.intra_op_thread_count": [1, 2]}, Configuration.of(info))


def test_catalog_names_each_backends_documented_knobs() -> None:
    assert {"onnxruntime", "pytorch", "tensorrt", "tensorflow", "openvino",
            "python"} <= set(BY_BACKEND)
    ort = {k.path for k in BY_BACKEND["onnxruntime"]}
    assert {"parameters.intra_op_thread_count", "parameters.execution_mode",
            "optimization.graph.level"} <= ort
    for backend, catalog in {**BY_BACKEND, "shared": SHARED}.items():  # settable fields
        for knob in catalog:
            if not knob.path.startswith("parameters."):
                model_config.check_path(knob.path)
            assert knob.what, (backend, knob.path)


def test_trial_directory_is_the_users_directory_with_the_trials_config(tmp_path: Path) -> None:
    info = formats.load_model_info(python_scale_model(tmp_path / "src"), "pyscale")
    cfg = model_config.apply(info, {"instance_group.count": 2, "parameters.SCALE": 3})
    repo = write_repository(tmp_path / "trial", info, cfg, serving=None)
    assert repo.served_config == repo.production_config and not repo.shimmed
    assert (repo.model_dir / "1" / "model.py").read_text().startswith("\nimport json")
    assert (repo.model_dir / "1" / "notes.txt").is_file()
    loaded = model_config.load(repo.served_config_path)
    assert loaded.backend == "python" and loaded.parameters["SCALE"].string_value == "3"
    assert loaded.instance_group[0].count == 2


def test_config_driven_model_needs_its_io_in_config(tmp_path: Path) -> None:
    model_dir = torchscript_model(tmp_path)
    (model_dir / "config.pbtxt").write_text('name: "x"\nplatform: "pytorch_libtorch"\n')
    with pytest.raises(ConfigError, match=r"must list its inputs in config\.pbtxt"):
        formats.load_model_info(model_dir, "x")
    bare = tmp_path / "bare"
    (bare / "1").mkdir(parents=True)
    with pytest.raises(ModelError, match=r"no config.pbtxt and no <version>/model\.onnx"):
        formats.load_model_info(bare, "bare")


def test_torchscript_on_the_local_server_is_refused_by_check(tmp_path: Path) -> None:
    model_dir = torchscript_model(tmp_path)
    code, out = _check(spec(tmp_path / "local.yaml", model_dir, "server: {mode: local}\n"))
    assert code == 1, out
    assert "'pytorch' backend" in out and "docker" in out and "remote" in out
    assert "Traceback" not in out
    code, out = _check(spec(tmp_path / "docker.yaml", model_dir, "server: {mode: docker}\n"))
    assert code == 0, out
    assert "config format, backend pytorch" in out
    assert "parameters.INFERENCE_MODE" in out  # the PyTorch backend's knobs are listed


def test_input_data_with_a_wrong_input_name_fails_check(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the input check, whatever numpy this environment has (numpy 2: the stub check refuses)
    monkeypatch.setattr("tracker.triton.shim.model.numpy_glue_works", lambda: True)
    model_dir = python_scale_model(tmp_path)
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"data": [{"INPUT0": [1.0, 2.0, 3.0, 4.0]}]}))
    code, out = _check(spec(tmp_path / "ok.yaml", model_dir, f"load: {{input_data: {good}}}\n"))
    assert code == 0, out
    assert "1 sample(s)" in out
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"data": [{"INPUT0": [1.0, 2.0, 3.0, 4.0], "IMAGE": [1]}]}))
    code, out = _check(spec(tmp_path / "bad.yaml", model_dir, f"load: {{input_data: {bad}}}\n"))
    assert code == 1 and "'IMAGE'" in out and "load.input_data" in out, out
    short = tmp_path / "short.json"
    short.write_text(json.dumps({"data": [{"INPUT0": [1.0, 2.0]}]}))
    code, out = _check(spec(tmp_path / "s.yaml", model_dir, f"load: {{input_data: {short}}}\n"))
    assert code == 1 and "must have shape [4]" in out, out


def test_check_refuses_ort_threads_with_a_searched_thread_count(tmp_path: Path) -> None:
    onnx = models.dynamic_batch(tmp_path / "m.onnx")
    path = tmp_path / "s.yaml"
    path.write_text(f"model: {{name: m, path: {onnx}}}\nserver: {{ort_intra_op_threads: 2}}\n"
                    "search: {space: {parameters.intra_op_thread_count: [1, 2]}}\n")
    code, out = _check(path)
    assert code == 1 and "server.ort_intra_op_threads=2" in out, out
    path.write_text(f"model: {{name: m, path: {onnx}}}\n"
                    "search: {space: {parameters.intra_op_thread_count: [1, 2]}}\n")
    assert _check(path)[0] == 0


def test_python_model_with_numpy_2_on_the_embedded_stub_is_refused_by_check(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The wheels' Python backend stubs are built for numpy 1: with numpy 2 a user's model.py
    gets zeros from as_numpy() (seen: nvidia-pytriton 0.5.7, numpy 2.4.6). check says so
    instead of letting a study measure a model that computes on zeros."""
    model_dir = python_scale_model(tmp_path)
    local = spec(tmp_path / "local.yaml", model_dir, "server: {mode: local}\n")
    monkeypatch.setattr("tracker.triton.shim.model.numpy_glue_works", lambda: False)
    code, out = _check(local)
    assert code == 1, out
    assert "numpy 1" in out and "numpy<2" in out and "server.mode: docker" in out
    assert "Traceback" not in out
    code, out = _check(spec(tmp_path / "docker.yaml", model_dir, "server: {mode: docker}\n"))
    assert code == 0, out  # an NGC image's stub matches its own Python
    monkeypatch.setattr("tracker.triton.shim.model.numpy_glue_works", lambda: True)
    code, out = _check(local)
    assert code == 0, out
