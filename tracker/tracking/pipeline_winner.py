"""The registered model of the winner of a study of several models (a pipeline, several entry
models), built from what the study logged.

What a trial of a configuration of several models leaves (the study side's contract):

- tags ``tracker.models`` (a JSON list of every model name in load order, composing first,
  the entries last) and ``tracker.entry_model`` (the first entry: it and every model after
  it are the entries) on the trial's run;
- artifacts ``configs/<model>/config.pbtxt`` on the trial's run: each model's production
  config;
- the study's model files stored once (:mod:`tracker.tracking.model_files`) as ONE folder
  holding ``<model>/...`` for every model (a model directory's files, its config.pbtxt left
  out or ignored; an ONNX model as ``<model>/1/model.onnx``), named by the run's tags
  ``tracker.model_files`` / ``tracker.model_sha256`` as for one model.

:func:`log_pipeline_winner` puts each model's production config into its directory and logs
the whole as the MLflow model ``model`` of the trial's run
(:mod:`tracker.tracking.pipeline_flavor`), with the first entry's signature where MLflow
can express it.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path

from mlflow import MlflowClient
from mlflow.models import ModelSignature

from tracker import tags
from tracker.errors import DeployError, ModelError
from tracker.tracking import flavor
from tracker.tracking.mlflow_model import signature_for, stored_files, trial_artifacts, trial_text
from tracker.tracking.model_files import StoredModel
from tracker.tracking.pipeline_flavor import (
    ENSEMBLE,
    ModelOrder,
    inspect_repository_dir,
    log_pipeline_model,
)
from tracker.triton import model_config
from tracker.triton.formats.base import backend_of, copy_model_dir, link_or_copy

CONFIGS_DIR = "configs"  #: a trial run's artifacts: configs/<model>/config.pbtxt
ONNX_FILE = "model.onnx"


def config_artifact(model: str) -> str:
    return f"{CONFIGS_DIR}/{model}/{flavor.CONFIG_FILE}"


def _configs(client: MlflowClient, run_id: str, models: Sequence[str]) -> dict[str, str]:
    listed = {p for m in models for p in trial_artifacts(client, run_id, f"{CONFIGS_DIR}/{m}")}
    missing = [m for m in models if config_artifact(m) not in listed]
    if missing:
        raise DeployError(f"the trial's run {run_id} has no production config for "
                          f"{missing} (artifacts {[config_artifact(m) for m in missing]})")
    return {m: trial_text(client, run_id, config_artifact(m)) for m in models}


def _onnx_file(stored: Path, filename: str) -> Path | None:
    """The ONNX file of a stored model folder: ``1/<filename>``, ``1/model.onnx``, else the
    only ``.onnx`` file in its version folders."""
    for candidate in (stored / "1" / filename, stored / "1" / ONNX_FILE):
        if candidate.is_file():
            return candidate
    found = sorted(stored.glob("[0-9]*/*.onnx"))
    return found[0] if len(found) == 1 else None


def _place(name: str, production: str, stored: Path, dst: Path, uri: str) -> None:
    """Model ``name``'s directory at ``dst``: its stored files with the production config."""
    cfg = model_config.parse(production)
    source = stored / name
    if cfg.platform == ENSEMBLE:  # no files of its own; an empty 1/ may not have been kept
        if source.is_dir():
            copy_model_dir(source, dst)
        else:
            dst.mkdir(parents=True)
        if not any(p.is_dir() and p.name.isdigit() for p in dst.iterdir()):
            (dst / "1").mkdir()
    elif backend_of(cfg) == "onnxruntime":
        filename = cfg.default_model_filename or ONNX_FILE
        found = _onnx_file(source, filename) if source.is_dir() else None
        if found is None:
            raise DeployError(f"the study's stored model files ({uri}) have no ONNX file for "
                              f"model {name!r} (looked for {name}/1/{filename})")
        (dst / "1").mkdir(parents=True)
        link_or_copy(found, dst / "1" / filename)
    else:
        if not source.is_dir():
            raise DeployError(f"the study's stored model files ({uri}) have no folder for "
                              f"model {name!r}")
        copy_model_dir(source, dst)
    (dst / flavor.CONFIG_FILE).write_text(production)


def _signature(entry: str) -> ModelSignature | None:
    try:
        return signature_for(model_config.parse(entry))
    except (DeployError, ValueError, TypeError):
        return None  # a data type MLflow's tensor signature cannot say; the flavor is enough


def log_pipeline_winner(client: MlflowClient, run_id: str, stored: StoredModel,
                        order: ModelOrder) -> flavor.LoggedTritonModel:
    """Build the registered model of trial run ``run_id`` (the configuration of
    ``order.models``, load order, ``order.entries`` last) from the study's stored model files
    and the trial's production configs, and log it as the MLflow model ``model`` of that
    run."""
    models = order.models
    with tempfile.TemporaryDirectory(prefix="tracker-pipeline-") as tmp:
        configs = _configs(client, run_id, models)
        local = stored_files(client, stored, Path(tmp) / "files")
        if not local.is_dir():
            raise DeployError(f"the study's stored model files ({stored.uri}/{stored.file}) "
                              f"are one file, but a pipeline stores a folder per model "
                              f"{list(models)}")
        root = Path(tmp) / "repository"
        for name in models:
            _place(name, configs[name], local, root / name, stored.uri)
        try:
            repo = inspect_repository_dir(root, models, order.entries)
        except ModelError as exc:
            raise DeployError(f"the trial's pipeline cannot be assembled: {exc}") from exc
        return log_pipeline_model(repo, run_id, tracking_uri=str(client.tracking_uri),
                                  tags={tags.MODEL_SHA256: stored.sha256},
                                  signature=_signature(configs[order.entries[0]]))
