"""The contract every Triton server launcher keeps (local process, Docker container, remote).

Each method's promise is written on it; tests/triton/test_server_contract.py checks every promise
against every launch mode. The shared machinery behind the promises (retries, readiness,
staging for the reload strategy) is :class:`tracker.triton.server.launcher.Launcher`; a launch
mode implements its hooks. Modes are registered in tracker/launch_modes.py and made by
:func:`tracker.triton.server.modes.make_server`.

Thread safety: one thread drives a server at a time (implementations serialize calls with a
lock); :func:`tracker.triton.server.live.stop_all` may be called from any thread or at exit.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

    from tracker.triton.client import TritonClient
    from tracker.triton.endpoints import Endpoints
    from tracker.triton.gpus import GpuSet
    from tracker.triton.repository import TrialRepository

Strategy = Literal["restart", "reload"]


class TritonServer(ABC):
    """A Triton Inference Server this process drives."""

    #: ``restart`` (each trial restarts the server over its repository) or ``reload`` (one
    #: server in explicit model-control mode; each trial's config is loaded as an override)
    strategy: Strategy
    #: the tritonserver flags of server.options the next start passes (none by default;
    #: :meth:`apply_trial` changes them, tracker/spec/server_options.py)
    option_args: tuple[str, ...] = ()

    @abstractmethod
    def start(self, repository: Path, *, explicit: bool = False) -> None:
        """Serve ``repository``; return only once the server answers READY (every model in
        it loaded). ``explicit=True`` starts it with ``--model-control-mode=explicit``
        (models are then loaded with :meth:`load`).

        If the server exits, a model fails to load or READY does not come within
        ``startup_timeout_s``, raise :class:`~tracker.errors.ServerStartError` (or
        :class:`~tracker.errors.ModelLoadError` when Triton refused a model config) carrying
        the reason and the tail of the server log, and leave nothing running. Ports are chosen
        free unless fixed; a fixed port that is taken is a ServerStartError that names it.
        Starting a running server is a :class:`~tracker.errors.ServerError`."""

    @abstractmethod
    def stop(self, timeout_s: float = 10.0) -> None:
        """Ask the server to exit, wait ``timeout_s``, then force it. Calling it again, or on
        a server never started, does nothing. After it returns no process, container or
        shared-memory region of this server is left (a remote server: the models this
        process loaded are unloaded, the server keeps running)."""

    @abstractmethod
    def restart(self, repository: Path | None = None, *, explicit: bool | None = None) -> None:
        """:meth:`stop` then :meth:`start`: the same repository (and model-control mode)
        unless others are given. ServerError when the server was never started."""

    @property
    @abstractmethod
    def running(self) -> bool:
        """Started and not stopped since."""

    @property
    @abstractmethod
    def endpoints(self) -> Endpoints:
        """Where the running server answers; ServerError when it is not running."""

    @abstractmethod
    def client(self) -> TritonClient:
        """A new client for the running server (the caller closes it)."""

    @abstractmethod
    def load(self, name: str, config: ModelConfig | None = None) -> None:
        """Load (or reload with ``config`` as override) model ``name``; explicit mode only.
        A refusal is a ModelLoadError with Triton's message (and the log's detail)."""

    @abstractmethod
    def unload(self, name: str) -> None:
        """Unload model ``name`` and wait until Triton has finished unloading it."""

    @abstractmethod
    def apply_trial(self, repo: TrialRepository,
                    options: tuple[str, ...] | None = None) -> bool:
        """Serve one trial's repository with :attr:`strategy`: ``restart`` starts (or
        restarts) the server over ``repo.path``; ``reload`` starts it once in explicit mode
        and loads each trial's served config as an override (nothing restarts; the trial's
        folder may be deleted afterwards). ``options``: the tritonserver flags of the
        trial's server options (None: those of the last start); when they differ from the
        running server's, it is restarted with them whatever the strategy (a reload cannot
        change a server option), and the call returns True. A server that cannot take
        them (remote) raises ServerError. A server whose process has died since it was
        started (:meth:`gone`) is started afresh, whatever the strategy. Raises as
        :meth:`start` / :meth:`load` do."""

    def gone(self) -> str | None:
        """Why a started server is no longer running although nobody stopped it (its process
        exited: "tritonserver was killed by signal 11 (SIGSEGV)"); None while it runs, before
        it starts, after :meth:`stop`, and for a server this process cannot watch (remote)."""
        return None

    @abstractmethod
    def log_text(self) -> str:
        """The server log of the last start: "" before the first start, kept after stop
        ("" for a remote server, whose log lives with whoever runs it)."""

    def log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines of :meth:`log_text`."""
        return "\n".join(self.log_text().splitlines()[-lines:])

    @abstractmethod
    def has_backend(self, name: str) -> bool:
        """Whether this server can serve models with backend ``name`` (e.g. "onnxruntime")."""

    def known_flags(self) -> frozenset[str] | None:
        """The flags this server's ``tritonserver --help`` lists (``--log-verbose``, ...);
        None when it cannot be asked before it runs (someone else's server, an image)."""
        return None

    def pids(self) -> list[int]:
        """Process ids of the server and its children where this machine can see them
        (local and docker servers; [] otherwise)."""
        return []

    @abstractmethod
    def gpu_set(self, nvml: Any = None) -> GpuSet:
        """The GPUs this server was given, by UUID (:class:`~tracker.triton.gpus.GpuSet`;
        local: its ``CUDA_VISIBLE_DEVICES``, docker: its DeviceRequest, remote: the GPUs its
        metrics report). Empty means no GPU, or none that can be known here (NVML
        unavailable); a GPU the machine does not have is a :class:`GpuError`. Works before
        :meth:`start` for local and docker servers. Monitors measure exactly this set.
        ``nvml``: pynvml or a stand-in with its functions (None: pynvml)."""

    def __enter__(self) -> TritonServer:
        return self

    def __exit__(self, *exc: object) -> None:
        """Leaving ``with server:`` stops it."""
        self.stop()
