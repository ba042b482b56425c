"""The contract every Triton server launcher keeps (local process, Docker container, remote).

``TritonServer`` promises, for every implementation:

- ``start(repository, explicit=False)`` serves ``repository`` and returns only once the server
  answers READY (every model in it loaded). ``explicit=True`` starts it with
  ``--model-control-mode=explicit`` (models are then loaded with :meth:`load`). If the server
  exits, a model fails to load or READY does not come within ``startup_timeout_s``, it raises
  :class:`ServerStartError` (or :class:`ModelLoadError` when Triton refused a model config)
  carrying the reason and the tail of the server log, and nothing is left running.
- Ports are chosen free unless fixed; a fixed port that is taken is a :class:`ServerStartError`
  that names it.
- ``stop(timeout_s)`` asks the server to exit, waits ``timeout_s``, then forces it. Calling it
  again (or on a server never started) does nothing. After it returns no process, container
  or shared-memory region of this server is left.
- ``restart(repository=None)`` = stop + start (same repository unless a new one is given).
- ``endpoints`` (while running), ``log_text()``/``log_tail()`` (also after stop: the log of
  the last start), ``pids()`` (the server's process tree, as this machine numbers it),
  ``has_backend(name)``.
- ``gpu_set(nvml=None)`` is the set of GPUs the server was given, by UUID
  (:class:`~tracker.triton.gpus.GpuSet`; local: its ``CUDA_VISIBLE_DEVICES``, docker: its
  DeviceRequest, remote: the GPUs its metrics report). Empty means no GPU, or none that can be
  known here (NVML unavailable); a GPU the machine does not have is a :class:`GpuError`.
  Works before ``start`` for local and docker servers. Monitors measure exactly this set.
- ``apply_trial(repo)`` serves one trial's :class:`TrialRepository` with the server's
  strategy: ``restart`` (start or restart over ``repo.path``) or ``reload`` (start once in
  explicit mode, then load each trial's served config as an override; nothing restarts).
- Use as a context manager: ``with server: ...`` stops it on the way out.

Thread safety: one thread drives a server at a time (calls are serialized by a lock);
``stop_all()`` may be called from any thread or at exit.
"""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import tempfile
import threading
import time
import weakref
from abc import ABC, abstractmethod
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from tracker.errors import ModelLoadError, ServerError, ServerStartError
from tracker.triton.client import Endpoints, TritonClient

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

    from tracker.spec import ServerSection
    from tracker.triton.gpus import GpuSet
    from tracker.triton.repository import TrialRepository

Strategy = Literal["restart", "reload"]
#: a C++ abort in the server or a backend stub: READY will never come, fail now
FATAL = "terminate called after throwing"

_LIVE: set[TritonServer] = set()
_LIVE_LOCK = threading.Lock()


def live_servers() -> list[TritonServer]:
    """Servers of this process that are running (started and not yet stopped)."""
    with _LIVE_LOCK:
        return list(_LIVE)


def stop_all(timeout_s: float = 5.0) -> None:
    """Stop every server this process started. Registered with atexit; the CLI also calls it
    (through normal unwinding) when it receives SIGINT or SIGTERM."""
    for server in live_servers():
        try:
            server.stop(timeout_s=timeout_s)
        except Exception:  # best effort at exit: try the others too
            continue


atexit.register(stop_all)


class TritonServer(ABC):
    """A Triton Inference Server this process drives. See the module docstring."""

    #: Seconds a restart waits for the old server to exit before forcing it. A tuner's old
    #: trial has no requests in flight, so the default is to force at once.
    restart_grace_s: float = 0.0

    def __init__(self, *, strategy: Strategy = "restart", startup_timeout_s: float = 120.0) -> None:
        if strategy not in ("restart", "reload"):
            raise ServerError(f"server strategy must be 'restart' or 'reload', but got "
                              f"{strategy!r}")
        self.strategy: Strategy = strategy
        self.startup_timeout_s = startup_timeout_s
        self._lock = threading.RLock()
        self._running = False
        self._repository: Path | None = None
        self._explicit = False
        self._endpoints: Endpoints | None = None
        self._loaded: dict[str, ModelConfig | None] = {}
        #: whether the ports were picked here (a port race is then retried with new ones)
        self._auto_ports = True
        self._stage_root: Path | None = None

    # -- what implementations provide ------------------------------------------------------
    @abstractmethod
    def _launch(self, repository: Path, explicit: bool) -> Endpoints:
        """Start the server process/container; return its endpoints (do not wait)."""

    @abstractmethod
    def _exit_reason(self) -> str | None:
        """None while the server runs; otherwise why it is gone (exit status)."""

    @abstractmethod
    def _terminate(self, timeout_s: float) -> None:
        """Stop it: ask, wait ``timeout_s``, force; remove everything it left."""

    @abstractmethod
    def log_text(self) -> str:
        """The server log of the last start ("" before the first start)."""

    @abstractmethod
    def has_backend(self, name: str) -> bool:
        """Whether this server can serve models with backend ``name`` (e.g. "onnxruntime")."""

    def pids(self) -> list[int]:
        """Process ids of the server and its children where this machine can see them
        (local and docker servers; [] otherwise)."""
        return []

    @abstractmethod
    def gpu_set(self, nvml: Any = None) -> GpuSet:
        """The GPUs this server was given (see the module docstring). ``nvml``: pynvml or a
        stand-in with its functions (None: pynvml)."""

    # -- the contract ------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self._running

    @property
    def repository(self) -> Path | None:
        return self._repository

    @property
    def endpoints(self) -> Endpoints:
        if self._endpoints is None or not self._running:
            raise ServerError("the server is not running: start() it first")
        return self._endpoints

    def client(self) -> TritonClient:
        """A new client for this server (callers close it)."""
        return TritonClient(self.endpoints)

    def start(self, repository: Path, *, explicit: bool = False) -> None:
        with self._lock:
            if self._running:
                raise ServerError("the server is already running: use restart()")
            repository = Path(repository).resolve()
            if not repository.is_dir():
                raise ServerStartError(f"model repository must be a directory, but got "
                                       f"{str(repository)!r}")
            if any(c.isspace() for c in str(repository)) and any(
                    repository.glob("*/[0-9]*/model.py")):
                raise ServerStartError(
                    "a model repository served by the Python backend must have a path without "
                    "spaces (Triton starts the backend's stub through a shell command line, "
                    f"which splits it), but got {str(repository)!r}")
            self._repository, self._explicit = repository, explicit
            self._loaded = {}
            for attempt in range(3):
                with _LIVE_LOCK:
                    _LIVE.add(self)
                self._running = True
                try:
                    self._endpoints = self._launch(repository, explicit)
                    self._wait_ready()
                    return
                except ServerStartError as err:
                    self.stop(timeout_s=0.0)
                    # another process took a port we picked between the check and the bind
                    if not (self._auto_ports and "already in use" in err.reason) or attempt == 2:
                        raise
                except BaseException:
                    self.stop(timeout_s=0.0)
                    raise

    def stop(self, timeout_s: float = 10.0) -> None:
        with self._lock:
            if not self._running:
                return
            try:
                self._terminate(timeout_s)
            finally:
                self._running = False
                with _LIVE_LOCK:
                    _LIVE.discard(self)

    def restart(self, repository: Path | None = None, *, explicit: bool | None = None) -> None:
        with self._lock:
            repo = repository if repository is not None else self._repository
            if repo is None:
                raise ServerError("restart() needs a repository: the server was never started")
            self.stop(timeout_s=self.restart_grace_s)
            self.start(repo, explicit=self._explicit if explicit is None else explicit)

    def load(self, name: str, config: ModelConfig | None = None) -> None:
        """Load (or reload with ``config`` as override) a model; explicit mode only.
        Raises :class:`ModelLoadError` with Triton's message (and the log's detail)."""
        with self._lock:
            mark = len(self.log_text())
            with self.client() as client:
                try:
                    client.load_model(name, config)
                except ModelLoadError as err:
                    detail = _log_errors(self.log_text()[mark:], name)
                    message = err.reason + (f" (server log: {detail})" if detail and
                                            detail not in err.reason else "")
                    raise ModelLoadError(message, self.log_tail()) from err
            self._loaded[name] = config

    def unload(self, name: str) -> None:
        with self._lock, self.client() as client:
            client.unload_model(name)
            self._loaded.pop(name, None)

    def apply_trial(self, repo: TrialRepository) -> None:
        """Serve one trial's repository with this server's strategy (see module docstring)."""
        with self._lock:
            if self.strategy == "restart":
                if self._running:
                    self.restart(repo.path, explicit=False)
                else:
                    self.start(repo.path)
                return
            root = self._stage(repo)
            if not self._running:
                self.start(root, explicit=True)
            elif not self._explicit:
                raise ServerError("the reload strategy needs a server started in explicit "
                                  "model-control mode, but this one was started without it")
            # loading over the previous trial's config swaps it: Triton serves the old
            # instances until the new ones are ready, then unloads the old in the background
            for name in [n for n in self._loaded if n != repo.model_name]:
                self.unload(name)
            self.load(repo.model_name, repo.served_config)

    def _stage(self, repo: TrialRepository) -> Path:
        """Reload strategy: copy the trial's model folder (hard links) into a repository this
        server owns, so that trial folders may come and go while the server keeps running;
        return that repository's root."""
        if self._stage_root is None:
            self._stage_root = Path(tempfile.mkdtemp(prefix="tracker-served-"))
            weakref.finalize(self, shutil.rmtree, str(self._stage_root), True)
        sync_model_dir(repo.path / repo.model_name, self._stage_root / repo.model_name)
        return self._stage_root

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def __enter__(self) -> TritonServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- helpers for implementations -------------------------------------------------------
    def _wait_ready(self) -> None:
        if self._endpoints is None:
            raise ServerStartError("internal: endpoints unknown after launch")
        client = TritonClient(self._endpoints)
        deadline = time.monotonic() + self.startup_timeout_s
        interval = 0.01
        while True:
            reason = self._exit_reason()
            if reason is None and FATAL in self.log_text():
                reason = "a process of the server crashed"
            if reason is not None:
                self._raise_start_error(reason)
            if client.is_ready():
                return
            if time.monotonic() > deadline:
                self._raise_start_error(f"not READY after {self.startup_timeout_s:g} s "
                                        "(server.startup_timeout_s)")
            time.sleep(interval)
            interval = min(interval * 1.5, 0.1)

    def _raise_start_error(self, reason: str) -> None:
        log = self.log_text()
        refused = _log_errors(log, None)
        if refused and ("failed to load" in refused or "Poll failed" in refused):
            raise ModelLoadError(f"Triton refused the model configuration: {refused}",
                                 self.log_tail())
        taken = _port_taken(log)
        if taken:
            raise ServerStartError(f"server did not start: {taken}", self.log_tail())
        problem = _first_problem(log) or next(
            (line.strip() for line in log.splitlines() if FATAL in line), "")
        if problem:
            reason = f"{reason}: {problem}"
        raise ServerStartError(f"server did not start: {reason}", self.log_tail())


def sync_model_dir(src: Path, dst: Path) -> None:
    """Make ``dst`` a copy of model folder ``src`` (files hard-linked where possible); the
    old ``dst`` is swapped out in one rename."""
    def link(a: str, b: str) -> None:
        try:
            os.link(a, b)
        except OSError:
            shutil.copy2(a, b)

    fresh = dst.with_name(dst.name + ".new")
    shutil.rmtree(fresh, ignore_errors=True)
    shutil.copytree(src, fresh, copy_function=link)
    if dst.exists():
        old = dst.with_name(dst.name + ".old")
        shutil.rmtree(old, ignore_errors=True)
        dst.rename(old)
        fresh.rename(dst)
        shutil.rmtree(old, ignore_errors=True)
    else:
        fresh.rename(dst)


def _first_problem(log: str) -> str:
    """The first line of ``log`` that says what went wrong (a Triton error line or a
    command-line complaint), without the log prefix."""
    for line in log.splitlines():
        low = line.lower()
        if "unrecognized option" in low or low.startswith("error:") or "invalid argument" in low:
            return line.split("] ", 1)[-1].strip()
    return _log_errors(log, None)


def _log_errors(log: str, model: str | None) -> str:
    """The first Triton error line (``E1129 ...] message``) in ``log``, about ``model`` when
    given: the message without the log prefix."""
    for line in log.splitlines():
        if len(line) > 1 and line[0] == "E" and line[1:5].isdigit() and "] " in line:
            message = line.split("] ", 1)[1].strip()
            if "CudaDriverHelper" in message or "DCGM" in message:
                continue
            if model is None or f"'{model}'" in message or f" {model}" in message:
                return message
    return ""


def _port_taken(log: str) -> str:
    for line in log.splitlines():
        if "already in use" in line and "] " in line:
            return line.split("] ", 1)[1].strip()
    return ""


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct ports that were free a moment ago (the OS picked them)."""
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((host, 0))
            socks.append(sock)
        return [s.getsockname()[1] for s in socks]
    finally:
        for sock in socks:
            sock.close()


def check_port_free(port: int, what: str, host: str = "127.0.0.1") -> None:
    """Raise :class:`ServerStartError` naming ``what`` when ``port`` is taken on ``host``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise ServerStartError(f"server.{what} {port} is taken on {host} ({exc.strerror}): "
                                   "free it or choose another port (or leave it unset to "
                                   "pick a free one)") from exc


def resolve_ports(http: int | None, grpc: int | None, metrics: int | None,
                  host: str = "127.0.0.1") -> tuple[int, int, int]:
    """The fixed ports (checked free) with free ones filling the gaps."""
    fixed = {"http_port": http, "grpc_port": grpc, "metrics_port": metrics}
    for what, port in fixed.items():
        if port is not None:
            check_port_free(port, what, host)
    spare = iter(p for p in free_ports(6, host) if p not in fixed.values())
    return (http or next(spare), grpc or next(spare), metrics or next(spare))


def make_server(server: ServerSection) -> TritonServer:
    """The launcher ``server.mode`` names, configured from the spec's server section."""
    if server.mode == "local":
        from tracker.triton.server.local import LocalTritonServer

        return LocalTritonServer.from_spec(server)
    if server.mode == "docker":
        from tracker.triton.server.docker import DockerTritonServer

        return DockerTritonServer.from_spec(server)
    if server.mode == "remote":
        from tracker.triton.server.remote import RemoteTritonServer

        return RemoteTritonServer.from_spec(server)
    raise ServerError(f"server.mode must be local, docker or remote, but got {server.mode!r}")
