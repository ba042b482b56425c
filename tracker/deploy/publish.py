"""Publish a model version into a Triton model repository and switch serving to it, with rollback.

The server runs in explicit model control mode over ``repository`` (a local path). Publishing
version N of model ``name``:

1. the version's files are written aside (``<repo>/<name>/.staging-N-xxxx/``, same file
   system) and renamed to ``<repo>/<name>/N/``: a version folder is complete or absent;
2. config.pbtxt (replaced atomically) keeps the served version(s) M and adds N
   (``version_policy: specific {versions: [M, N]}``); the model is loaded through the model
   control API: Triton loads N beside M, which keeps serving;
3. N must be READY and answer one inference (sent to version N explicitly);
4. config.pbtxt with only N, loaded again: Triton drops M. Requests without a version go to
   the newest ready one, so clients see no failed request during the switch;
5. on any failure the previous config.pbtxt is restored and loaded, N's folder is removed, and
   :class:`DeployError` carries Triton's message: M serves as before (rollback).

ONNX models: the registry holds the production config (``backend: "onnxruntime"``); a server
without that backend gets the Python-backend variant (``write_repository(serving="python")``)
with the same knobs. Any other model directory is published as it is, served by the backend
its config names (``serving`` in a result and in deployment.json: that backend).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import shutil
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tritonclient.grpc.model_config_pb2 import ModelConfig

from tracker.deploy import steps
from tracker.errors import DeployError, ServerError
from tracker.serving import CHOICES, serving_choices
from tracker.tracking.flavor import CONFIG_FILE, is_model_name, validate_model_name
from tracker.triton import model_config
from tracker.triton.formats.base import backend_of

if TYPE_CHECKING:
    from tracker.deploy.transport import ControlClient
    from tracker.tracking.flavor import TritonModelDir

SERVING_MODES: tuple[str, ...] = CHOICES
META_FILE = "deployment.json"
LOCK_FILE = ".tracker-deploy.lock"


@dataclass(frozen=True)
class PublishResult:
    """What serves after a successful publish."""

    name: str
    version: int
    previous: tuple[int, ...]
    serving: str
    served_config: ModelConfig
    production_config: ModelConfig
    seconds: float


@dataclass(frozen=True)
class DeploymentState:
    """A deployment in the repository, as the server sees it."""

    name: str
    ready_versions: tuple[int, ...]
    files_versions: tuple[int, ...]
    meta: Mapping[str, Any] = field(default_factory=dict)
    reason: str = ""

    @property
    def version(self) -> int | None:
        return max(self.ready_versions) if self.ready_versions else None

    @property
    def state(self) -> str:
        return "READY" if self.ready_versions else "UNAVAILABLE"


class Publisher:
    """Publishes versions of models into one repository served by one Triton server.

    ``log`` gets one line per action. Publishing holds an exclusive lock on
    ``<repository>/.tracker-deploy.lock`` so a watcher and a ``tracker promote`` cannot
    interleave their switches.
    """

    def __init__(self, repository: str | Path, client: ControlClient, *,
                 serving: str = "auto", ready_timeout_s: float = 300.0,
                 server_log: str | Path | None = None,
                 log: Callable[[str], None] | None = None) -> None:
        if serving not in SERVING_MODES:
            raise DeployError(f"serving must be one of {list(SERVING_MODES)}, but got {serving!r}")
        self.repository = Path(repository)
        self.client = client
        self.serving = serving
        self.ready_timeout_s = ready_timeout_s
        self.server_log = Path(server_log) if server_log else None
        self.log: Callable[[str], None] = log or (lambda _line: None)
        if not self.repository.is_dir():
            raise DeployError(f"the model repository must be an existing folder, but "
                              f"{self.repository} is not")

    # -- reading ---------------------------------------------------------------------------
    def _index(self) -> list[dict[str, str]]:
        try:
            return self.client.repository_index()
        except ServerError as exc:
            raise DeployError(f"cannot reach Triton at {self.client.address}: "
                              f"{exc.reason}") from exc

    def model_dir(self, name: str) -> Path:
        path = self.repository / validate_model_name(name)
        if path.resolve().parent != self.repository.resolve():
            raise DeployError(f"model {name!r} would live outside the repository "
                              f"{self.repository}")
        return path

    def state(self, name: str, index: list[dict[str, str]] | None = None) -> DeploymentState | None:
        """The deployment called ``name``, or None when the repository has no such model."""
        model_dir = self.model_dir(name)
        entries = [e for e in (index if index is not None else self._index())
                   if e.get("name") == name]
        if not model_dir.is_dir() and not entries:
            return None
        ready = tuple(sorted(int(e["version"]) for e in entries
                             if e.get("state") == "READY" and e.get("version", "").isdigit()))
        reasons = [e.get("reason", "") for e in entries if e.get("state") != "READY"]
        files = tuple(sorted(int(p.name) for p in model_dir.iterdir()
                             if p.is_dir() and p.name.isdigit())) if model_dir.is_dir() else ()
        meta: dict[str, Any] = {}
        with contextlib.suppress(OSError, ValueError):
            meta = json.loads((model_dir / META_FILE).read_text())
        return DeploymentState(name, ready, files, meta, "; ".join(r for r in reasons if r))

    def states(self) -> list[DeploymentState]:
        """Every model of the repository (folders and what the server knows); a name that is
        no valid model name (``.git``, ``a b``) is no deployment."""
        index = self._index()
        names = {e["name"] for e in index if e.get("name")}
        names |= {p.name for p in self.repository.iterdir() if p.is_dir()}
        found = [self.state(n, index) for n in sorted(names) if is_model_name(n)]
        return [s for s in found if s is not None]

    # -- writing ---------------------------------------------------------------------------
    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        with open(self.repository / LOCK_FILE, "a") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def publish(self, name: str, version: int, source: TritonModelDir, *,
                meta: Mapping[str, Any] | None = None) -> PublishResult:
        """Serve ``source`` as version ``version`` of ``name`` (see the module docstring).

        Raises :class:`DeployError` (with the server's message) after rolling back.
        """
        validate_model_name(name)
        if not isinstance(version, int) or version < 1:
            raise DeployError(f"a Triton version must be a positive integer, but got {version!r}")
        production = steps.production_of(source, name)
        with self.locked():
            start = time.monotonic()
            model_dir = self.model_dir(name)
            for left in model_dir.glob(f"{steps.STAGING}*") if model_dir.is_dir() else []:
                shutil.rmtree(left, ignore_errors=True)  # a crashed publish's leftovers
            before = self.state(name)
            digest = steps.source_digest(source)
            if (before is not None and before.ready_versions == (version,)
                    and before.meta.get("source_digest") == digest):
                self.log(f"{name}: version {version} already serves; nothing to do")
                served_now = production
                with contextlib.suppress(ServerError):
                    served_now = self.client.model_config(name)
                return PublishResult(name, version, (), str(before.meta.get("serving", "")),
                                     served_now, production, 0.0)
            meta = {**dict(meta or {}), "source_digest": digest}
            previous = tuple(v for v in (before.ready_versions if before else ()) if v != version)
            modes = self.modes(name, production, previous)
            last: DeployError | None = None
            for i, mode in enumerate(modes):
                try:
                    served = self._switch(name, version, source, production, mode, previous)
                except _Fallback as exc:
                    last = exc.error
                    if i + 1 < len(modes):
                        self.log(f"{name}: the server has no "
                                 f"{production.backend or production.platform} backend; "
                                 f"serving version {version} through the Python backend")
                    continue
                self.write_meta(model_dir, name, version, mode, meta)
                took = time.monotonic() - start
                self.log(f"{name}: version {version} serves ({mode})"
                         + (f", replaced {list(previous)}" if previous else "")
                         + f" in {took:.1f} s")
                return PublishResult(name, version, previous, mode, served, production, took)
            raise last or DeployError(f"no way to serve {name!r} was tried")

    def modes(self, name: str, production: ModelConfig, previous: tuple[int, ...]) -> list[str]:
        backend = backend_of(production)
        if backend != "onnxruntime":  # not ONNX: served by the backend its config names
            return [backend]

        def has_native() -> bool | None:  # keep what works on this server: what serves now
            if previous:
                with contextlib.suppress(ServerError):
                    if self.client.model_config(name).backend == "python":
                        return False
            return None  # not known: native first, the shim when the backend is missing

        return list(serving_choices(self.serving, has_native))

    def _switch(self, name: str, version: int, source: TritonModelDir, production: ModelConfig,
                mode: str, previous: tuple[int, ...]) -> ModelConfig:
        model_dir = self.model_dir(name)
        config_path = model_dir / CONFIG_FILE
        old_text = config_path.read_text() if config_path.is_file() else None
        version_dir = model_dir / str(version)
        created = not version_dir.exists()
        staging, served = steps.stage(model_dir, version, source, production, mode)
        try:
            steps.put_in_place(model_dir, version, staging)
            both = steps.with_policy(served, name, [*previous, version])
            steps.write_atomic(config_path, model_config.dumps(both))
            self.load(name, "loading it beside the serving version" if previous else "loading")
            self.check(name, version, served)
            only = steps.with_policy(served, name, [version])
            steps.write_atomic(config_path, model_config.dumps(only))
            if previous:
                self.load(name, f"dropping version(s) {list(previous)}")
                self.check(name, version, served)
        except steps.StepFailed as fail:
            self.rollback(name, model_dir, old_text, previous, version_dir if created else None)
            still = (f"version {max(previous)} still serves" if previous
                     else "nothing serves under this name")
            error = DeployError(f"deploying version {version} of {name!r} failed while "
                                f"{fail.step}; {still}. Triton said: {fail.message}")
            if mode == "onnxruntime" and steps.MISSING_BACKEND in fail.message:
                raise _Fallback(error) from None
            raise error from None
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        steps.drop_other_versions(model_dir, version)
        return only

    def load(self, name: str, step: str) -> None:
        steps.load(self.client, name, step, self.server_log)

    def check(self, name: str, version: int, served: ModelConfig, *,
              infer: bool = True) -> None:
        """READY within the timeout, then (``infer``) one inference sent to ``version``."""
        steps.wait_ready(self.client, name, version, self.ready_timeout_s)
        if infer:
            steps.check_inference(self.client, name, version, served)

    def rollback(self, name: str, model_dir: Path, old_text: str | None,
                 previous: tuple[int, ...], created_dir: Path | None) -> None:
        if old_text is not None:
            steps.write_atomic(model_dir / CONFIG_FILE, old_text)
        if previous:
            try:
                self.client.load_model(name)
            except ServerError as exc:  # the old version keeps serving through a failed load
                self.log(f"{name}: restoring the previous config: {exc.reason}")
        else:
            with contextlib.suppress(ServerError):
                self.client.unload_model(name, wait_s=10)
        if created_dir is not None:
            shutil.rmtree(created_dir, ignore_errors=True)
        if old_text is None and not previous:
            shutil.rmtree(model_dir, ignore_errors=True)

    def write_meta(self, model_dir: Path, name: str, version: int, mode: str,
                   meta: Mapping[str, Any] | None) -> None:
        record = {"name": name, "version": version, "serving": mode,
                  "deployed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                  **dict(meta or {})}
        steps.write_atomic(model_dir / META_FILE,
                           json.dumps(record, indent=2, sort_keys=True) + "\n")

    def remove(self, name: str) -> bool:
        """Unload ``name`` and delete its folder; False when there was nothing (idempotent)."""
        with self.locked():
            model_dir = self.model_dir(name)
            existed = model_dir.exists()
            try:
                self.client.unload_model(name, wait_s=30)
            except ServerError as exc:
                if existed:
                    raise DeployError(f"cannot unload {name!r}: {exc.reason}") from exc
            if existed:
                shutil.rmtree(model_dir)
                self.log(f"{name}: removed")
            return existed


class _Fallback(Exception):
    def __init__(self, error: DeployError) -> None:
        super().__init__(str(error))
        self.error = error
