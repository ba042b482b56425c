"""A ``tritonserver`` process on this machine.

By default the binary inside the installed ``nvidia-pytriton`` wheel, set up as it needs
(docs/servers.md): the Python backend's stub for the running Python next to
``libtriton_python.so`` (in a prepared backend directory under ``~/.cache/tracker``, so the
installed wheel is never modified), ``LD_LIBRARY_PATH`` with the interpreter's libdir and the
wheel's libraries, and the interpreter's ``bin`` first on ``PATH`` so the stub's embedded
Python finds numpy and onnxruntime. Any other ``tritonserver`` (a path, or a name looked up on
PATH) is run as is. The server binds 127.0.0.1 only.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, NoReturn

import psutil

from tracker.errors import ServerStartError
from tracker.spec import ServerSection
from tracker.triton.endpoints import Endpoints
from tracker.triton.gpus import GpuSet
from tracker.triton.server import processes, records
from tracker.triton.server.gpu_sets import cuda_gpu_set
from tracker.triton.server.launcher import ForeignServerError, Launcher
from tracker.triton.server.ports import listening_sockets, resolve_ports, sockets_of

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

HOST = "127.0.0.1"
BIND_WAIT_S = 5.0  # how long a READY server may take to bind its other ports
DEFAULT_BACKEND_DIR = Path("/opt/tritonserver/backends")


@dataclass(frozen=True)
class WheelServer:
    """The Triton server shipped in the nvidia-pytriton wheel, ready to run."""

    binary: Path
    backend_dir: Path
    lib_dirs: tuple[Path, ...]
    bin_dir: Path


def wheel_server() -> WheelServer:
    """Find the wheel's tritonserver and prepare its Python backend for this interpreter."""
    try:
        import pytriton
    except ImportError as exc:
        raise ServerStartError("no tritonserver: the nvidia-pytriton wheel is not installed "
                               "(pip install nvidia-pytriton) and server.binary is not "
                               "set") from exc
    root = Path(pytriton.__file__).resolve().parent / "tritonserver"
    binary = root / "bin" / "tritonserver"
    py = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = root / "python_backend_stubs" / py / "triton_python_backend_stub"
    backend = root / "backends" / "python"
    for need in (binary, stub, backend / "libtriton_python.so"):
        if not need.exists():
            raise ServerStartError(f"the nvidia-pytriton wheel at {root.parent} lacks "
                                   f"{need.relative_to(root)} (Python {py}): reinstall it "
                                   "or set server.binary")
    libs = root.parent.parent / "nvidia_pytriton.libs"
    libdir = Path(str(sysconfig.get_config_var("LIBDIR") or sys.base_prefix + "/lib"))
    return WheelServer(binary=binary, backend_dir=_backend_dir(backend, stub),
                       lib_dirs=(libdir, libs), bin_dir=Path(sys.executable).parent)


def _backend_dir(backend: Path, stub: Path) -> Path:
    """``<cache>/triton-backends/<key>/python/`` holding links to the wheel's Python backend
    and the stub for this Python (made once, atomically)."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tracker"
    key = hashlib.sha1(f"{backend}|{stub}".encode()).hexdigest()[:12]
    target = cache / "triton-backends" / key
    if (target / "python" / stub.name).exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".tmp-"))
    (tmp / "python").mkdir()
    for src in [*backend.iterdir(), stub]:
        if src.is_file():
            (tmp / "python" / src.name).symlink_to(src)
    try:
        tmp.rename(target)
    except OSError:  # another process made it first
        shutil.rmtree(tmp, ignore_errors=True)
    return target


class LocalTritonServer(Launcher):
    """``tritonserver`` as a child process group of this process (see module docstring).

    ``server``: the spec's server section (default: its defaults): ``binary`` None for the
    wheel's server, else a path or a name on PATH; ``gpus`` None or ``"all"`` (inherit
    ``CUDA_VISIBLE_DEVICES``), or a list of GPU indices as nvidia-smi numbers them (the server
    gets them as ``CUDA_VISIBLE_DEVICES`` with ``CUDA_DEVICE_ORDER=PCI_BUS_ID``, so that they
    mean the same GPUs as a Docker request); the strategy, fixed ports, startup timeout.
    ``extra_args``: more tritonserver flags. ``log_dir``: where logs go (default: a temp dir).
    """

    def __init__(self, server: ServerSection | None = None, *, exit_timeout_s: int = 1,
                 backend_dir: Path | None = None, extra_args: Sequence[str] = (),
                 log_dir: Path | None = None) -> None:
        server = server or ServerSection()
        super().__init__(strategy=server.strategy, startup_timeout_s=server.startup_timeout_s)
        self._binary_arg = server.binary
        self._ports = (server.http_port, server.grpc_port, server.metrics_port)
        self._auto_ports = None in self._ports
        self.gpus = server.gpus
        self.exit_timeout_s = exit_timeout_s
        self._backend_dir_arg = backend_dir
        self.extra_args = tuple(extra_args)
        if log_dir is None:
            log_dir = Path(tempfile.mkdtemp(prefix="tracker-triton-"))
            weakref.finalize(self, shutil.rmtree, str(log_dir), True)
        self.log_dir = Path(log_dir)
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_file: IO[bytes] | None = None
        self._log_path: Path | None = None
        self._record: Path | None = None
        self._shm_prefix = ""
        self._server_id = ""
        self._envs = processes.PythonEnvs()  # the Python backend's /tmp folders
        self._starts = 0

    @classmethod
    def from_spec(cls, server: ServerSection) -> LocalTritonServer:
        return cls(server)

    # -- binary and environment ------------------------------------------------------------
    def _command_env(self) -> tuple[Path, Path | None, dict[str, str]]:
        env = dict(os.environ)
        if self._binary_arg is None:
            wheel = wheel_server()
            env["LD_LIBRARY_PATH"] = os.pathsep.join(
                [*(str(d) for d in wheel.lib_dirs), *filter(None, [env.get("LD_LIBRARY_PATH")])])
            env["PATH"] = os.pathsep.join([str(wheel.bin_dir), env.get("PATH", "")])
            return wheel.binary, self._backend_dir_arg or wheel.backend_dir, env
        arg = Path(self._binary_arg)
        # a bare name in the spec arrives resolved against the spec's folder: look it up on
        # PATH when no such file exists
        found = shutil.which(str(arg)) or (None if arg.exists() else shutil.which(arg.name))
        if found is None:
            raise ServerStartError(f"server.binary {str(self._binary_arg)!r} is not an "
                                   "executable file nor a command on PATH")
        return Path(found), self._backend_dir_arg, env

    def backend_directory(self) -> Path:
        """The directory the server loads backends from."""
        _, backend_dir, _ = self._command_env()
        return backend_dir or DEFAULT_BACKEND_DIR

    def has_backend(self, name: str) -> bool:
        """Whether the backend directory holds ``name`` (the wheel's holds only python)."""
        return (self.backend_directory() / name).is_dir()

    def known_flags(self) -> frozenset[str] | None:
        """The flags ``tritonserver --help`` lists; None when the binary cannot be run."""
        try:
            binary, _, env = self._command_env()
            done = subprocess.run([str(binary), "--help"], env=env, capture_output=True,
                                  text=True, timeout=60, check=False)
        except (OSError, subprocess.TimeoutExpired, ServerStartError):
            return None
        return frozenset(re.findall(r"--[a-z][a-z0-9-]*", done.stdout + done.stderr)) or None

    # -- the contract's hooks ---------------------------------------------------------------
    def _launch(self, repository: Path, explicit: bool) -> Endpoints:
        processes.reap_leftovers()
        binary, backend_dir, env = self._command_env()
        http, grpc, metrics = resolve_ports(*self._ports, host=HOST)
        self._server_id = server_id = records.new_server_id()
        self._shm_prefix = records.shm_prefix(server_id)
        env[processes.OWNER_ENV] = str(os.getpid())
        env[processes.SERVER_ENV] = server_id
        env.update(self.gpu_env())
        argv = [str(binary), f"--model-repository={repository}",
                f"--http-address={HOST}", f"--http-port={http}",
                f"--grpc-address={HOST}", f"--grpc-port={grpc}",
                f"--metrics-address={HOST}", f"--metrics-port={metrics}",
                *self.auto_complete_args(), f"--exit-timeout-secs={self.exit_timeout_s}",
                f"--backend-config=python,shm-region-prefix-name={self._shm_prefix}"]
        if backend_dir is not None:
            argv.append(f"--backend-directory={backend_dir}")
        if self._binary_arg is None:  # the wheel's response cache (server.options.cache_size)
            argv.append(f"--cache-directory={binary.parent.parent / 'caches'}")
        if explicit:
            argv.append("--model-control-mode=explicit")
        if not self._own_id():
            argv.append(f"--id={server_id}")  # read back as the server metadata's name
        argv.extend(self.extra_args)
        argv.extend(self.option_args)
        self._starts += 1
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._log_path = self.log_dir / f"server-{self._starts}.log"
        self._log_file = self._log_path.open("wb")
        self._envs.open()
        try:
            self._proc = processes.spawn(argv, env, self._log_file, cwd=str(self.log_dir))
        except OSError as exc:
            raise ServerStartError(f"cannot run {binary}: {exc}") from exc
        self._record = records.write_record(server_id, self._proc)
        return Endpoints(HOST, http, grpc, metrics)

    def _wait_ready(self) -> None:
        try:
            super()._wait_ready()
        finally:
            self._envs.close()

    def load(self, name: str, config: ModelConfig | None = None) -> None:
        self._envs.open()  # explicit mode: the first Python model loaded makes the folder
        try:
            super().load(name, config)
        finally:
            self._envs.close()

    def _own_id(self) -> bool:
        """Whether the flags set the server's ``--id`` themselves."""
        return any(a == "--id" or a.startswith("--id=")
                   for a in (*self.extra_args, *self.option_args))

    def _confirm_own(self, deadline: float) -> None:
        """The server process started here holds the HTTP and gRPC ports it was given (the
        metrics port too, unless no one listens there), no other process listens on them, and
        the server metadata names it (``--id``, unless the flags set their own); the ports it
        binds after the first that answered get a few seconds. Else
        :class:`ForeignServerError`: another process took a port before the server bound it."""
        ep = self.endpoints
        ports = {"http_port": ep.http_port, "grpc_port": ep.grpc_port,
                 "metrics_port": ep.metrics_port}
        until = min(deadline, time.monotonic() + BIND_WAIT_S)
        while True:
            reason = self._exit_reason()
            if reason is not None:
                self._raise_start_error(reason)
            listeners = {what: listening_sockets(port, HOST) for what, port in ports.items()
                         if port}
            mine = sockets_of(self.pids())  # read after: a socket bound since is not missed
            held = {what: socks for what, socks in listeners.items() if socks is not None}
            if len(held) < len(listeners):
                break  # no /proc to tell: the server metadata decides
            foreign = [what for what, socks in held.items() if socks - mine]
            if foreign:
                self._foreign(foreign[0], ports[foreign[0]], "is held by another process, not "
                              "by the tritonserver started here")
            missing = [what for what, socks in held.items() if not socks & mine
                       and (what != "metrics_port" or time.monotonic() < until)]
            if not missing:
                break
            if time.monotonic() > until:
                self._foreign(missing[0], ports[missing[0]], "answers, but the tritonserver "
                              "started here does not listen there")
            time.sleep(0.02)
        if self._own_id():
            return
        what, port, name = self._answering_name()
        if name != self._server_id:
            self._foreign(what, port, f"answers as server {name!r}, not as the one started "
                          f"here ({self._server_id!r})")

    def _answering_name(self) -> tuple[str, int | None, str]:
        """The server metadata's name (``--id``), asked where READY was asked: over HTTP
        (plain, as the launcher's readiness check) when the HTTP port is known, else gRPC."""
        ep = self.endpoints
        if ep.http is None:
            with self.client() as client:
                return "grpc_port", ep.grpc_port, str(client.server_metadata()["name"])
        try:
            with ep.security.urlopen(ep.http + "/v2", 5.0) as resp:
                return "http_port", ep.http_port, str(json.loads(resp.read()).get("name"))
        except (OSError, ValueError, AttributeError) as exc:
            raise ServerStartError(f"the server at {ep.http} answered READY but not its "
                                   f"metadata: {exc}", self.log_tail()) from exc

    def _foreign(self, what: str, port: int | None, why: str) -> NoReturn:
        fix = "" if self._auto_ports else ": stop that process or choose another port"
        raise ForeignServerError(f"server.{what} {port} on {HOST} {why}{fix}", self.log_tail())

    def _exit_reason(self) -> str | None:
        if self._proc is None:
            return "never started"
        code = self._proc.poll()
        if code is None:
            return None
        return processes.exit_words("tritonserver", code)

    def _terminate(self, timeout_s: float) -> None:
        proc = self._proc
        if proc is not None:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=max(timeout_s, 0.0))
            processes.kill_group(proc.pid)
            proc.wait()
        processes.remove_shm(self._shm_prefix)
        self._envs.remove()
        if self._record is not None:
            with contextlib.suppress(OSError):
                self._record.unlink()
            self._record = None
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def gpu_env(self) -> dict[str, str]:
        """What the server's environment gets for ``gpus`` (nothing: it inherits ours)."""
        if not isinstance(self.gpus, list):
            return {}
        return {"CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in self.gpus),
                "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}

    def gpu_set(self, nvml: Any = None) -> GpuSet:
        """The GPUs of the server's ``CUDA_VISIBLE_DEVICES`` (ours, or ``gpus``)."""
        return cuda_gpu_set({**os.environ, **self.gpu_env()}, nvml)

    def log_text(self) -> str:
        if self._log_path is None or not self._log_path.exists():
            return ""
        return self._log_path.read_text(errors="replace")

    @property
    def log_path(self) -> Path | None:
        """The log file of the last start."""
        return self._log_path

    def pids(self) -> list[int]:
        if self._proc is None or self._proc.poll() is not None:
            return []
        try:
            root = psutil.Process(self._proc.pid)
            return [root.pid, *(c.pid for c in root.children(recursive=True))]
        except psutil.NoSuchProcess:
            return []
