"""The machinery behind the server contract (base.py), shared by every launch mode.

A launch mode subclasses :class:`Launcher` and provides its hooks: ``_launch`` (start the
process/container, or attach), ``_exit_reason``, ``_terminate``, ``log_text``,
``has_backend``, and where it differs, ``_check_repository``, ``_stage`` and
``_raise_start_error``. Everything the contract promises (READY before returning, retries
after a port race, nothing left behind after a failed start, the reload strategy's staging)
is done here, once. A server that answers READY is confirmed to be the one launched
(``_confirm_own``), so that a start never reports another server on a raced port as its own.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
import threading
import time
import weakref
from abc import abstractmethod
from pathlib import Path
from typing import TYPE_CHECKING

from tracker.errors import ModelLoadError, ServerError, ServerStartError
from tracker.triton.client import TritonClient
from tracker.triton.endpoints import Endpoints
from tracker.triton.server import live, logs
from tracker.triton.server.base import Strategy, TritonServer
from tracker.triton.tls import Security

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

    from tracker.triton.repository import TrialRepository


#: starts tried when a port picked here turns out taken (a port race); then it is an error
START_TRIES = 3


class ForeignServerError(ServerStartError):
    """Something else than the server launched here answers on one of its ports: another
    process bound the port between its pick and the server's bind."""


class Launcher(TritonServer):
    """:class:`TritonServer` over a launch mode's hooks."""

    #: Seconds a restart waits for the old server to exit before forcing it. A tuner's old
    #: trial has no requests in flight, so the default is to force at once.
    restart_grace_s: float = 0.0
    #: the server only runs in explicit model-control mode (someone else's server)
    explicit_only: bool = False
    #: TLS and headers its clients use (server.tls/headers; None: the launcher's own)
    security: Security | None = None
    #: start with Triton's auto-complete on (default off: every trial's config.pbtxt is
    #: complete; tracker/triton/autocomplete.py turns it on to read a model's completion)
    auto_complete: bool = False

    def __init__(self, *, strategy: Strategy = "restart", startup_timeout_s: float = 120.0) -> None:
        if strategy not in ("restart", "reload"):
            raise ServerError(f"server strategy must be 'restart' or 'reload', but got "
                              f"{strategy!r}")
        self.strategy = strategy
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
        self.option_args: tuple[str, ...] = ()

    def auto_complete_args(self) -> list[str]:
        """The flag that turns Triton's auto-complete off, unless :attr:`auto_complete`."""
        return [] if self.auto_complete else ["--disable-auto-complete-config"]

    # -- hooks -------------------------------------------------------------------------------
    @abstractmethod
    def _launch(self, repository: Path, explicit: bool) -> Endpoints:
        """Start the server process/container (or attach); return its endpoints (no wait)."""

    @abstractmethod
    def _exit_reason(self) -> str | None:
        """None while the server runs; otherwise why it is gone (exit status)."""

    @abstractmethod
    def _terminate(self, timeout_s: float) -> None:
        """Stop it: ask, wait ``timeout_s``, force; remove everything it left."""

    def _confirm_own(self, deadline: float) -> None:
        """Called once the endpoints answer READY: raise :class:`ForeignServerError` when
        what answers is not the server launched here but another one that holds its ports.
        By default whoever answers is the server (an attached one is nobody's child)."""

    def _check_repository(self, repository: Path) -> Path:
        """The repository to serve, resolved; ServerStartError when it cannot be served."""
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
        return repository

    def _stage(self, repo: TrialRepository) -> Path:
        """Reload strategy: copy the trial's model folder (hard links) into a repository this
        server owns, so that trial folders may come and go while the server keeps running;
        return that repository's root."""
        if self._stage_root is None:
            self._stage_root = Path(tempfile.mkdtemp(prefix="tracker-served-"))
            weakref.finalize(self, shutil.rmtree, str(self._stage_root), True)
        for name in repo.model_names:
            sync_model_dir(repo.path / name, self._stage_root / name)
        return self._stage_root

    def _raise_start_error(self, reason: str) -> None:
        """Raise the start failure with what the log says about it."""
        log = self.log_text()
        refused = logs.first_error(log)
        if refused and ("failed to load" in refused or "Poll failed" in refused):
            raise ModelLoadError(f"Triton refused the model configuration: {refused}",
                                 self.log_tail())
        taken = logs.port_taken(log)
        if taken:
            raise ServerStartError(f"server did not start: {taken}", self.log_tail())
        problem = logs.first_problem(log) or logs.fatal_line(log)
        if problem:
            reason = f"{reason}: {problem}"
        raise ServerStartError(f"server did not start: {reason}", self.log_tail())

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
        return TritonClient(self.endpoints)

    def gone(self) -> str | None:
        with self._lock:
            return self._exit_reason() if self._running else None

    def start(self, repository: Path, *, explicit: bool = False) -> None:
        with self._lock:
            if self._running:
                raise ServerError("the server is already running: use restart()")
            repository = self._check_repository(repository)
            explicit = explicit or self.explicit_only
            self._repository, self._explicit = repository, explicit
            self._loaded = {}
            for attempt in range(1, START_TRIES + 1):
                live.register(self)
                self._running = True
                try:
                    self._endpoints = self._launch(repository, explicit)
                    if self.security is not None:  # a server started with TLS options
                        self._endpoints = dataclasses.replace(self._endpoints,
                                                              security=self.security)
                    self._wait_ready()
                    return
                except ServerStartError as err:
                    self.stop(timeout_s=0.0)
                    # another process took a port we picked between the check and the bind
                    raced = isinstance(err, ForeignServerError) or "already in use" in err.reason
                    if not (self._auto_ports and raced):
                        raise
                    if attempt == START_TRIES:
                        raise type(err)(f"server did not start in {START_TRIES} tries: each "
                                        "time another process took a port picked for it "
                                        f"(last: {err.reason})", err.log_tail) from err
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
                live.discard(self)

    def restart(self, repository: Path | None = None, *, explicit: bool | None = None) -> None:
        with self._lock:
            repo = repository if repository is not None else self._repository
            if repo is None:
                raise ServerError("restart() needs a repository: the server was never started")
            self.stop(timeout_s=self.restart_grace_s)
            self.start(repo, explicit=self._explicit if explicit is None else explicit)

    def load(self, name: str, config: ModelConfig | None = None) -> None:
        with self._lock:
            mark = len(self.log_text())
            with self.client() as client:
                try:
                    client.load_model(name, config)
                except ModelLoadError as err:
                    detail = logs.first_error(self.log_text()[mark:], name)
                    message = err.reason + (f" (server log: {detail})" if detail and
                                            detail not in err.reason else "")
                    raise ModelLoadError(message, self.log_tail()) from err
            self._loaded[name] = config

    def unload(self, name: str) -> None:
        with self._lock, self.client() as client:
            client.unload_model(name)
            self._loaded.pop(name, None)

    def check_options(self, args: tuple[str, ...]) -> None:
        """ServerError when this server cannot be started with the flags ``args``."""

    def apply_trial(self, repo: TrialRepository,
                    options: tuple[str, ...] | None = None) -> bool:
        with self._lock:
            if self.gone() is not None:  # it died under the last trial: this one starts anew
                self.stop(timeout_s=0.0)
            changed = options is not None and tuple(options) != self.option_args
            if changed:
                self.check_options(tuple(options or ()))
                self.option_args = tuple(options or ())
            if self.strategy == "restart":
                if self._running:
                    self.restart(repo.path, explicit=False)
                else:
                    self.start(repo.path)
                return changed
            root = self._stage(repo)
            restarted = changed and self._running
            if restarted:  # a server option cannot change while it runs: a reload won't do
                self.stop(timeout_s=self.restart_grace_s)
            if not self._running:
                self.start(root, explicit=True)
            elif not self._explicit:
                raise ServerError("the reload strategy needs a server started in explicit "
                                  "model-control mode, but this one was started without it")
            # loading over the previous trial's config swaps it: Triton serves the old
            # instances until the new ones are ready, then unloads the old in the background
            wanted = repo.model_names
            for name in [n for n in self._loaded if n not in wanted]:
                self.unload(name)
            served = dict(repo.models)
            for name in wanted:  # the composing models first, the entry last
                if _cache_switched(self._loaded.get(name), served[name]):
                    self.unload(name)
                self.load(name, served[name])
            return restarted

    def _wait_ready(self) -> None:
        if self._endpoints is None:
            raise ServerStartError("internal: endpoints unknown after launch")
        client = TritonClient(self._endpoints)
        deadline = time.monotonic() + self.startup_timeout_s
        interval = 0.01
        while True:
            reason = self._exit_reason()
            if reason is None and logs.FATAL in self.log_text():
                reason = "a process of the server crashed"
            if reason is not None:
                self._raise_start_error(reason)
            if client.is_ready():
                self._confirm_own(deadline)
                return
            if time.monotonic() > deadline:
                self._raise_start_error(f"not READY after {self.startup_timeout_s:g} s "
                                        "(server.startup_timeout_s)")
            time.sleep(interval)
            interval = min(interval * 1.5, 0.1)


def _cache_switched(old: ModelConfig | None, new: ModelConfig | None) -> bool:
    """Whether a reload turns the response cache on or off: Triton (2.51, checked here)
    swaps the model in but keeps the old one's cache setting, so it must be unloaded
    first."""
    return (old is not None and new is not None
            and old.response_cache.enable != new.response_cache.enable)


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
