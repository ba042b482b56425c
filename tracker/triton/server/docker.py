"""Triton in a Docker container, through the Docker SDK.

The default image is the official ``nvcr.io/nvidia/tritonserver:<yy.mm>-py3`` (``tritonserver``
on PATH, onnxruntime/TensorRT/Python backends). Another image may say what it holds with labels:
``tracker.triton.backends`` (comma-separated backend names; without it the official image's
set is assumed), ``tracker.triton.binary`` (the server command, default ``tritonserver``).

The model repository is mounted read-only at the same path inside and outside, so paths in
logs and configs mean the same thing on both sides. Containers are named
``tracker-triton-<pid>-<n>`` and labelled with the owner's pid, start time and host; a start
removes containers whose owner process is gone (leftovers of a crashed tuner).
"""

from __future__ import annotations

import contextlib
import math
import os
import socket
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil

from tracker.errors import ServerError, ServerStartError
from tracker.spec import ServerSection
from tracker.triton.endpoints import Endpoints
from tracker.triton.gpus import GpuSet
from tracker.triton.server.gpu_sets import docker_gpu_set
from tracker.triton.server.launcher import Launcher
from tracker.triton.server.ports import resolve_ports
from tracker.triton.server.processes import OWNER_ENV
from tracker.triton.server.records import owner_identity

if TYPE_CHECKING:
    import docker
    from docker.models.containers import Container

OFFICIAL_BACKENDS = frozenset({"onnxruntime", "python", "tensorrt", "pytorch", "tensorflow",
                               "openvino", "fil", "identity", "repeat", "square"})
LABEL = "tracker.managed"
HOST = "127.0.0.1"


def docker_client() -> docker.DockerClient:
    """A client for the local daemon; :class:`ServerStartError` when it cannot be reached."""
    import docker
    from docker.errors import DockerException

    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if host.startswith("unix://") and not Path(host[len("unix://"):]).exists():
        raise ServerStartError(f"the Docker daemon at {host} cannot be reached (no such "
                               "socket); start it (e.g. `dockerd`), set DOCKER_HOST, or use "
                               "server.mode local")
    client = None
    try:
        client = docker.from_env(timeout=60)
        client.ping()
    except DockerException as exc:
        if client is not None:
            client.close()
        raise ServerStartError(f"the Docker daemon at {host} cannot be reached ({exc}); start "
                               "it (e.g. `dockerd`), set DOCKER_HOST, or use server.mode "
                               "local") from exc
    return client


def device_requests(gpus: list[int] | str | None) -> list[Any]:
    """The DeviceRequest list for ``gpus``: None -> none, "all" -> every GPU, [0, 1] -> those."""
    from docker.types import DeviceRequest

    if gpus is None:
        return []
    if gpus == "all":
        return [DeviceRequest(count=-1, capabilities=[["gpu"]])]
    if isinstance(gpus, list) and all(isinstance(g, int) and g >= 0 for g in gpus):
        return [DeviceRequest(device_ids=[str(g) for g in gpus], capabilities=[["gpu"]])]
    raise ServerError(f"server.gpus must be 'all' or a list of GPU indices, but got {gpus!r}")


def reap_containers(client: docker.DockerClient) -> list[str]:
    """Remove managed containers of this host whose owner process is gone; their names."""
    removed = []
    for container in client.containers.list(all=True, filters={"label": LABEL}):
        labels = container.labels
        if labels.get("tracker.host") != socket.gethostname():
            continue
        pid, start = int(labels.get("tracker.owner_pid", "0")), labels.get("tracker.owner_start")
        try:
            owner = psutil.Process(pid)
            alive = start is None or abs(owner.create_time() - float(start)) < 0.5
        except (psutil.NoSuchProcess, ValueError):
            alive = False
        if not alive:
            with contextlib.suppress(Exception):
                container.remove(force=True)
                removed.append(container.name)
    return removed


class DockerTritonServer(Launcher):
    """Triton in a container (see module docstring), as the spec's server section (default:
    its defaults) says: its image, binary, GPUs, shared memory, strategy, fixed ports, startup
    timeout. ``network="host"`` (default) binds the ports on 127.0.0.1 of the host;
    ``"bridge"`` maps them to 127.0.0.1."""

    _counter = 0

    def __init__(self, server: ServerSection | None = None, *, exit_timeout_s: int = 1,
                 environment: dict[str, str] | None = None,
                 extra_args: Sequence[str] = ()) -> None:
        server = server or ServerSection()
        super().__init__(strategy=server.strategy, startup_timeout_s=server.startup_timeout_s)
        network = server.network
        if network not in ("host", "bridge"):
            raise ServerError(f"server.network must be 'host' or 'bridge', but got {network!r}")
        self.image = server.image
        self.binary = str(server.binary) if server.binary else None
        self.gpus = server.gpus
        device_requests(server.gpus)  # validate early
        self.shm_size = server.shm_size
        self.network = network
        self._ports = (server.http_port, server.grpc_port, server.metrics_port)
        self._auto_ports = None in self._ports
        self.exit_timeout_s = exit_timeout_s
        self.environment = dict(environment or {})
        self.extra_args = tuple(extra_args)
        self._docker: docker.DockerClient | None = None
        self._container: Container | None = None
        self._log = ""

    @classmethod
    def from_spec(cls, server: ServerSection) -> DockerTritonServer:
        return cls(server)

    @property
    def docker(self) -> docker.DockerClient:
        if self._docker is None:
            self._docker = docker_client()
        return self._docker

    def _image_labels(self) -> dict[str, str]:
        from docker.errors import ImageNotFound

        try:
            image = self.docker.images.get(self.image)
        except ImageNotFound as exc:
            raise ServerStartError(f"Docker image {self.image!r} is not on this machine: pull "
                                   f"it first with `docker pull {self.image}`") from exc
        return dict(image.labels or {})

    def has_backend(self, name: str) -> bool:
        """From the image's ``tracker.triton.backends`` label, else the official image's set."""
        listed = self._image_labels().get("tracker.triton.backends")
        if listed is None:
            return name in OFFICIAL_BACKENDS
        return name in {b.strip() for b in listed.split(",")}

    def container_spec(self, repository: Path, explicit: bool,
                       ports: tuple[int, int, int]) -> dict[str, Any]:
        """The keyword arguments given to ``containers.run`` (tests inspect them)."""
        http, grpc, metrics = ports
        binary = self.binary or self._image_labels().get("tracker.triton.binary", "tritonserver")
        address = HOST if self.network == "host" else "0.0.0.0"  # inside the bridge netns
        command = [binary, f"--model-repository={repository}",
                   f"--http-address={address}", f"--http-port={http}",
                   f"--grpc-address={address}", f"--grpc-port={grpc}",
                   f"--metrics-address={address}", f"--metrics-port={metrics}",
                   *self.auto_complete_args(), f"--exit-timeout-secs={self.exit_timeout_s}"]
        if explicit:
            command.append("--model-control-mode=explicit")
        command.extend(self.extra_args)
        command.extend(self.option_args)
        ident = owner_identity()
        DockerTritonServer._counter += 1
        spec: dict[str, Any] = {
            "image": self.image, "command": command, "detach": True,
            "name": f"tracker-triton-{ident['owner_pid']}-{DockerTritonServer._counter}",
            "labels": {LABEL: "1", "tracker.owner_pid": str(ident["owner_pid"]),
                       "tracker.owner_start": repr(ident["owner_start"]),
                       "tracker.host": socket.gethostname()},
            "environment": {**self.environment, OWNER_ENV: str(ident["owner_pid"])},
            "volumes": {str(repository): {"bind": str(repository), "mode": "ro"}},
            "shm_size": self.shm_size, "device_requests": device_requests(self.gpus),
        }
        if self.network == "host":
            spec["network_mode"] = "host"
        else:
            spec["ports"] = {f"{http}/tcp": (HOST, http), f"{grpc}/tcp": (HOST, grpc),
                             f"{metrics}/tcp": (HOST, metrics)}
        return spec

    # -- the contract's hooks ---------------------------------------------------------------
    def _launch(self, repository: Path, explicit: bool) -> Endpoints:
        from docker.errors import APIError, DockerException

        reap_containers(self.docker)
        ports = resolve_ports(*self._ports, host=HOST)
        spec = self.container_spec(repository, explicit, ports)
        self._log = ""
        try:
            self._container = self.docker.containers.run(**spec)
        except APIError as exc:
            text = str(exc.explanation or exc)
            if "already allocated" in text or "address already in use" in text:
                raise ServerStartError(f"a port is taken: {text}") from exc
            raise ServerStartError(f"Docker refused to run {self.image}: {text}") from exc
        except DockerException as exc:
            raise ServerStartError(f"Docker failed to run {self.image}: {exc}") from exc
        return Endpoints(HOST, ports[0], ports[1], ports[2])

    def _exit_reason(self) -> str | None:
        if self._container is None:
            return "never started"
        from docker.errors import NotFound

        try:
            self._container.reload()
        except NotFound:
            return "the container was removed"
        state = self._container.attrs.get("State", {})
        if state.get("Running"):
            return None
        return f"the container exited with status {state.get('ExitCode')}"

    def _terminate(self, timeout_s: float) -> None:
        container, self._container = self._container, None
        if container is None:
            return
        from docker.errors import DockerException

        with contextlib.suppress(DockerException):
            if timeout_s > 0:
                container.stop(timeout=max(1, math.ceil(timeout_s)))
        with contextlib.suppress(DockerException):
            self._log = container.logs().decode(errors="replace")
        try:
            container.remove(force=True)
        except DockerException as exc:
            if "No such container" not in str(exc):
                raise ServerError(f"removing container {container.name} failed: {exc}") from exc
        finally:
            self.close()

    def close(self) -> None:
        """Close the connection to the daemon (reopened when needed)."""
        if self._docker is not None:
            self._docker.close()
            self._docker = None

    def log_text(self) -> str:
        if self._container is not None:
            from docker.errors import DockerException

            with contextlib.suppress(DockerException):
                return str(self._container.logs().decode(errors="replace"))
        return self._log

    def gpu_set(self, nvml: Any = None) -> GpuSet:
        """The GPUs of the container's DeviceRequest (``gpus``)."""
        return docker_gpu_set(device_requests(self.gpus), nvml)

    def pids(self) -> list[int]:
        """The container's processes as this machine numbers them (its init process, as
        the daemon reports it, and that one's descendants), checked through the process's
        cgroup, which names the container; [] when this process does not share the daemon's
        PID namespace (a tracker inside a container of its own) or nothing runs."""
        container = self._container
        if container is None:
            return []
        pid = int(container.attrs.get("State", {}).get("Pid") or 0)
        if pid <= 0:
            return []
        try:
            if container.id not in Path(f"/proc/{pid}/cgroup").read_text():
                return []
            root = psutil.Process(pid)
            return [root.pid, *(c.pid for c in root.children(recursive=True))]
        except (OSError, psutil.Error):
            return []

    def container_name(self) -> str | None:
        return self._container.name if self._container is not None else None

    def wait_removed(self, name: str, timeout_s: float = 10.0) -> bool:
        """True once no container called ``name`` exists (used by tests)."""
        from docker.errors import NotFound

        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                self.docker.containers.get(name)
            except NotFound:
                return True
            time.sleep(0.1)
        return False
