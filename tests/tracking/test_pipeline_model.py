"""A pipeline trial's registered model (tracking/winner.py, flavor.py), built
from artifacts shaped as the study side logs them, on a real sqlite MLflow store: the MLflow
model holds every model with its production config, MLmodel names the entry and the load
order, and what is missing or inconsistent is refused with a message that names it."""

from __future__ import annotations

import json
from pathlib import Path

import mlflow
import pytest
import yaml

from tests.support import models
from tests.support.pipeline_deploy import Names, PipelineStudy, configs, ensemble_config
from tracker import tags
from tracker.deploy.promote import model_source
from tracker.errors import DeployError
from tracker.tracking import foreign, model_files
from tracker.tracking.flavor import ModelOrder, TritonRepositoryDir, models_from_tags
from tracker.tracking.winner import log_winner

V1 = {"scale": 1, "tag": "v1"}


def test_a_pipeline_trial_becomes_one_mlflow_model_of_every_model(
        tmp_path: Path, mlflow_uri: str) -> None:
    names = Names()
    study = PipelineStudy(tmp_path, mlflow_uri, names, "p")
    study.add(V1, 10.0)
    run_id = study.study.trials[0].user_attrs["mlflow_run_id"]
    uri, model_id = model_source(study.client, run_id)
    assert model_id is not None and uri == f"models:/{model_id}"
    assert model_source(study.client, run_id) == (uri, model_id)  # promoted again: reused

    local = Path(mlflow.artifacts.download_artifacts(uri, dst_path=str(tmp_path / "dl")))
    mlmodel = yaml.safe_load((local / "MLmodel").read_text())
    triton = mlmodel["flavors"]["triton"]
    assert triton["models"] == names.order and triton["entry_model"] == names.entry
    assert (triton["layout"], triton["config_file"], triton["platform"]) == (
        "repository", f"{names.entry}/config.pbtxt", "ensemble")
    assert sorted(p.name for p in local.iterdir() if p.is_dir()) == sorted(names.order)
    for model in names.order:
        assert (local / model / "config.pbtxt").read_text() == configs(names, V1)[model]
    assert (local / names.scale / "1" / "model.py").is_file()
    # the entry's signature: a float input, a string output
    signature = json.loads(mlmodel["signature"]["outputs"])
    assert signature == [{"type": "tensor", "tensor-spec": {"dtype": "object", "shape": [-1, 1]},
                          "name": "LABEL"}]

    deployable = foreign.load_deployable(uri, tmp_path / "deploy", name=names.entry)
    assert isinstance(deployable.source, TritonRepositoryDir)
    assert deployable.layout == "repository"
    assert deployable.source.entries == (names.entry,)
    assert deployable.source.names == tuple(names.order)
    assert deployable.source.entry.platform == "ensemble"
    assert all(m.versions == (1,) for m in deployable.source.models)


def test_an_onnx_step_is_placed_under_its_config_file_name_and_an_ensemble_gets_its_1(
        tmp_path: Path, mlflow_uri: str) -> None:
    client = mlflow.MlflowClient(mlflow_uri)
    exp = client.create_experiment("x")
    parent = client.create_run(exp).info.run_id
    run = client.create_run(exp).info.run_id
    stored = tmp_path / "stored"
    (stored / "net" / "1").mkdir(parents=True)
    models.dynamic_batch(stored / "net" / "1" / "model.onnx", features_in=4, features_out=4)
    (stored / "post" / "1").mkdir(parents=True)
    (stored / "post" / "1" / "model.py").write_text("# a Python-backend step\n")
    # the ensemble stored nothing: no folder at all
    texts = {
        "net": 'name: "net"\nbackend: "onnxruntime"\ndefault_model_filename: "net.onnx"\n'
               'max_batch_size: 8\n',
        "post": 'name: "post"\nbackend: "python"\nmax_batch_size: 8\n',
        "ens": ensemble_config("ens", "net", "post"),
    }
    for model, text in texts.items():
        client.log_text(run, text, f"configs/{model}/config.pbtxt")
    found = model_files.upload(client, parent, stored)
    made = log_winner(client, run, found, ModelOrder(("net", "post", "ens"), ("ens",)))
    local = Path(mlflow.artifacts.download_artifacts(made.model_uri,
                                                     dst_path=str(tmp_path / "dl")))
    assert (local / "net" / "1" / "net.onnx").read_bytes() == (
        stored / "net" / "1" / "model.onnx").read_bytes()
    assert (local / "post" / "1" / "model.py").is_file()
    deployable = foreign.load_deployable(made.model_uri, tmp_path / "deploy", name="ens")
    assert isinstance(deployable.source, TritonRepositoryDir)
    assert deployable.source.entry.versions == (1,)


def test_what_is_missing_is_named(tmp_path: Path, mlflow_uri: str) -> None:
    names = Names()
    study = PipelineStudy(tmp_path, mlflow_uri, names, "p")
    study.add(V1, 10.0)
    run_id = study.study.trials[0].user_attrs["mlflow_run_id"]
    stored = model_files.stored_for_run(study.client, run_id)
    assert stored is not None
    with pytest.raises(DeployError, match=r"no production config for \['extra'\]"):
        log_winner(study.client, run_id, stored,
                            ModelOrder(("extra", *names.order), (names.entry,)))
    # a Python step the stored folder does not hold
    other = study.client.create_run(study.exp).info.run_id
    study.client.log_text(other, 'name: "ghost"\nbackend: "python"\n',
                          "configs/ghost/config.pbtxt")
    for model in names.order:
        study.client.log_text(other, configs(names, V1)[model], f"configs/{model}/config.pbtxt")
    with pytest.raises(DeployError, match="have no folder for model 'ghost'"):
        log_winner(study.client, other, stored,
                            ModelOrder(("ghost", *names.order), (names.entry,)))


@pytest.mark.parametrize(("value", "entry", "message"), [
    ('["a", "b"]', "c", "the entry model 'c' is not in"),
    ("[]", "", "the entry model .. is not in"),
    ('["a", "a", "b"]', "b", "each model is listed once"),
    ("a,b", "b", "must be a JSON list"),
    ('["a", "../b"]', "../b", "Path traversal"),
])
def test_the_models_tag_is_checked(value: str, entry: str, message: str) -> None:
    with pytest.raises(DeployError, match=message):
        models_from_tags({tags.MODELS: value, tags.ENTRY_MODEL: entry})


def test_the_entries_are_the_first_entry_and_every_model_after_it() -> None:
    assert models_from_tags({tags.MODEL_FILES: "runs:/x/study_model"}) is None
    assert models_from_tags({tags.MODELS: '["pre", "net", "pipe"]',
                             tags.ENTRY_MODEL: "pipe"}) == ModelOrder(("pre", "net", "pipe"),
                                                                       ("pipe",))
    # several entry models: the study orders them last, the first one in tracker.entry_model
    assert models_from_tags({tags.MODELS: '["prep", "pipe", "other"]',
                             tags.ENTRY_MODEL: "pipe"}) == ModelOrder(("prep", "pipe", "other"),
                                                                       ("pipe", "other"))
