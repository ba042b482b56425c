"""Any MLflow model that deploys to Triton, read into the configuration it serves
(:class:`~tracker.tracking.flavor.TritonRepositoryDir`: every model in load order,
its entries last; one model directory is the one-model, one-entry case):

- our ``triton`` flavor (:mod:`tracker.tracking.flavor`): the MLflow model IS the repository
  subset (or, for one model logged by an older version, the model directory itself);
- NVIDIA's ``triton`` flavor (mlflow-triton plugin, ``publish_model_to_mlflow.py``): MLmodel
  ``flavors: {triton: {data: <dir>}}`` with the Triton model directory nested at ``<dir>/``;
- the ``onnx`` flavor (``mlflow.onnx.log_model``): MLmodel ``flavors: {onnx: {data:
  model.onnx}}``. Its config is a ``config.pbtxt`` logged beside the model (in the model's
  folder, in ``extra_files/``, or, as NVIDIA's README does it with ``mlflow.log_artifact(path,
  "<model name>")``, in the run's artifacts under the model's name), completed from the ONNX
  file where it leaves fields out; without one it is derived from the ONNX file, the way this
  project derives a trial's default config. The model file and its external data files become
  version folder ``1/``.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlflow
from mlflow.exceptions import MlflowException
from mlflow.models import Model

from tracker.errors import ConfigError, DeployError, ModelError
from tracker.tracking.flavor import (
    CONFIG_FILE,
    FLAVOR_NAME,
    TritonModelDir,
    TritonRepositoryDir,
    inspect_model_dir,
    is_repository,
    of_model_dir,
    read_repository,
)

ONNX = "onnx"
FLAVORS = (FLAVOR_NAME, ONNX)
_REGISTRY = re.compile(r"^models:/(?P<name>[^/@]+)(?:/(?P<version>\d+)|@(?P<alias>[^/]+))/?$")
_LOGGED = re.compile(r"^models:/(?P<id>m-[0-9a-f]+)/?$")
_RUNS = re.compile(r"^runs:/(?P<run>[^/]+)/(?P<path>.+?)/?$")


@dataclass(frozen=True)
class Deployable:
    """A downloaded model as the models it serves; ``flavor`` is what it was read as
    (``triton`` or ``onnx``), ``layout`` which layout (``tracker``, ``nvidia``,
    ``repository`` or ``onnx``)."""

    source: TritonRepositoryDir  #: every model in load order, the entries last
    flavor: str
    layout: str


def load_deployable(model_uri: str, dst_path: Path, *, name: str,
                    flavor: str | None = None) -> Deployable:
    """Download ``model_uri`` under ``dst_path`` and read it as ``flavor`` (None: ``triton``
    when the model has it, else ``onnx``). ``name`` is the Triton model name.

    Raises :class:`DeployError` naming the model's flavors when it has not the one asked for.
    """
    if flavor not in (None, "", *FLAVORS):
        raise DeployError(f"the triton target deploys the flavors {list(FLAVORS)}, but got "
                          f"flavor {flavor!r}")
    local = _download(model_uri, dst_path / "mlflow-model")
    try:
        flavors: dict[str, Any] = Model.load(str(local)).flavors
    except (MlflowException, OSError) as exc:
        raise DeployError(f"{model_uri!r} is not an MLflow model (no MLmodel file)") from exc
    chosen = flavor or (FLAVOR_NAME if FLAVOR_NAME in flavors else ONNX)
    if chosen not in flavors:
        hint = "" if flavor else f"; the triton target deploys the flavors {list(FLAVORS)}"
        raise DeployError(f"{model_uri!r} has no {chosen!r} flavor; it has "
                          f"{sorted(flavors)}{hint}")
    try:
        if chosen == ONNX:
            return Deployable(of_model_dir(_from_onnx(model_uri, local, flavors[ONNX], name,
                                                      dst_path / name)), ONNX, ONNX)
        conf = flavors[FLAVOR_NAME] or {}
        if is_repository(conf):  # this project's layout (tracking/flavor.py)
            return Deployable(read_repository(local, conf), FLAVOR_NAME, "repository")
        if conf.get("data"):  # NVIDIA's layout: the model directory nested in the MLflow model
            return Deployable(of_model_dir(inspect_model_dir(_inside(local, str(conf["data"]),
                                                                     model_uri))),
                              FLAVOR_NAME, "nvidia")
        # one model as this project logged it before: the model directory at the root
        return Deployable(of_model_dir(inspect_model_dir(local)), FLAVOR_NAME, "tracker")
    except (ModelError, ConfigError) as exc:
        raise DeployError(f"{model_uri!r} cannot be read as a Triton model: {exc}") from exc


def _download(model_uri: str, dst: Path) -> Path:
    dst.mkdir(parents=True, exist_ok=True)
    try:
        return Path(mlflow.artifacts.download_artifacts(artifact_uri=model_uri,
                                                        dst_path=str(dst)))
    except MlflowException as exc:
        raise DeployError(f"cannot download the model {model_uri!r}: {exc.message}") from exc
    except OSError as exc:
        raise DeployError(f"cannot download the model {model_uri!r}: {exc}") from exc


def _inside(root: Path, relative: str, model_uri: str) -> Path:
    path = (root / relative).resolve()
    if not path.is_relative_to(root.resolve()) or not path.is_dir():
        raise DeployError(f"{model_uri!r}: the triton flavor's data {relative!r} is no folder "
                          "inside the MLflow model")
    return path


def _from_onnx(model_uri: str, local: Path, conf: dict[str, Any] | None, name: str,
               model_dir: Path) -> TritonModelDir:
    from tracker.triton import model_config
    from tracker.triton.formats import load_model_info
    from tracker.triton.formats.onnx import production_config

    model_file = _inside_file(local, str((conf or {}).get("data") or "model.onnx"), model_uri)
    config = _logged_config(model_uri, local, model_file, model_dir.parent / "logged-config")
    info = load_model_info(model_file, name, base_config=config)
    cfg = production_config(info.config)
    cfg.default_model_filename = model_file.name
    version_dir = model_dir / "1"
    version_dir.mkdir(parents=True)
    for path in (model_file, *_external_data(model_file)):
        target = version_dir / path.relative_to(model_file.parent)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
    model_config.save(cfg, model_dir / CONFIG_FILE)
    return inspect_model_dir(model_dir)


def _inside_file(root: Path, relative: str, model_uri: str) -> Path:
    path = (root / relative).resolve()
    if not path.is_relative_to(root.resolve()) or not path.is_file():
        raise DeployError(f"{model_uri!r}: the onnx flavor's model file {relative!r} is not in "
                          "the MLflow model")
    return path


def _external_data(model_file: Path) -> list[Path]:
    """The files the ONNX model keeps its tensors in (``mlflow.onnx`` saves tensors above 1 KB
    outside ``model.onnx`` by default)."""
    import onnx
    from onnx.external_data_helper import uses_external_data

    model = onnx.load(str(model_file), load_external_data=False)
    found = []
    for tensor in model.graph.initializer:
        if uses_external_data(tensor):
            location = next((e.value for e in tensor.external_data if e.key == "location"), "")
            path = (model_file.parent / location).resolve()
            if location and path.is_file() and path.is_relative_to(model_file.parent.resolve()):
                found.append(path)
    return sorted(set(found))


def _logged_config(model_uri: str, local: Path, model_file: Path, dst: Path) -> Path | None:
    """A config.pbtxt logged beside the ONNX model (or, for a model file in a version
    folder, as this project's layout keeps it, in that folder's model directory), or None."""
    in_version = model_file.parent.name.isdigit()
    for candidate in ((model_file.parent.parent / CONFIG_FILE) if in_version else None,
                      local / CONFIG_FILE, local / "extra_files" / CONFIG_FILE):
        if candidate is not None and candidate.is_file():
            return candidate
    where = _run_and_path(model_uri)
    if where is None:
        return None
    run_id, path = where
    try:
        names = {f.path for f in mlflow.MlflowClient().list_artifacts(run_id, path)}
        if f"{path}/{CONFIG_FILE}" not in names:
            return None
        dst.mkdir(parents=True, exist_ok=True)
        return Path(mlflow.artifacts.download_artifacts(
            run_id=run_id, artifact_path=f"{path}/{CONFIG_FILE}", dst_path=str(dst)))
    except (MlflowException, OSError):
        return None


def _run_and_path(model_uri: str) -> tuple[str, str] | None:
    """(run id, artifact path) of the run that logged the model at ``model_uri``, if known."""
    client = mlflow.MlflowClient()
    try:
        if match := _RUNS.match(model_uri):
            return match["run"], match["path"]
        source = model_uri
        if match := _REGISTRY.match(model_uri):
            mv = (client.get_model_version_by_alias(match["name"], match["alias"])
                  if match["alias"] else client.get_model_version(match["name"],
                                                                  match["version"]))
            source = mv.source or ""
            if (found := _RUNS.match(source)) is not None:
                return found["run"], found["path"]
        if match := _LOGGED.match(source):
            logged = client.get_logged_model(match["id"])
            if logged.source_run_id:
                return logged.source_run_id, logged.name
    except MlflowException:
        return None
    return None
