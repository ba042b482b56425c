"""The registered model of a study's winner, built from what the study logged, in the one
layout of :mod:`tracker.tracking.flavor` and in a form MLflow itself can use.

``tracker promote`` builds it from the study's stored model files (tracking/model_files.py)
and the winning trial's production configs, and logs it as the MLflow model ``model`` of the
trial's run (an MLflow 3 logged model)::

    MLmodel                  flavors: triton (ours); for one ONNX model also onnx and
                             python_function; the first entry's signature
    <model>/config.pbtxt     each model's production config: Triton loads the folders as is
    <model>/1/model.onnx     the study's model file (or: a model directory's own files)
    code/tracker_onnx_pyfunc.py   the pyfunc loader (onnxruntime, CPU), see onnx_pyfunc.py
    requirements.txt

So ``mlflow.pyfunc.load_model("models:/NAME@production").predict(...)`` runs one ONNX model
on CPU, ``mlflow.onnx.load_model`` gives its graph, and our ``triton`` deployment target
serves any of them. The signature lists each input and output with its numpy dtype and
shape: the batch dimension first as -1 when the config batches (``max_batch_size > 0``), -1
for every variable dim.

What a trial leaves (the study side's contract), in one of two forms:

- one model: the study's model file or directory stored once, named by the run's tags
  ``tracker.model_files`` / ``tracker.model_sha256``, and the artifact ``config.pbtxt`` (or
  ``production_config.pbtxt`` when the trial was served through the Python-backend shim);
  ``FILE:KEY`` knob files (model.json, ...) as artifacts under their own names;
- several models (a pipeline, several entry models): tags ``tracker.models`` (every model in
  load order, composing first, the entries last) and ``tracker.entry_model`` (the first
  entry: it and every model after it are the entries); artifacts
  ``configs/<model>/config.pbtxt``; the stored files as ONE folder holding ``<model>/...``
  for every model (an ONNX model as ``<model>/1/model.onnx``).
"""

from __future__ import annotations

import shutil
import tempfile
import warnings
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path

import numpy as np
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException
from mlflow.models import Model, ModelSignature
from mlflow.types.schema import Schema, TensorSpec
from tritonclient.grpc import model_config_pb2

from tracker import tags
from tracker.errors import DeployError, ModelError, TrackingError
from tracker.tracking import flavor
from tracker.tracking.flavor import ENSEMBLE, ModelOrder, TritonRepositoryDir
from tracker.tracking.model_files import StoredModel, download
from tracker.tracking.runs import read_file
from tracker.triton import model_config
from tracker.triton.formats.base import backend_of, copy_model_dir, link_or_copy, pyfunc_problem

LOADER_MODULE = "tracker_onnx_pyfunc"
CONFIGS_DIR = "configs"  #: a trial run's artifacts: configs/<model>/config.pbtxt
ONNX_FILE = "model.onnx"
_DTYPES = {"TYPE_BOOL": "bool", "TYPE_UINT8": "uint8", "TYPE_UINT16": "uint16",
           "TYPE_UINT32": "uint32", "TYPE_UINT64": "uint64", "TYPE_INT8": "int8",
           "TYPE_INT16": "int16", "TYPE_INT32": "int32", "TYPE_INT64": "int64",
           "TYPE_FP16": "float16", "TYPE_FP32": "float32", "TYPE_FP64": "float64",
           "TYPE_STRING": "object"}
_REQUIREMENTS = ("mlflow", "numpy", "onnxruntime", "pandas")


def _spec(name: str, data_type: int, dims: list[int], batching: bool) -> TensorSpec:
    type_name = model_config_pb2.DataType.Name(data_type)
    if type_name not in _DTYPES:
        raise DeployError(f"{name}: data type {type_name} has no numpy equivalent for an "
                          "MLflow signature")
    shape = tuple([-1] if batching else []) + tuple(int(d) if d > 0 else -1 for d in dims)
    return TensorSpec(np.dtype(_DTYPES[type_name]), shape, name)


def signature_for(cfg: model_config_pb2.ModelConfig) -> ModelSignature:
    """The model's inputs and outputs as an MLflow tensor signature."""
    batching = cfg.max_batch_size > 0
    return ModelSignature(
        inputs=Schema([_spec(i.name, i.data_type, list(i.dims), batching) for i in cfg.input]),
        outputs=Schema([_spec(o.name, o.data_type, list(o.dims), batching)
                        for o in cfg.output]))


def _versions() -> list[str]:
    out = []
    for package in _REQUIREMENTS:
        try:
            out.append(f"{package}=={metadata.version(package)}")
        except metadata.PackageNotFoundError:
            out.append(package)
    return out


def add_onnx_flavors(model: Model, root: Path, cfg: model_config_pb2.ModelConfig,
                     model_file: str) -> None:
    """Add the signature, ``onnx`` and ``python_function`` to the MLflow model saved at
    ``root`` (``model_file``: the .onnx path inside it) and save MLmodel again."""
    with warnings.catch_warnings():  # MLflow's own import-time note about its type hints
        warnings.filterwarnings("ignore", message=".*type hint is inferred as AnyType.*")
        import mlflow.pyfunc

    model.signature = signature_for(cfg)
    try:
        onnx_version: str | None = metadata.version("onnx")
    except metadata.PackageNotFoundError:
        onnx_version = None
    model.add_flavor("onnx", onnx_version=onnx_version, data=model_file,
                     providers=["CPUExecutionProvider"], code=None)
    code = root / "code"
    code.mkdir(exist_ok=True)
    shutil.copyfile(Path(__file__).with_name("onnx_pyfunc.py"), code / f"{LOADER_MODULE}.py")
    (root / "requirements.txt").write_text("\n".join(_versions()) + "\n")
    mlflow.pyfunc.add_to_model(model, loader_module=LOADER_MODULE, data=model_file,
                               code="code")
    model.save(str(root / "MLmodel"))


def model_dir(model_path: Path, production: str, dst: Path) -> Path:
    """A Triton model directory under ``dst``: ``<name>/config.pbtxt`` (the production
    config text) and ``<name>/1/<default_model_filename>`` (``model_path``, hard-linked when
    the file system allows); a stored model directory (a Python-backend or config-driven
    model) is copied as it is, its config.pbtxt replaced by the production one."""
    cfg = model_config.parse(production)
    root = dst / (cfg.name or "model")
    if model_path.is_dir():
        copy_model_dir(model_path, root)
    else:
        (root / "1").mkdir(parents=True)
        link_or_copy(model_path, root / "1" / (cfg.default_model_filename or ONNX_FILE))
    (root / flavor.CONFIG_FILE).write_text(production)
    return root


def trial_text(client: MlflowClient, run_id: str, path: str) -> str:
    """Artifact ``path`` of trial run ``run_id`` as text; DeployError naming both."""
    try:
        return read_file(client, run_id, path).decode()
    except (TrackingError, UnicodeDecodeError) as exc:
        raise DeployError(f"cannot read the trial's {path}: {exc}") from exc


def stored_files(client: MlflowClient, stored: StoredModel, dst: Path) -> Path:
    """The study's stored model files downloaded into ``dst``; DeployError naming them."""
    try:
        return download(client, stored, dst)
    except (TrackingError, OSError) as exc:
        raise DeployError(f"cannot read the trial's model files ({stored.uri}): "
                          f"{exc}") from exc


def trial_artifacts(client: MlflowClient, run_id: str, path: str | None = None) -> set[str]:
    """The paths of trial run ``run_id``'s artifacts (under ``path``); DeployError."""
    try:
        return {f.path for f in client.list_artifacts(run_id, path)}
    except MlflowException as exc:
        raise DeployError(f"cannot read the trial's run {run_id}: {exc.message}") from exc


def _production_text(client: MlflowClient, run_id: str) -> str:
    """The trial's production config: ``production_config.pbtxt`` when the trial was served
    through the Python-backend shim, else the ``config.pbtxt`` the server loaded."""
    names = trial_artifacts(client, run_id)
    name = "production_config.pbtxt" if "production_config.pbtxt" in names else "config.pbtxt"
    if name not in names:
        raise DeployError(f"the trial's run {run_id} has no config.pbtxt artifact")
    return trial_text(client, run_id, name)


def put_knob_files(client: MlflowClient, run_id: str, root: Path) -> list[str]:
    """The trial's ``FILE:KEY`` files (model.json, ...) as its server loaded them, put in
    place of the user's in the registered model directory ``root``: the registered version
    is what was measured. Returns the files replaced."""
    from tracker.triton.formats import json_knobs

    try:
        files = json_knobs.files_of(client.get_run(run_id).data.params)
    except MlflowException as exc:
        raise DeployError(f"cannot read the trial's knob files from run {run_id}: "
                          f"{exc.message}") from exc
    for file in files:
        text = trial_text(client, run_id, file)
        target = json_knobs.locate(root, file)
        fresh = target.with_name(f".{target.name}.winner")
        fresh.write_text(text)
        fresh.replace(target)  # a new file, never through a hard link to the user's
    return files


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
    except (DeployError, MlflowException, ValueError, TypeError):
        return None  # what MLflow's tensor signature cannot say (a data type, no inputs)


def _one_model(client: MlflowClient, run_id: str, local: Path, root: Path
               ) -> tuple[TritonRepositoryDir, str]:
    """A trial of one model recorded without ``tracker.models`` (as trials were before a
    single model was recorded as the one-entry configuration), whose stored files are the
    model file or directory itself: its directory under ``root`` and its production
    config."""
    production = _production_text(client, run_id)
    model = model_dir(local, production, root)
    put_knob_files(client, run_id, model)
    return flavor.of_model_dir(flavor.inspect_model_dir(model)), production


def _several(client: MlflowClient, run_id: str, local: Path, root: Path, order: ModelOrder,
             uri: str) -> tuple[TritonRepositoryDir, str]:
    """A trial's models (one or several): each one's directory under ``root``, the entry's
    ``FILE:KEY`` files as the trial loaded them (file knobs exist for a single model only);
    the first entry's production config."""
    configs = _configs(client, run_id, order.models)
    if not local.is_dir():
        raise DeployError(f"the study's stored model files ({uri}) are one file, but "
                          f"a trial that names its models (tag tracker.models) stores a "
                          f"folder holding one for each of {list(order.models)}")
    for name in order.models:
        _place(name, configs[name], local, root / name, uri)
    put_knob_files(client, run_id, root / order.entries[0])
    try:
        repo = flavor.inspect_repository_dir(root, order.models, order.entries)
    except ModelError as exc:
        raise DeployError(f"the trial's models cannot be assembled: {exc}") from exc
    return repo, configs[order.entries[0]]


def log_winner(client: MlflowClient, run_id: str, stored: StoredModel,
               order: ModelOrder | None) -> flavor.LoggedTritonModel:
    """Build the registered model of trial run ``run_id`` from the study's stored model files
    and the trial's production configs (``order``: the trial's models, from
    :func:`~tracker.tracking.flavor.models_from_tags`; None for a trial of one model recorded
    without them), and log it as the MLflow model ``model`` of that run."""
    with tempfile.TemporaryDirectory(prefix="tracker-winner-") as tmp:
        local = stored_files(client, stored, Path(tmp) / "files")
        root = Path(tmp) / "repository"
        repo, production = (_one_model(client, run_id, local, root) if order is None else
                            _several(client, run_id, local, root, order, stored.uri))
        cfg = model_config.parse(production)
        onnx_file = (f"{repo.entry.name}/1/{cfg.default_model_filename or ONNX_FILE}"
                     if pyfunc_problem(cfg, len(repo.models)) is None else None)

        def extend(model: Model, path: Path) -> None:
            if onnx_file is not None:
                add_onnx_flavors(model, path, cfg, onnx_file)

        return flavor.log_repository(repo, run_id, tracking_uri=str(client.tracking_uri),
                                     tags={tags.MODEL_SHA256: stored.sha256},
                                     signature=_signature(production), extend=extend)
