"""What the registered model of a single-model trial is built from, recorded as the one-entry
configuration or as trials were recorded before, and what each missing piece says (real
MLflow on sqlite, no server)."""

from __future__ import annotations

import json
from pathlib import Path

import mlflow
import pytest
from mlflow import MlflowClient
from mlflow.models import Model

from tracker.errors import DeployError
from tracker.tracking import model_files
from tracker.tracking.flavor import ModelOrder, models_from_tags, read_logged
from tracker.tracking.winner import log_winner

CONFIG = 'name: "echo"\nbackend: "python"\nmax_batch_size: 8\n'


def _stored(client: MlflowClient, exp: str, tmp: Path) -> model_files.StoredModel:
    folder = tmp / "echo"
    (folder / "1").mkdir(parents=True)
    (folder / "1" / "model.py").write_text("# the user's model\n")
    (folder / "1" / "model.json").write_text(json.dumps({"depth": 1}))
    (folder / "config.pbtxt").write_text(CONFIG)
    owner = client.create_run(exp).info.run_id
    return model_files.upload(client, owner, folder)


def _one_entry(client: MlflowClient, exp: str, tmp: Path
               ) -> tuple[model_files.StoredModel, str, ModelOrder | None]:
    """A trial recorded as the configuration of one entry: the stored folder holds
    ``echo/...`` without its config, the run has ``configs/echo/config.pbtxt`` and the tags."""
    folder = tmp / "configuration" / "echo"
    (folder / "1").mkdir(parents=True)
    (folder / "1" / "model.py").write_text("# the user's model\n")
    (folder / "1" / "model.json").write_text(json.dumps({"depth": 1}))
    owner = client.create_run(exp).info.run_id
    stored = model_files.upload(client, owner, folder.parent)
    run = client.create_run(exp).info.run_id
    client.log_text(run, CONFIG.replace("8", "16"), "configs/echo/config.pbtxt")
    client.log_text(run, CONFIG.replace("8", "16"), "config.pbtxt")
    client.set_tag(run, "tracker.models", json.dumps(["echo"]))
    client.set_tag(run, "tracker.entry_model", "echo")
    return stored, run, models_from_tags(client.get_run(run).data.tags)


def _recorded_before(client: MlflowClient, exp: str, tmp: Path
                     ) -> tuple[model_files.StoredModel, str, ModelOrder | None]:
    """A trial recorded without ``tracker.models``: the stored folder is the model's own."""
    stored = _stored(client, exp, tmp)
    run = client.create_run(exp).info.run_id
    client.log_text(run, CONFIG.replace("8", "16"), "config.pbtxt")
    return stored, run, None


@pytest.mark.parametrize("record", [_one_entry, _recorded_before])
def test_the_winner_is_built_from_the_trials_config_and_knob_files(
        tmp_path: Path, mlflow_uri: str, record: object) -> None:
    client = MlflowClient(mlflow_uri)
    exp = client.create_experiment("winner")
    stored, run, order = record(client, exp, tmp_path)  # type: ignore[operator]
    client.log_param(run, "model.json:depth", 3)
    client.log_text(run, json.dumps({"depth": 3}), "model.json")
    made = log_winner(client, run, stored, order)
    local = Path(mlflow.artifacts.download_artifacts(made.model_uri,
                                                     dst_path=str(tmp_path / "dl")))
    # the one layout: the model's directory under its name beside MLmodel
    assert not (local / "config.pbtxt").exists()
    assert "max_batch_size: 16" in (local / "echo" / "config.pbtxt").read_text()
    assert json.loads((local / "echo" / "1" / "model.json").read_text()) == {"depth": 3}
    (read,) = read_logged(local, Model.load(str(local)).flavors["triton"]).models
    assert read.name == "echo" and read.backend == "python"
    # the user's own folder is untouched
    for user in (tmp_path / "echo", tmp_path / "configuration" / "echo"):
        if user.exists():
            assert json.loads((user / "1" / "model.json").read_text()) == {"depth": 1}


def test_each_missing_piece_is_named(tmp_path: Path, mlflow_uri: str) -> None:
    client = MlflowClient(mlflow_uri)
    exp = client.create_experiment("winner")
    stored = _stored(client, exp, tmp_path)
    bare = client.create_run(exp).info.run_id
    with pytest.raises(DeployError, match=f"the trial's run {bare} has no config.pbtxt") as err:
        log_winner(client, bare, stored, None)
    assert "model files" not in str(err.value)  # not blamed on the stored files
    knob = client.create_run(exp).info.run_id
    client.log_text(knob, CONFIG, "config.pbtxt")
    client.log_param(knob, "model.json:depth", 3)  # its file was never logged
    with pytest.raises(DeployError, match=f"cannot read the trial's model.json: .*{knob}"):
        log_winner(client, knob, stored, None)
    gone = model_files.StoredModel(run_id=stored.run_id, file="nothing", sha256="",
                                   bytes=0, path=stored.path)
    with pytest.raises(DeployError, match="cannot read the trial's model files"):
        log_winner(client, knob, gone, None)
