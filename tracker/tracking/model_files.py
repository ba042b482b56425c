"""The study's model files in MLflow: stored once per study, never per trial.

A trial's artifacts are sized by its config (``config.pbtxt``, ``perf.csv``, ``server.log``:
tens of KB); the model file (``model.onnx``, possibly hundreds of MB) is uploaded once, as the
artifact folder ``study_model/`` of the parent run that first needed it. Where it lives is
recorded twice:

- on the Optuna study, user attribute ``model_files`` (``{"run_id", "path", "file",
  "sha256", "bytes"}``): a resumed study (a new parent run) and every other worker read it and
  reuse the upload when the digest of their model file matches; a changed model file is
  uploaded again (to the current parent);
- on every measured trial's run, tags ``tracker.model_files`` (``runs:/<run>/study_model``)
  and ``tracker.model_sha256``: ``tracker promote`` builds the registered model from the files
  the winning trial was measured with, plus its production config.

This module does the MLflow side only; the lock and the study attribute are the caller's
(:mod:`tracker.candidate.model_store`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from tracker import tags
from tracker.errors import TrackingError
from tracker.tracking.runs import storage_error

STUDY_ATTR = "model_files"          # Optuna study user attribute
ARTIFACT_DIR = "study_model"        # artifact folder on the parent run that stored the files
TAG_URI = tags.MODEL_FILES
TAG_SHA = tags.MODEL_SHA256


def _files(path: Path) -> list[Path]:
    """The files of a model directory (caches left out), or the file itself."""
    if not path.is_dir():
        return [path]
    return sorted(p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts)


def sha256_of(path: Path) -> str:
    """The digest of a model file, or of a model directory's file names and contents."""
    digest = hashlib.sha256()
    for file in _files(path):
        if path.is_dir():
            digest.update(str(file.relative_to(path)).encode() + b"\0")
        with file.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


@dataclass(frozen=True)
class StoredModel:
    """Where the study's model file is stored in MLflow."""

    run_id: str
    file: str          # name inside the folder: model.onnx, or a model directory's name
    sha256: str
    bytes: int
    path: str = ARTIFACT_DIR

    @property
    def uri(self) -> str:
        return f"runs:/{self.run_id}/{self.path}"

    def as_attr(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "path": self.path, "file": self.file,
                "sha256": self.sha256, "bytes": self.bytes}

    @classmethod
    def from_attr(cls, value: object) -> StoredModel | None:
        if not isinstance(value, Mapping):
            return None
        try:
            return cls(run_id=str(value["run_id"]), file=str(value["file"]),
                       sha256=str(value["sha256"]), bytes=int(value["bytes"]),
                       path=str(value.get("path", ARTIFACT_DIR)))
        except (KeyError, TypeError, ValueError):
            return None

    def tags(self) -> dict[str, str]:
        return {TAG_URI: self.uri, TAG_SHA: self.sha256}


def is_present(client: MlflowClient, stored: StoredModel) -> bool:
    """The stored file is still there (its run not deleted, the artifact listed)."""
    try:
        run = client.get_run(stored.run_id)
        if run.info.lifecycle_stage == "deleted":
            return False
        names = {f.path for f in client.list_artifacts(stored.run_id, stored.path)}
    except MlflowException:
        return False
    return f"{stored.path}/{stored.file}" in names


def upload(client: MlflowClient, run_id: str, model_file: Path, *,
           sha256: str | None = None) -> StoredModel:
    """Upload ``model_file`` (a file, or a whole model directory) once as
    ``study_model/<its name>`` of run ``run_id``."""
    try:
        if model_file.is_dir():
            client.log_artifacts(run_id, str(model_file), f"{ARTIFACT_DIR}/{model_file.name}")
        else:
            client.log_artifact(run_id, str(model_file), ARTIFACT_DIR)
    except MlflowException as exc:
        raise TrackingError(f"MLflow could not store the model file {model_file}: {exc}") from exc
    except OSError as exc:
        raise storage_error(f"the model file {model_file}", exc) from exc
    return StoredModel(run_id=run_id, file=model_file.name,
                       sha256=sha256 or sha256_of(model_file),
                       bytes=sum(f.stat().st_size for f in _files(model_file)))


def stored_for_run(client: MlflowClient, run_id: str) -> StoredModel | None:
    """The stored model a trial's run names in its tags (None for runs of older versions)."""
    try:
        tags = client.get_run(run_id).data.tags
    except MlflowException as exc:
        raise TrackingError(f"MLflow could not read run {run_id}: {exc}") from exc
    uri, sha = tags.get(TAG_URI), tags.get(TAG_SHA)
    if not uri or not uri.startswith("runs:/"):
        return None
    owner, _, path = uri[len("runs:/"):].partition("/")
    try:
        listed = list(client.list_artifacts(owner, path or ARTIFACT_DIR))
    except MlflowException as exc:
        raise TrackingError(f"MLflow could not list the study's model files {uri}: {exc}") from exc
    if not listed:
        return None
    first = listed[0]
    return StoredModel(run_id=owner, file=Path(first.path).name, sha256=sha or "",
                       bytes=int(first.file_size or 0), path=path or ARTIFACT_DIR)


def download(client: MlflowClient, stored: StoredModel, dst: Path) -> Path:
    """The stored model file (or directory), downloaded into folder ``dst``; its path."""
    try:
        local = client.download_artifacts(stored.run_id, f"{stored.path}/{stored.file}", str(dst))
    except (MlflowException, OSError) as exc:
        raise TrackingError(f"MLflow could not download the study's model file "
                            f"{stored.uri}/{stored.file}: {exc}") from exc
    return Path(local)
