"""The registered model of a study's winner, in a form MLflow itself can use.

``tracker promote`` builds it from the study's stored model file (tracking/model_files.py)
and the winning trial's production config, and logs it as the MLflow model ``model`` of the
trial's run (an MLflow 3 logged model):

    MLmodel          flavors: triton (ours), onnx, python_function; signature from the config
    config.pbtxt     the winner's production config: Triton loads the folder as is
    1/model.onnx     the study's model file (or: the model directory's own files, as they are)
    code/tracker_onnx_pyfunc.py   the pyfunc loader (onnxruntime, CPU), see onnx_pyfunc.py
    requirements.txt

So ``mlflow.pyfunc.load_model("models:/NAME@production").predict(...)`` runs it on CPU,
``mlflow.onnx.load_model`` gives the ONNX graph, and our ``triton`` deployment target serves
it. The signature lists each input and output with its numpy dtype and shape: the batch
dimension first as -1 when the config batches (``max_batch_size > 0``), -1 for every
variable dim.
"""

from __future__ import annotations

import shutil
import tempfile
import warnings
from importlib import metadata
from pathlib import Path

import numpy as np
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException
from mlflow.models import Model, ModelSignature
from mlflow.types.schema import Schema, TensorSpec
from tritonclient.grpc import model_config_pb2

from tracker.errors import DeployError, TrackingError
from tracker.tracking import flavor
from tracker.tracking.model_files import StoredModel, download
from tracker.tracking.runs import read_file
from tracker.triton import model_config
from tracker.triton.formats.base import copy_model_dir, pyfunc_problem

LOADER_MODULE = "tracker_onnx_pyfunc"
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
        (root / flavor.CONFIG_FILE).write_text(production)
        return root
    (root / "1").mkdir(parents=True)
    target = root / "1" / (cfg.default_model_filename or "model.onnx")
    try:
        target.hardlink_to(model_path)
    except OSError:
        shutil.copyfile(model_path, target)
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


def log_winner_model(client: MlflowClient, run_id: str, stored: StoredModel
                     ) -> flavor.LoggedTritonModel:
    """Build the registered model of trial run ``run_id`` from the stored model file and the
    trial's production config, and log it as the MLflow model ``model`` of that run."""
    with tempfile.TemporaryDirectory(prefix="tracker-winner-") as tmp:
        production = _production_text(client, run_id)
        local = stored_files(client, stored, Path(tmp) / "files")
        root = model_dir(local, production, Path(tmp) / "model")
        put_knob_files(client, run_id, root)
        cfg = model_config.parse(production)
        onnx_file = f"1/{cfg.default_model_filename or 'model.onnx'}"

        def extend(model: Model, path: Path) -> None:
            if pyfunc_problem(cfg) is None:
                add_onnx_flavors(model, path, cfg, onnx_file)

        return flavor.log_triton_model(root, run_id, tracking_uri=str(client.tracking_uri),
                                       tags={"tracker.model_sha256": stored.sha256},
                                       extend=extend)
