"""A pipeline as one MLflow model: the ``triton`` flavor over a subset of a model repository.

A configuration of several models (an ensemble or BLS entry model and its composing models)
is registered as one version. The MLflow model IS the repository subset, with the MLmodel file
beside the model directories::

    MLmodel               flavors: {triton: {model_name: <entry>, entry_model: <entry>,
                                             models: [<composing>..., <entry>],
                                             layout: repository, config_file:
                                             <entry>/config.pbtxt, backend, platform}}
    <model>/config.pbtxt  each model's production configuration
    <model>/<version>/    each model's files (an ensemble's version folder may be empty)

``models`` is the load order: every composing model before the models that call it, the
entry last. A single model keeps the layout of :mod:`tracker.tracking.flavor` (the model
directory at the root, no ``models`` key).

An empty version folder (an ensemble's ``1/``) does not survive every artifact store, so
reading a pipeline gives an ensemble without one its ``1/`` again.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlflow.models import Model

from tracker import tags as tag_names
from tracker.errors import DeployError, ModelError
from tracker.tracking.flavor import (
    CONFIG_FILE,
    FLAVOR_NAME,
    LoggedTritonModel,
    TritonModelDir,
    inspect_model_dir,
    log_saved,
    validate_model_name,
)
from tracker.triton import model_config

LAYOUT = "repository"
ENSEMBLE = "ensemble"


@dataclass(frozen=True)
class TritonRepositoryDir:
    """A pipeline on disk: ``path/<model>/`` for every model, ``models`` in load order (the
    entry last)."""

    path: Path
    models: tuple[TritonModelDir, ...]

    @property
    def entry(self) -> TritonModelDir:
        return self.models[-1]

    @property
    def composing(self) -> tuple[TritonModelDir, ...]:
        return self.models[:-1]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(m.name for m in self.models)


def check_order(models: Sequence[str], entry: str, *, where: str) -> tuple[str, ...]:
    """``models`` (load order) as a tuple, checked: valid, distinct names, at least two, the
    entry last. ``where`` names what they came from in the error."""
    names = tuple(str(m) for m in models)
    problems = []
    if len(names) < 2:
        problems.append(f"a pipeline has at least two models, but got {list(names)}")
    if len(set(names)) != len(names):
        problems.append(f"each model is listed once, but got {list(names)}")
    if not names or names[-1] != entry:
        problems.append(f"the entry model {entry!r} comes last, but the list is {list(names)}")
    if problems:
        raise DeployError(f"{where}: " + "; ".join(problems))
    for name in names:
        validate_model_name(name)
    return names


def models_from_tags(run_tags: Mapping[str, str]) -> tuple[str, ...] | None:
    """The load order a trial run's tags ``tracker.models`` / ``tracker.entry_model`` give, or
    None for a single model's run (no ``tracker.models`` tag)."""
    raw = run_tags.get(tag_names.MODELS)
    if not raw:
        return None
    try:
        models = json.loads(raw)
    except ValueError as exc:
        raise DeployError(f"tag {tag_names.MODELS} must be a JSON list of model names, but got "
                          f"{raw[:200]!r}") from exc
    if not isinstance(models, list) or not all(isinstance(m, str) for m in models):
        raise DeployError(f"tag {tag_names.MODELS} must be a JSON list of model names, but got "
                          f"{raw[:200]!r}")
    entry = run_tags.get(tag_names.ENTRY_MODEL) or (models[-1] if models else "")
    return check_order(models, entry,
                       where=f"the run's tags {tag_names.MODELS}/{tag_names.ENTRY_MODEL}")


def _model_dir(root: Path, name: str) -> TritonModelDir:
    path = root / name
    if not (path / CONFIG_FILE).is_file():
        raise ModelError(f"the pipeline has no {name}/{CONFIG_FILE} (under {root})")
    cfg = model_config.load(path / CONFIG_FILE)
    if cfg.name and cfg.name != name:
        raise ModelError(f"{path / CONFIG_FILE} names the model {cfg.name!r}, but its folder is "
                         f"{name!r}: Triton needs them to be the same")
    has_version = any(p.is_dir() and p.name.isdigit() and int(p.name) > 0
                      for p in path.iterdir())
    if cfg.platform == ENSEMBLE and not has_version:
        (path / "1").mkdir()  # an empty version folder an artifact store did not keep
    return inspect_model_dir(path)


def inspect_repository_dir(root: str | Path, models: Sequence[str]) -> TritonRepositoryDir:
    """Check that ``root`` holds a model directory for each of ``models`` (load order, entry
    last) and describe it; :class:`ModelError` names the model that is missing or broken."""
    path = Path(root)
    names = check_order(models, str(models[-1]) if models else "", where=str(path))
    return TritonRepositoryDir(path=path, models=tuple(_model_dir(path, n) for n in names))


def is_pipeline(conf: Mapping[str, Any] | None) -> bool:
    """Whether an MLmodel's ``triton`` flavor configuration describes a pipeline."""
    return bool(conf) and conf is not None and conf.get("layout") == LAYOUT


def read_pipeline(local: Path, conf: Mapping[str, Any]) -> TritonRepositoryDir:
    """The pipeline a downloaded MLflow model of this layout holds."""
    models = conf.get("models")
    if not isinstance(models, list) or not models:
        raise ModelError(f"the MLmodel of {local} names no models (flavors.triton.models)")
    entry = str(conf.get("entry_model") or models[-1])
    check_order([str(m) for m in models], entry, where=f"{local}/MLmodel flavors.triton")
    return inspect_repository_dir(local, [str(m) for m in models])


def save_pipeline(repo: TritonRepositoryDir, path: str | Path,
                  mlflow_model: Model | None = None) -> Model:
    """Write the pipeline ``repo`` as an MLflow model at ``path`` (which must not exist):
    each model's config.pbtxt and numeric version folders, and MLmodel (module docstring)."""
    dst = Path(path)
    if dst.exists():
        raise ModelError(f"cannot save an MLflow model to {dst}: it already exists")
    dst.mkdir(parents=True)
    for model in repo.models:
        target = dst / model.name
        target.mkdir()
        shutil.copy2(model.config_path, target / CONFIG_FILE)
        for version in model.versions:
            shutil.copytree(model.path / str(version), target / str(version),
                            ignore=shutil.ignore_patterns("__pycache__"))
    entry = repo.entry
    out = mlflow_model if mlflow_model is not None else Model()
    out.add_flavor(FLAVOR_NAME, model_name=entry.name, entry_model=entry.name,
                   models=list(repo.names), layout=LAYOUT,
                   config_file=f"{entry.name}/{CONFIG_FILE}", versions=list(entry.versions),
                   backend=entry.backend, platform=entry.platform)
    out.save(str(dst / "MLmodel"))
    return out


def log_pipeline_model(repo: TritonRepositoryDir, run_id: str, *, tracking_uri: str | None,
                       tags: dict[str, str] | None = None,
                       signature: Any = None) -> LoggedTritonModel:
    """Log the pipeline as the MLflow model ``model`` of run ``run_id`` (thread-safe, as
    :func:`tracker.tracking.flavor.log_triton_model`); ``signature``: the entry's."""
    def save(local: Path, model: Model) -> Model:
        if signature is not None:
            model.signature = signature
        return save_pipeline(repo, local, model)

    return log_saved(save, f"pipeline {list(repo.names)}", run_id, tracking_uri=tracking_uri,
                     tags=tags)
