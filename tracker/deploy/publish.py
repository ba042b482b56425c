"""A Triton model repository served by one Triton server in explicit model control mode, as
deployments see it: what each model folder and the server say (:class:`DeploymentState`),
the lock that keeps two switches from interleaving, how an ONNX model is served, and the
record each deployed model keeps (``deployment.json``). The switch of a configuration's
models to a new version, and its rollback, is :mod:`tracker.deploy.switch`.

ONNX models: the registry holds the production config (``backend: "onnxruntime"``); a server
without that backend gets the Python-backend variant (``write_repository(serving="python")``)
with the same knobs (:meth:`Publisher.modes`). Any other model directory is published as it
is, served by the backend its config names (``serving`` in a result and in deployment.json:
that backend).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tritonclient.grpc.model_config_pb2 import ModelConfig

from tracker.deploy import lock, steps
from tracker.errors import DeployError, ServerError
from tracker.serving import CHOICES, serving_choices
from tracker.tracking.flavor import is_model_name, validate_model_name
from tracker.triton.formats.base import backend_of

if TYPE_CHECKING:
    from tracker.triton.infer import ControlClient


SERVING_MODES: tuple[str, ...] = CHOICES
META_FILE = "deployment.json"
LOCK_FILE = lock.LOCK_FILE


@dataclass(frozen=True)
class PublishResult:
    """What serves after a successful publish: the deployment's own model (its first
    entry)."""

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
    """One repository served by one Triton server, as the switch (:mod:`tracker.deploy.switch`)
    reads and writes it.

    ``log`` gets one line per action. A switch holds an exclusive lock on
    ``<repository>/.tracker-deploy.lock`` (:meth:`locked`) so a watcher and a
    ``tracker promote`` cannot interleave their switches.
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
    def index(self) -> list[dict[str, str]]:
        """Triton's repository index; :class:`DeployError` naming the server when it does not
        answer."""
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
        entries = [e for e in (index if index is not None else self.index())
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

    def states(self, index: list[dict[str, str]] | None = None) -> list[DeploymentState]:
        """Every model of the repository (folders and what the server knows); a name that is
        no valid model name (``.git``, ``a b``) is no deployment."""
        index = index if index is not None else self.index()
        names = {e["name"] for e in index if e.get("name")}
        names |= {p.name for p in self.repository.iterdir() if p.is_dir()}
        found = [self.state(n, index) for n in sorted(names) if is_model_name(n)]
        return [s for s in found if s is not None]

    # -- writing ---------------------------------------------------------------------------
    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """The repository lock (:mod:`tracker.deploy.lock`), held for a whole deployment."""
        with lock.held(self.repository):
            yield


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


    def load(self, name: str, step: str) -> None:
        steps.load(self.client, name, step, self.server_log)

    @staticmethod
    def meta_text(name: str, version: int, mode: str, meta: Mapping[str, Any] | None) -> str:
        """The text of a model's ``deployment.json``."""
        record = {"name": name, "version": version, "serving": mode,
                  "deployed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                  **dict(meta or {})}
        return json.dumps(record, indent=2, sort_keys=True) + "\n"

    def write_meta(self, model_dir: Path, name: str, version: int, mode: str,
                   meta: Mapping[str, Any] | None) -> None:
        steps.write_atomic(model_dir / META_FILE, self.meta_text(name, version, mode, meta))
