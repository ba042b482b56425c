"""A configuration of models as one MLflow model: the ``triton`` flavor over a subset of a
model repository, and :class:`TritonRepositoryDir`, what every deployment publishes.

A configuration of several models (an ensemble or BLS entry model and its composing models,
or several independent entry models with theirs) is registered as one version. The MLflow
model IS the repository subset, with the MLmodel file beside the model directories::

    MLmodel               flavors: {triton: {model_name: <entry>, entry_model: <entry>,
                                             entries: [<entry>, ...],
                                             models: [<composing>..., <entries>...],
                                             layout: repository, config_file:
                                             <entry>/config.pbtxt, backend, platform}}
    <model>/config.pbtxt  each model's production configuration
    <model>/<version>/    each model's files (an ensemble's version folder may be empty)

``models`` is the load order: every composing model before the models that call it, the
entries last, in their order (``entries``; a model logged before several entry models were
published has ``entry_model`` alone, the last model). ``entry_model`` is the first entry.
A single model is logged in the layout of :mod:`tracker.tracking.flavor` (the model
directory at the root, no ``models`` key) and read as the one-model, one-entry case
(:func:`of_model_dir`).

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
    """Models on disk, ``models`` in load order; ``entries`` (the last models, in that
    order) are the ones clients call. One model is one model and one entry."""

    path: Path
    models: tuple[TritonModelDir, ...]
    entries: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.entries:  # the last model: a pipeline logged before ``entries`` existed
            object.__setattr__(self, "entries", (self.models[-1].name,))

    @property
    def entry(self) -> TritonModelDir:
        """The first entry: the model a deployment's name serves."""
        return next(m for m in self.models if m.name == self.entries[0])

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(m.name for m in self.models)


def of_model_dir(model: TritonModelDir) -> TritonRepositoryDir:
    """One model directory as the configuration of one model, its only entry."""
    return TritonRepositoryDir(path=model.path.parent, models=(model,), entries=(model.name,))


@dataclass(frozen=True)
class ModelOrder:
    """Every model of a configuration in load order, and its entries (the last ones)."""

    models: tuple[str, ...]
    entries: tuple[str, ...]


def check_order(models: Sequence[str], entries: Sequence[str], *, where: str) -> ModelOrder:
    """``models`` (load order) and ``entries``, checked: valid, distinct names, at least one,
    the entries last and in that order. ``where`` names what they came from in the error."""
    names = tuple(str(m) for m in models)
    ends = tuple(str(e) for e in entries)
    problems = []
    if not names:
        problems.append("a configuration has at least one model, but got none")
    if len(set(names)) != len(names):
        problems.append(f"each model is listed once, but got {list(names)}")
    if not ends or names[len(names) - len(ends):] != ends:
        problems.append(f"the entry models {list(ends)} come last, in that order, but the list "
                        f"is {list(names)}")
    if problems:
        raise DeployError(f"{where}: " + "; ".join(problems))
    for name in names:
        validate_model_name(name)
    return ModelOrder(names, ends)


def models_from_tags(run_tags: Mapping[str, str]) -> ModelOrder | None:
    """The load order and the entries a trial run's tags ``tracker.models`` /
    ``tracker.entry_model`` give (the entries: the first entry and every model after it, as
    the study orders them), or None for a run without ``tracker.models`` (one model, stored
    as a model file or directory rather than a folder of models)."""
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
    where = f"the run's tags {tag_names.MODELS}/{tag_names.ENTRY_MODEL}"
    if entry not in models:
        raise DeployError(f"{where}: the entry model {entry!r} is not in {models}")
    return check_order(models, models[models.index(entry):], where=where)


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


def inspect_repository_dir(root: str | Path, models: Sequence[str],
                           entries: Sequence[str] = ()) -> TritonRepositoryDir:
    """Check that ``root`` holds a model directory for each of ``models`` (load order, the
    ``entries`` last; default: the last model) and describe it; :class:`ModelError` names the
    model that is missing or broken."""
    path = Path(root)
    order = check_order(models, entries or [str(m) for m in models][-1:], where=str(path))
    return TritonRepositoryDir(path=path, models=tuple(_model_dir(path, n)
                                                       for n in order.models),
                               entries=order.entries)


def is_pipeline(conf: Mapping[str, Any] | None) -> bool:
    """Whether an MLmodel's ``triton`` flavor configuration has the repository layout."""
    return bool(conf) and conf is not None and conf.get("layout") == LAYOUT


def read_pipeline(local: Path, conf: Mapping[str, Any]) -> TritonRepositoryDir:
    """The configuration a downloaded MLflow model of this layout holds."""
    models = conf.get("models")
    if not isinstance(models, list) or not models:
        raise ModelError(f"the MLmodel of {local} names no models (flavors.triton.models)")
    entries = conf.get("entries") or [conf.get("entry_model") or models[-1]]
    if not isinstance(entries, list):
        raise ModelError(f"the MLmodel of {local}: flavors.triton.entries must be a list of "
                         f"model names, but got {entries!r}")
    return inspect_repository_dir(local, [str(m) for m in models], [str(e) for e in entries])


def save_pipeline(repo: TritonRepositoryDir, path: str | Path,
                  mlflow_model: Model | None = None) -> Model:
    """Write the configuration ``repo`` as an MLflow model at ``path`` (which must not exist):
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
                   entries=list(repo.entries), models=list(repo.names), layout=LAYOUT,
                   config_file=f"{entry.name}/{CONFIG_FILE}", versions=list(entry.versions),
                   backend=entry.backend, platform=entry.platform)
    out.save(str(dst / "MLmodel"))
    return out


def log_pipeline_model(repo: TritonRepositoryDir, run_id: str, *, tracking_uri: str | None,
                       tags: dict[str, str] | None = None,
                       signature: Any = None) -> LoggedTritonModel:
    """Log the configuration as the MLflow model ``model`` of run ``run_id`` (thread-safe, as
    :func:`tracker.tracking.flavor.log_triton_model`, tagged ``tracker.artifact_sha256`` as
    it is); ``signature``: the first entry's."""
    def save(local: Path, model: Model) -> Model:
        if signature is not None:
            model.signature = signature
        return save_pipeline(repo, local, model)

    def read(local: Path) -> tuple[TritonModelDir, ...]:  # as a download is read
        return read_pipeline(local, Model.load(str(local / "MLmodel")).flavors[FLAVOR_NAME]).models

    return log_saved(save, f"pipeline {list(repo.names)}", run_id, tracking_uri=tracking_uri,
                     tags=tags, read=read)
