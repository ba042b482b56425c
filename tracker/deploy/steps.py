"""The steps a switch of served versions is made of, for every model of a configuration
(:mod:`tracker.deploy.switch`): a version's files
staged aside and renamed into place, config.pbtxt written atomically with the versions to
serve, a load through the model control API (with the server log's reason when Triton says
only "failed to poll"), the wait for READY and the check inference. A step that fails raises
:class:`StepFailed` with what the server said; undoing is the caller's.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from tritonclient.grpc.model_config_pb2 import ModelConfig

from tracker.deploy import first_request
from tracker.errors import ServerError
from tracker.tracking.flavor import model_digest
from tracker.triton import model_config
from tracker.triton.formats.base import backend_of
from tracker.triton.server.logs import error_messages, log_since, log_size

if TYPE_CHECKING:
    from tracker.tracking.flavor import TritonModelDir
    from tracker.triton.infer import ControlClient

STAGING = ".staging-"
MISSING_BACKEND = "unable to find backend library"


class StepFailed(Exception):
    """A step of the switch failed; ``message`` is what the server said."""

    def __init__(self, step: str, message: str) -> None:
        super().__init__(f"{step}: {message}")
        self.step = step
        self.message = message


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:8]}")
    tmp.write_text(text)
    os.replace(tmp, path)


def source_digest(source: TritonModelDir) -> str:
    """A digest of the version's files and config (what makes two deployments the same): the
    rule of :func:`tracker.tracking.flavor.model_digest`, which logging a model also uses."""
    return model_digest(source)


def with_policy(cfg: ModelConfig, name: str, versions: list[int]) -> ModelConfig:
    """``cfg`` served as ``name`` with exactly ``versions`` (``version_policy: specific``)."""
    new = ModelConfig()
    new.CopyFrom(cfg)
    new.name = name
    new.ClearField("version_policy")
    new.version_policy.specific.versions.extend(sorted(set(versions)))
    return new


def production_of(source: TritonModelDir, name: str) -> ModelConfig:
    """The source's config served as ``name``, without a version policy."""
    production = model_config.parse(source.config_text)
    production.name = name
    production.ClearField("version_policy")
    return production


def stage(model_dir: Path, version: int, source: TritonModelDir, production: ModelConfig,
          mode: str) -> tuple[Path, ModelConfig]:
    """Write the version's files aside in ``model_dir``; returns (staging folder, served
    config). ``mode`` ``python`` serves an ONNX model through the onnxruntime shim."""
    model_dir.mkdir(parents=True, exist_ok=True)
    staging = model_dir / f"{STAGING}{version}-{uuid.uuid4().hex[:8]}"
    src_dir = source.latest_version_dir
    if not (mode == "python" and backend_of(production) == "onnxruntime"):
        shutil.copytree(src_dir, staging, ignore=shutil.ignore_patterns("__pycache__"))
        return staging, production
    from tracker.triton.repository import write_repository

    info = model_config.ModelInfo(config=production,
                                  supports_batching=production.max_batch_size > 0,
                                  model_file=src_dir / (production.default_model_filename
                                                        or "model.onnx"))
    with tempfile.TemporaryDirectory(dir=model_dir, prefix=STAGING + "shim-") as tmp:
        repo = write_repository(Path(tmp), info, production, serving="python",
                                version=version)
        os.rename(repo.model_dir / str(version), staging)  # same file system
        return staging, repo.served_config


def drop_other_versions(model_dir: Path, version: int) -> None:
    """Remove the version folders no longer served."""
    for other in model_dir.iterdir():
        if other.is_dir() and other.name.isdigit() and int(other.name) != version:
            shutil.rmtree(other, ignore_errors=True)


def load(client: ControlClient, name: str, step: str, server_log: Path | None) -> None:
    """Load (or reload) ``name`` from the repository; :class:`StepFailed` names ``step``."""
    offset = log_size(server_log)
    try:
        client.load_model(name)
    except ServerError as exc:  # ModelLoadError included
        # the reason for "failed to poll from model repository" is in the log
        lines = error_messages(log_since(server_log, offset), name)
        detail = ("; server log: " + " | ".join(dict.fromkeys(lines))) if lines else ""
        raise StepFailed(step, exc.reason + detail) from exc


def wait_ready(client: ControlClient, name: str, version: int, timeout_s: float,
               step: str = "waiting for READY") -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if client.version_ready(name, version):
                return
        except ServerError as exc:
            raise StepFailed(step, exc.reason) from exc
        if time.monotonic() > deadline:
            raise StepFailed(step, f"version {version} of {name!r} not READY after "
                                   f"{timeout_s:g} s")
        time.sleep(0.1)


def check_inference(client: ControlClient, name: str, version: int,
                    served: ModelConfig) -> None:
    """The check's request to ``version`` with random inputs shaped after ``served``, sent as
    the model takes requests: one inference, one streamed inference (a decoupled model) or
    a whole sequence under a new correlation ID (a stateful model; :mod:`check_request`)."""
    try:
        first_request.send(client, name, version, served)
    except ServerError as exc:
        raise StepFailed(first_request.what_is_sent(served), exc.reason) from exc
