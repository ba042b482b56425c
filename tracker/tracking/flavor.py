"""Triton models as MLflow models: the ``triton`` flavor, one layout for one model and many.

The MLflow model IS a subset of a Triton model repository, with the MLmodel file beside the
model directories; one model is the one-model, one-entry case of it::

    MLmodel               flavors: {triton: {model_name: <entry>, entry_model: <entry>,
                                             entries: [<entry>, ...],
                                             models: [<composing>..., <entries>...],
                                             layout: repository, config_file:
                                             <entry>/config.pbtxt, versions, backend,
                                             platform}}
    <model>/config.pbtxt  each model's production configuration
    <model>/<version>/    each model's files (an ensemble's version folder may be empty)

``models`` is the load order: every composing model before the models that call it, the
entries last, in their order (``entries``; a model logged before several entry models were
published has ``entry_model`` alone, the last model). ``entry_model`` is the first entry: a
deployment serves it under the deployment's name, so one model's folder name is not part of
what it is (:func:`artifact_digest`).

Read as well (:func:`read_logged`): the layout versions logged one model in before, the model
directory itself at the root of the MLflow model (``config.pbtxt`` and ``1/`` beside MLmodel,
no ``layout`` key). An empty version folder (an ensemble's ``1/``) does not survive every
artifact store, so reading gives an ensemble without one its ``1/`` again.

Logging uses :class:`mlflow.MlflowClient` with an explicit run id, never the fluent run stack,
so it is safe from Optuna worker threads: the model becomes an MLflow 3 logged model (``name``
``model``) recorded as an output of the trial's run; ``runs:/RUN_ID/model`` resolves to it.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlflow
from google.protobuf import text_format
from mlflow.entities import LoggedModelOutput, LoggedModelStatus
from mlflow.exceptions import MlflowException
from mlflow.models import Model
from tritonclient.grpc import model_config_pb2

from tracker import tags as tag_names
from tracker.errors import DeployError, ModelError
from tracker.triton import model_config

FLAVOR_NAME = "triton"
CONFIG_FILE = "config.pbtxt"
LAYOUT = "repository"  #: flavors.triton.layout of the one layout
ENSEMBLE = "ensemble"
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


@dataclass(frozen=True)
class TritonRepositoryDir:
    """Models on disk, ``models`` in load order; ``entries`` (the last models, in that
    order) are the ones clients call. One model is one model and one entry."""

    path: Path
    models: tuple[TritonModelDir, ...]
    entries: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.entries:  # the last model: a version logged before ``entries`` existed
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
    the study orders them), or None for a run without ``tracker.models`` (a trial of one model
    recorded before it was the one-entry configuration: its stored files are the model file
    or directory rather than a folder of models)."""
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
        raise ModelError(f"the MLflow model has no {name}/{CONFIG_FILE} (under {root})")
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


def is_repository(conf: Mapping[str, Any] | None) -> bool:
    """Whether an MLmodel's ``triton`` flavor configuration has the repository layout."""
    return bool(conf) and conf is not None and conf.get("layout") == LAYOUT


def read_repository(local: Path, conf: Mapping[str, Any]) -> TritonRepositoryDir:
    """The configuration a downloaded MLflow model of this layout holds."""
    models = conf.get("models")
    if not isinstance(models, list) or not models:
        raise ModelError(f"the MLmodel of {local} names no models (flavors.triton.models)")
    entries = conf.get("entries") or [conf.get("entry_model") or models[-1]]
    if not isinstance(entries, list):
        raise ModelError(f"the MLmodel of {local}: flavors.triton.entries must be a list of "
                         f"model names, but got {entries!r}")
    return inspect_repository_dir(local, [str(m) for m in models], [str(e) for e in entries])


def save_repository(repo: TritonRepositoryDir, path: str | Path,
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


def read_logged(local: Path, conf: Mapping[str, Any] | None) -> TritonRepositoryDir:
    """The models a downloaded MLflow model of this flavor holds (``conf``: its
    ``flavors.triton``): the repository layout, or one model directory at the root."""
    if is_repository(conf):
        return read_repository(local, conf or {})
    return of_model_dir(inspect_model_dir(local))


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


def log_repository(repo: TritonRepositoryDir, run_id: str, *,
                   name: str = MODEL_ARTIFACT_PATH, tracking_uri: str | None = None,
                   params: dict[str, str] | None = None, tags: dict[str, str] | None = None,
                   signature: Any = None,
                   extend: Callable[[Model, Path], None] | None = None) -> LoggedTritonModel:
    """Log the models of ``repo`` as the MLflow model ``name`` produced by run ``run_id``.

    Thread-safe: it only uses an explicit :class:`mlflow.MlflowClient`. ``params`` (the trial's
    knobs) and ``tags`` are stored on the logged model, with ``tracker.artifact_sha256`` (the
    :func:`artifact_digest` of the models as a download of them is read, which a deployment
    checks its download against once the model is registered); ``signature``: the first
    entry's. ``extend(model, folder)`` may add flavors and files to the saved model before it
    is uploaded (tracking/winner.py). Raises :class:`DeployError` when MLflow refuses.
    """
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
            model = Model(artifact_path=logged.artifact_location, run_id=run_id,
                          model_uuid=logged.model_id, model_id=logged.model_id)
            if signature is not None:
                model.signature = signature
            save_repository(repo, local, model)
            if extend is not None:
                extend(model, local)
            saved = read_repository(local, model.flavors[FLAVOR_NAME])
            client.set_logged_model_tags(
                logged.model_id, {tag_names.ARTIFACT_SHA256: artifact_digest(saved.models)})
            client.log_model_artifacts(logged.model_id, str(local))
        client.log_outputs(run_id, [LoggedModelOutput(logged.model_id, step=0)])
        client.finalize_logged_model(logged.model_id, LoggedModelStatus.READY)
    except MlflowException as exc:
        raise DeployError(f"could not log the Triton models {list(repo.names)} to run {run_id}: "
                          f"{exc.message}") from exc
    return LoggedTritonModel(model_id=logged.model_id, run_id=run_id, name=name)


def log_triton_model(model_dir: str | Path, run_id: str, *, name: str = MODEL_ARTIFACT_PATH,
                     tracking_uri: str | None = None, params: dict[str, str] | None = None,
                     tags: dict[str, str] | None = None) -> LoggedTritonModel:
    """Log one Triton model directory as the one-model configuration (:func:`log_repository`);
    :class:`ModelError` for a directory that is not one. Its config.pbtxt and numeric version
    folders are logged unchanged, other files beside them (logs, caches) are left out."""
    return log_repository(of_model_dir(inspect_model_dir(model_dir)), run_id, name=name,
                          tracking_uri=tracking_uri, params=params, tags=tags)


def load_model(model_uri: str, dst_path: str | Path | None = None) -> TritonRepositoryDir:
    """Download the Triton model at ``model_uri`` (``models:/NAME/VERSION``, ``models:/NAME@alias``,
    ``runs:/RUN/model``, ``models:/<model_id>``, a local path) and read it (:func:`read_logged`).

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
        return read_logged(Path(local), meta.flavors[FLAVOR_NAME])
    except ModelError as exc:
        raise DeployError(f"{model_uri!r}: {exc}") from exc
