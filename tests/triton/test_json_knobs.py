"""Knobs kept in a JSON file of the model directory (``model.json:KEY``): the spec's form, the
check against the model's files, and the trial's copy of the file. No server here; the
end-to-end study is tests/tuning/test_tune_file_knobs.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.support import models
from tests.support.formats import python_scale_model, spec
from tracker.cli import cli
from tracker.errors import ConfigError, ModelError, SpecError
from tracker.search.baseline import fit_baseline
from tracker.search.space import check_space, distributions
from tracker.spec import load_spec
from tracker.triton import formats, model_config
from tracker.triton.configuration import Configuration
from tracker.triton.formats import json_knobs
from tracker.triton.repository import write_model


def _vllm_like(tmp_path: Path) -> Path:
    """A model directory with vLLM's layout: ``1/model.json`` holding engine arguments."""
    model_dir = python_scale_model(tmp_path)
    (model_dir / "1" / "model.json").write_text(json.dumps(
        {"model": "facebook/opt-125m", "gpu_memory_utilization": 0.5, "max_num_seqs": 64,
         "enforce_eager": True}))
    return model_dir


def _check(path: Path) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["check", str(path)])
    return result.exit_code, result.output


@pytest.mark.parametrize(("key", "message"), [
    ("model.txt:max_num_seqs", "a file knob is 'FILE.json:KEY'"),
    ("model.json:", "the key part is empty"),
    ("../model.json:max_num_seqs", "without '.' or '..'"),
    ("/etc/model.json:max_num_seqs", "without '.' or '..'"),
])
def test_the_spec_refuses_a_file_knob_of_the_wrong_form(tmp_path: Path, key: str,
                                                        message: str) -> None:
    path = tmp_path / "study.yaml"
    path.write_text(f"model: {{name: m, path: m.onnx}}\nsearch: {{space: {{'{key}': [1, 2]}}}}\n")
    with pytest.raises(SpecError) as err:
        load_spec(path)
    assert f"search.space.{key}" in str(err.value) and message in str(err.value)


def test_check_accepts_a_file_and_key_the_model_has(tmp_path: Path) -> None:
    model_dir = _vllm_like(tmp_path)
    code, out = _check(spec(tmp_path / "s.yaml", model_dir,
                            "search: {space: {model.json:max_num_seqs: [32, 64],"
                            " model.json:gpu_memory_utilization: {low: 0.5, high: 0.9,"
                            " step: 0.2}}}\n"))
    assert code == 0, out
    assert "model.json:max_num_seqs" in out and "[32, 64]" in out
    assert "knobs in the model's JSON files (2)" in out
    assert "default 64" in out and "default 0.5" in out


@pytest.mark.parametrize(("space", "message"), [
    ("{model.json:max_num_seq: [1]}", "1/model.json has no key 'max_num_seq'; its keys are "
                                      "['enforce_eager', 'gpu_memory_utilization', 'max_num_seqs',"
                                      " 'model']"),
    ("{engine.json:max_num_seqs: [1]}", "has no engine.json (looked for 1/engine.json, "
                                        "engine.json)"),
    ("{2/model.json:max_num_seqs: [1]}", "has no 2/model.json (looked for 2/model.json)"),
])
def test_check_refuses_a_file_or_key_the_model_does_not_have(tmp_path: Path, space: str,
                                                             message: str) -> None:
    model_dir = _vllm_like(tmp_path)
    code, out = _check(spec(tmp_path / "s.yaml", model_dir, f"search: {{space: {space}}}\n"))
    assert code == 1
    assert "search.space." in out and message in out, out


def test_a_file_that_is_not_a_json_object_is_refused(tmp_path: Path) -> None:
    model_dir = python_scale_model(tmp_path)
    (model_dir / "list.json").write_text("[1, 2]")
    (model_dir / "1" / "broken.json").write_text("{not json")
    info = formats.load_model_info(model_dir, "pyscale")
    found = dict(json_knobs.problems(info, ["list.json:a", "broken.json:a"]))
    assert "must hold a JSON object" in found["list.json:a"]
    assert "is not valid JSON" in found["broken.json:a"]


def test_an_onnx_model_takes_no_file_knobs(tmp_path: Path) -> None:
    info = formats.load_model_info(models.dynamic_batch(tmp_path / "m.onnx"), "m")
    with pytest.raises(SpecError) as err:
        check_space({"model.json:max_num_seqs": [1, 2]}, Configuration.of(info))
    assert "file knobs need a model directory carried into each trial" in str(err.value)
    assert "read as onnx format" in str(err.value)


def test_a_bare_name_is_found_in_the_highest_version_then_at_the_top(tmp_path: Path) -> None:
    model_dir = python_scale_model(tmp_path)
    (model_dir / "2").mkdir()
    for where in ("1", "2", "."):
        (model_dir / where / "model.json").write_text("{}")
    (model_dir / "top.json").write_text("{}")
    assert json_knobs.locate(model_dir, "model.json") == model_dir / "2" / "model.json"
    assert json_knobs.locate(model_dir, "top.json") == model_dir / "top.json"
    assert json_knobs.locate(model_dir, "1/model.json") == model_dir / "1" / "model.json"


def test_the_trial_copy_gets_the_values_and_the_users_file_stays(tmp_path: Path) -> None:
    model_dir = _vllm_like(tmp_path)
    original = (model_dir / "1" / "model.json").read_text()
    info = formats.load_model_info(model_dir, "pyscale")
    values = {"instance_group.count": 2, "model.json:max_num_seqs": 16,
              "model.json:gpu_memory_utilization": 0.7}
    config, _load = model_config.split_params(values)
    assert config == {"instance_group.count": 2}
    cfg = model_config.apply(info, config)
    repo = write_model(tmp_path / "trial", info, cfg, serving=None,
                       files=json_knobs.file_values(values))
    written = repo.model_dir / "1" / "model.json"
    assert repo.knob_files == {"model.json": written}
    assert json.loads(written.read_text()) == {
        "model": "facebook/opt-125m", "gpu_memory_utilization": 0.7, "max_num_seqs": 16,
        "enforce_eager": True}
    assert (model_dir / "1" / "model.json").read_text() == original  # not through the link
    assert not written.samefile(model_dir / "1" / "model.json")
    # the default's values: the file is the user's, as it is (still the hard link)
    same = write_model(tmp_path / "trial0", info, info.config, serving=None,
                       logged=["model.json"])
    assert same.knob_files["model.json"].read_text() == original
    # a key the file lacks is never added
    with pytest.raises(ModelError, match="has no key 'max_num_seq'"):
        write_model(tmp_path / "trial1", info, cfg, serving=None,
                    files={"model.json:max_num_seq": 1})


def test_a_file_knob_is_no_config_field_and_its_default_comes_from_the_file(
        tmp_path: Path) -> None:
    info = formats.load_model_info(_vllm_like(tmp_path), "pyscale")
    with pytest.raises(ConfigError, match="key of a JSON file in the model directory"):
        model_config.apply(info, {"model.json:max_num_seqs": 8})
    space = {"model.json:max_num_seqs": [32, 128], "instance_group.count": [1, 2]}
    dists, base = fit_baseline(distributions(space), Configuration.of(info),
                               json_knobs.defaults(info, space))
    assert base.params == {"model.json:max_num_seqs": 64, "instance_group.count": 1}
    assert base.is_exact  # the space is widened to hold the file's own value
    assert 64 in dists["model.json:max_num_seqs"].choices  # type: ignore[attr-defined]
