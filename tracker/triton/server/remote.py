"""A Triton server someone else runs (Kubernetes, a shared box).

It must run with ``--model-control-mode=explicit``, and its model repository must already hold
the model's files (for the onnxruntime shim: ``<version>/model.py`` and the ONNX file, e.g. a
repository written by :func:`tracker.triton.repository.write_repository`). Each trial's config
reaches it as a load with a config override; nothing is ever restarted. ``stop()`` unloads the
models this process loaded and leaves the server running.
"""

from __future__ import annotations

import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracker.errors import ModelLoadError, ServerError, ServerStartError
from tracker.triton.client import TritonClient
from tracker.triton.endpoints import Endpoints
from tracker.triton.gpus import GpuSet
from tracker.triton.server.gpu_sets import reported_gpu_set
from tracker.triton.server.launcher import Launcher
from tracker.triton.tls import Security, probe

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

    from tracker.spec import ServerSection
    from tracker.triton.repository import TrialRepository


class RemoteTritonServer(Launcher):
    """Drives a running server through its model control API (strategy is always reload).
    ``start`` attaches: it waits until the server answers READY."""

    explicit_only = True

    def __init__(self, url: str, *, http_url: str | None = None, metrics_url: str | None = None,
                 startup_timeout_s: float = 30.0, backends: frozenset[str] | None = None,
                 security: Security | None = None) -> None:
        super().__init__(strategy="reload", startup_timeout_s=startup_timeout_s)
        self._remote = Endpoints.from_urls(url, http_url, metrics_url, security)
        self._backends = backends
        self._auto_ports = False

    @classmethod
    def from_spec(cls, server: ServerSection) -> RemoteTritonServer:
        if not server.url:
            raise ServerError("server.url is required when server.mode is 'remote' (gRPC "
                              "host:port)")
        backends = None
        if server.serving == "python":
            backends = frozenset({"python"})
        elif server.serving == "onnxruntime":
            backends = frozenset({"python", "onnxruntime"})
        return cls(server.url, http_url=server.http_url, metrics_url=server.metrics_url,
                   startup_timeout_s=server.startup_timeout_s, backends=backends,
                   security=Security.of(server.tls, server.headers))

    def check_options(self, args: tuple[str, ...]) -> None:
        if args:
            raise ServerError(f"a remote server's flags are its owner's: server options "
                              f"({' '.join(args)}) need a server this study starts and "
                              "restarts (server.mode local or docker)")

    def _check_repository(self, repository: Path) -> Path:
        return Path(repository)  # the server's own business: it holds the files already

    def load(self, name: str, config: ModelConfig | None = None) -> None:
        try:
            super().load(name, config)
        except ModelLoadError as err:
            if "not allowed" in err.reason and "explicit" in err.reason:
                raise ModelLoadError(f"{err.reason} (the remote server must run with "
                                     "--model-control-mode=explicit)") from err
            raise

    def _stage(self, repo: TrialRepository) -> Path:
        return repo.path  # the files are on the remote server already; nothing to copy

    def _launch(self, repository: Path, explicit: bool) -> Endpoints:
        """Attach; with TLS, one handshake first, so that a wrong certificate or a port that
        does not answer is an error now rather than a READY that never comes."""
        remote = self._remote
        try:
            probe(remote.host, remote.grpc_port, remote.security)
            if remote.http_port is not None and remote.http_scheme == "https":
                probe(remote.http_host or remote.host, remote.http_port, remote.security,
                      protocol="http")
        except ServerError as exc:
            raise ServerStartError(f"remote server not reachable: {exc.reason}") from exc
        return remote

    def _exit_reason(self) -> str | None:
        return None  # someone else's server: it is "gone" only as far as READY never comes

    def _raise_start_error(self, reason: str) -> None:
        raise ServerStartError(f"remote server {self._remote.grpc} not READY: {reason}")

    def _terminate(self, timeout_s: float) -> None:
        for name in list(self._loaded):
            try:
                self.unload(name)
            except ServerError:
                continue

    def log_text(self) -> str:
        return ""  # the log lives with whoever runs the server

    def gpu_set(self, nvml: Any = None) -> GpuSet:
        """The GPUs the server reports: the ``gpu_uuid`` labels of its ``nv_gpu_*`` metrics
        (identified through this machine's NVML when the server runs here)."""
        url = self._remote.metrics
        if url is None:
            return GpuSet((), "the server's metrics endpoint is unknown (set "
                              "server.metrics_url): no GPU is known")
        try:
            with urllib.request.urlopen(url, timeout=5.0) as resp:
                text = resp.read().decode(errors="replace")
        except OSError as exc:
            return GpuSet((), f"the metrics endpoint {url} is unreadable ({exc}): no GPU is "
                              "known")
        return reported_gpu_set(text, nvml)

    def has_backend(self, name: str) -> bool:
        """As configured (server.serving), else: whether a model the server has loaded uses
        backend ``name``."""
        if self._backends is not None:
            return name in self._backends
        with TritonClient(self._remote) as client:
            used = set()
            for model in client.repository_index():
                if model.get("state") == "READY":
                    cfg = client.model_config(model["name"])
                    used.add(cfg.backend or ("onnxruntime" if "onnx" in cfg.platform else
                                             cfg.platform))
        return name in used
