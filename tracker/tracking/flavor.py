"""A Triton model directory as an MLflow model: the ``triton`` flavor.

The MLflow model IS the Triton model directory, with the MLmodel file beside it::

    MLmodel          flavors: {triton: {model_name, config_file, versions, backend, ...}}
    config.pbtxt     the production configuration (e.g. backend "onnxruntime")
    1/model.onnx     one folder per Triton version

So downloading ``models:/NAME/VERSION`` (or ``models:/NAME@alias``) into a folder named after
the config's ``name`` gives a directory Triton loads as is (Triton ignores the MLmodel file).

Logging uses :class:`mlflow.MlflowClient` with an explicit run id, never the fluent run stack,
so it is safe from Optuna worker threads: the model becomes an MLflow 3 logged model (``name``
``model``) recorded as an output of the trial's run; ``runs:/RUN_ID/model`` resolves to it.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import mlflow
from google.protobuf import text_format
from mlflow.entities import LoggedModelOutput, LoggedModelStatus
from mlflow.exceptions import MlflowException
from mlflow.models import Model
from tritonclient.grpc import model_config_pb2

from tracker import tags as tag_names
from tracker.errors import DeployError, ModelError

FLAVOR_NAME = "triton"
CONFIG_FILE = "config.pbtxt"
#: The name under which a trial's model is logged: ``runs:/<trial run id>/model``.
MODEL_ARTIFACT_PATH = "model"

_NAME_RE = re.compile(r"^[A-Za-z0-9_.][A-Za-z0-9_.-]{0,127}$")
_RULE = ("one path component of the model repository: letters, digits, '_', '.', '-', not "
         "starting with '-', at most 128 characters")


def validate_model_name(name: str) -> str:
    """Return ``name`` when it is a safe Triton model name, else raise :class:`DeployError`.

    A model name becomes a folder of the model repository, so it must be one path component.
    As in NVIDIA's mlflow-triton plugin, an empty or whitespace-only name and a path (``..``,
    ``../x``, ``a/../b``, ``/abs``) are refused, while names made of or starting with dots
    (``...``, ``..my_model``, ``model..1``) are valid; ``.`` (the repository itself) is refused.
    """
    if not isinstance(name, str) or not name.strip():
        raise DeployError(f"Model name cannot be empty: got {name!r}; a model name is {_RULE}")
    if "/" in name or "\\" in name or name in (".", ".."):
        raise DeployError(f"Path traversal is not allowed in model's name: {name} (a model name "
                          f"is {_RULE})")
    if not _NAME_RE.match(name):
        raise DeployError(f"a model name must be {_RULE}, but got {name!r}")
    return name


def is_model_name(name: str) -> bool:
    """Whether :func:`validate_model_name` accepts ``name`` (``.git``, ``a b`` are not)."""
    try:
        return validate_model_name(name) == name
    except DeployError:
        return False


@dataclass(frozen=True)
class TritonModelDir:
    """A Triton model directory on disk: ``path/config.pbtxt`` and ``path/<version>/``."""

    path: Path
    name: str
    versions: tuple[int, ...]
    backend: str
    platform: str

    @property
    def config_path(self) -> Path:
        return self.path / CONFIG_FILE

    @property
    def config_text(self) -> str:
        return self.config_path.read_text()

    @property
    def latest_version_dir(self) -> Path:
        return self.path / str(max(self.versions))


def inspect_model_dir(path: str | Path) -> TritonModelDir:
    """Check that ``path`` is a Triton model directory and describe it.

    Raises :class:`ModelError` when config.pbtxt is missing or unreadable, when it names no
    model, or when there is no numeric version folder.
    """
    root = Path(path)
    config_path = root / CONFIG_FILE
    if not config_path.is_file():
        raise ModelError(f"a Triton model directory needs {CONFIG_FILE}, but {root} has none")
    cfg = model_config_pb2.ModelConfig()
    try:
        text_format.Parse(config_path.read_text(), cfg)
    except text_format.ParseError as exc:
        raise ModelError(f"{config_path} is not a valid model configuration: {exc}") from exc
    name = cfg.name or root.name
    try:
        validate_model_name(name)
    except DeployError as exc:
        raise ModelError(f"{config_path}: {exc}") from exc
    versions = tuple(sorted(
        int(p.name) for p in root.iterdir()
        if p.is_dir() and p.name.isdigit() and int(p.name) > 0
    ))
    if not versions:
        raise ModelError(
            f"a Triton model directory needs at least one version folder (1/, 2/, ...), "
            f"but {root} has none"
        )
    return TritonModelDir(path=root, name=name, versions=versions, backend=cfg.backend,
                          platform=cfg.platform)


def model_digest(model: TritonModelDir) -> str:
    """The digest a deployment tells two versions of a model apart by: config.pbtxt and the
    latest version folder's files (their paths and bytes, ``__pycache__`` left out); a
    deployment compares versions by it (:func:`tracker.deploy.steps.source_digest`)."""
    h = hashlib.sha256(model.config_text.encode())
    root = model.latest_version_dir
    for path in sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        h.update(str(path.relative_to(root)).encode())
        with open(path, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()[:16]


def artifact_digest(models: Sequence[TritonModelDir],
                    per_model: Callable[[TritonModelDir], str] = model_digest) -> str:
    """The sha256 of a configuration's files as deployed: each model's ``per_model`` digest in
    load order, with its name when there are several (one model is served under the
    deployment's name, so its folder name, which depends on where it was downloaded, is not
    part of what it is). The tag ``tracker.artifact_sha256`` of a logged model and of a
    registered version."""
    h = hashlib.sha256()
    several = len(models) > 1
    for model in models:
        h.update(f"{model.name if several else ''}\0{per_model(model)}\n".encode())
    return h.hexdigest()


def _one_model(local: Path) -> Sequence[TritonModelDir]:
    return (inspect_model_dir(local),)


def save_model(model_dir: str | Path, path: str | Path, mlflow_model: Model | None = None) -> Model:
    """Write the Triton model directory ``model_dir`` as an MLflow model at ``path``.

    ``path`` must not exist. The config.pbtxt and the numeric version folders are copied
    unchanged; other files beside them (logs, caches) are left out.
    """
    src = inspect_model_dir(model_dir)
    dst = Path(path)
    if dst.exists():
        raise ModelError(f"cannot save an MLflow model to {dst}: it already exists")
    dst.mkdir(parents=True)
    shutil.copy2(src.config_path, dst / CONFIG_FILE)
    for version in src.versions:
        shutil.copytree(src.path / str(version), dst / str(version),
                        ignore=shutil.ignore_patterns("__pycache__"))
    model = mlflow_model if mlflow_model is not None else Model()
    model.add_flavor(
        FLAVOR_NAME,
        model_name=src.name,
        config_file=CONFIG_FILE,
        versions=list(src.versions),
        backend=src.backend,
        platform=src.platform,
    )
    model.save(str(dst / "MLmodel"))
    return model


@dataclass(frozen=True)
class LoggedTritonModel:
    """Where a logged Triton model lives: ``model_uri`` is ``models:/<model_id>``."""

    model_id: str
    run_id: str
    name: str

    @property
    def model_uri(self) -> str:
        return f"models:/{self.model_id}"

    @property
    def run_uri(self) -> str:
        return f"runs:/{self.run_id}/{self.name}"


def log_triton_model(
    model_dir: str | Path,
    run_id: str,
    *,
    name: str = MODEL_ARTIFACT_PATH,
    tracking_uri: str | None = None,
    params: dict[str, str] | None = None,
    tags: dict[str, str] | None = None,
    extend: Callable[[Model, Path], None] | None = None,
) -> LoggedTritonModel:
    """Log a Triton model directory as an MLflow model produced by run ``run_id``.

    Thread-safe: it only uses an explicit :class:`mlflow.MlflowClient`. ``params`` (the trial's
    knobs) and ``tags`` are stored on the logged model, with ``tracker.artifact_sha256`` (the
    :func:`artifact_digest` of what is uploaded, which a deployment checks its download
    against once the model is registered). Raises :class:`ModelError` for a bad
    directory and :class:`DeployError` when MLflow refuses. ``extend(model, folder)`` may add
    flavors and files to the saved model before it is uploaded (tracking/mlflow_model.py).
    """
    inspect_model_dir(model_dir)
    return log_saved(lambda local, model: save_model(model_dir, local, model), str(model_dir),
                     run_id, name=name, tracking_uri=tracking_uri, params=params, tags=tags,
                     extend=extend)


def log_saved(save: Callable[[Path, Model], object], what: str, run_id: str, *,
              name: str = MODEL_ARTIFACT_PATH, tracking_uri: str | None = None,
              params: dict[str, str] | None = None, tags: dict[str, str] | None = None,
              extend: Callable[[Model, Path], None] | None = None,
              read: Callable[[Path], Sequence[TritonModelDir]] = _one_model
              ) -> LoggedTritonModel:
    """Log what ``save(folder, model)`` writes (an MLflow model of the ``triton`` flavor) as
    the logged model ``name`` of run ``run_id`` (see :func:`log_triton_model`); ``what``
    names it in errors. ``read(folder)`` gives the saved models as a download of them is read
    at deploy time: their :func:`artifact_digest` becomes the logged model's tag
    ``tracker.artifact_sha256``."""
    client = mlflow.MlflowClient(tracking_uri)
    try:
        run = client.get_run(run_id)
        logged = client.create_logged_model(
            experiment_id=run.info.experiment_id,
            name=name,
            source_run_id=run_id,
            params={k: str(v) for k, v in (params or {}).items()},
            tags=tags,
            model_type=FLAVOR_NAME,
        )
        with tempfile.TemporaryDirectory(prefix="triton-model-") as tmp:
            local = Path(tmp) / "model"
            save(local, Model(
                artifact_path=logged.artifact_location,
                run_id=run_id,
                model_uuid=logged.model_id,
                model_id=logged.model_id,
            ))
            if extend is not None:
                extend(Model.load(str(local / "MLmodel")), local)
            client.set_logged_model_tags(
                logged.model_id, {tag_names.ARTIFACT_SHA256: artifact_digest(read(local))})
            client.log_model_artifacts(logged.model_id, str(local))
        client.log_outputs(run_id, [LoggedModelOutput(logged.model_id, step=0)])
        client.finalize_logged_model(logged.model_id, LoggedModelStatus.READY)
    except MlflowException as exc:
        raise DeployError(f"could not log the Triton model {what} to run {run_id}: "
                          f"{exc.message}") from exc
    return LoggedTritonModel(model_id=logged.model_id, run_id=run_id, name=name)


def load_model(model_uri: str, dst_path: str | Path | None = None) -> TritonModelDir:
    """Download the Triton model at ``model_uri`` (``models:/NAME/VERSION``, ``models:/NAME@alias``,
    ``runs:/RUN/model``, ``models:/<model_id>``, a local path) and describe it.

    Raises :class:`DeployError` when the URI cannot be downloaded or is not a ``triton`` model.
    """
    try:
        local = mlflow.artifacts.download_artifacts(
            artifact_uri=model_uri, dst_path=None if dst_path is None else str(dst_path))
    except MlflowException as exc:
        raise DeployError(f"cannot download the model {model_uri!r}: {exc.message}") from exc
    except OSError as exc:
        raise DeployError(f"cannot download the model {model_uri!r}: {exc}") from exc
    try:
        meta = Model.load(local)
    except (MlflowException, OSError) as exc:
        raise DeployError(f"{model_uri!r} is not an MLflow model (no MLmodel file)") from exc
    if FLAVOR_NAME not in meta.flavors:
        raise DeployError(f"{model_uri!r} has no {FLAVOR_NAME!r} flavor; it has "
                          f"{sorted(meta.flavors)}")
    try:
        return inspect_model_dir(local)
    except ModelError as exc:
        raise DeployError(f"{model_uri!r}: {exc}") from exc
