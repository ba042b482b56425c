"""DockerTritonServer beyond the shared contract: what the container spec asks the daemon for
(GPUs, shm, network, mount, labels), clear errors, and leftovers of a crashed tuner."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tracker.errors import ServerError, ServerStartError
from tracker.spec import ServerSection
from tracker.triton.server.docker import (
    DockerTritonServer,
    device_requests,
    docker_client,
)

PORTS = (18000, 18001, 18002)


def test_every_docker_test_is_in_the_one_docker_unit() -> None:
    """scripts/test.sh's two workers give the files in tests/conftest.py's DOCKER_FILES to one
    worker; a Docker test (``pytest.mark.docker``) in any other file would start or stop the
    daemon under the other worker's feet."""
    from tests.conftest import DOCKER_FILES

    root = Path(__file__).resolve().parents[2]
    marked = {str(path.relative_to(root)) for path in (root / "tests").rglob("test_*.py")
              if "mark.docker" in path.read_text(encoding="utf-8")}
    assert "tests/triton/test_server_docker.py" in marked  # this file's own are seen
    assert marked == DOCKER_FILES, marked ^ DOCKER_FILES


def test_gpu_requests_in_the_spec() -> None:
    assert device_requests(None) == []
    (every,) = device_requests("all")
    assert (every["Count"], every["Capabilities"]) == (-1, [["gpu"]])
    (some,) = device_requests([0, 2])
    assert (some["DeviceIDs"], some["Capabilities"]) == (["0", "2"], [["gpu"]])
    with pytest.raises(ServerError, match=r"server\.gpus must be 'all' or a list"):
        DockerTritonServer(ServerSection.model_construct(gpus="two"))  # past the spec's check


def test_default_image_is_the_official_one() -> None:
    image = DockerTritonServer().image
    assert image.startswith("nvcr.io/nvidia/tritonserver:") and image.endswith("-py3")


def test_unreachable_daemon_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    with pytest.raises(ServerStartError, match="Docker daemon at unix:///nonexistent"):
        docker_client()


@pytest.mark.docker
def test_the_daemon_receives_the_gpu_request_and_the_rest(docker_image: str,
                                                          tmp_path: Path) -> None:
    """The spec is sent for real (create, not start: there is no GPU here) and read back."""
    server = DockerTritonServer(ServerSection(image=docker_image, gpus=[0, 1], shm_size="256m"))
    spec = server.container_spec(tmp_path, explicit=True, ports=PORTS)
    spec.pop("detach")
    container = server.docker.containers.create(**spec)
    try:
        host = container.attrs["HostConfig"]
        (req,) = host["DeviceRequests"]
        assert req["DeviceIDs"] == ["0", "1"] and req["Capabilities"] == [["gpu"]]
        assert host["ShmSize"] == 256 * 1024 * 1024
        assert host["NetworkMode"] == "host"
        assert host["Binds"] == [f"{tmp_path}:{tmp_path}:ro"]
        cmd = container.attrs["Config"]["Cmd"]
        assert cmd[0] == "tritonserver" and "--model-control-mode=explicit" in cmd
        assert "--http-address=127.0.0.1" in cmd and "--grpc-port=18001" in cmd
        labels = container.labels
        assert labels["tracker.managed"] == "1"
        assert labels["tracker.owner_pid"] == str(os.getpid())
        assert server.has_backend("python") and not server.has_backend("onnxruntime")
    finally:
        container.remove(force=True)

    bridge = DockerTritonServer(ServerSection(image=docker_image, gpus="all", network="bridge"))
    spec = bridge.container_spec(tmp_path, explicit=False, ports=PORTS)
    assert spec["ports"]["18001/tcp"] == ("127.0.0.1", 18001)
    assert "--grpc-address=0.0.0.0" in spec["command"]
    assert spec["device_requests"][0]["Count"] == -1


@pytest.mark.docker
def test_missing_image_says_how_to_pull_it(docker_image: str, tmp_path: Path) -> None:
    server = DockerTritonServer(ServerSection(image="tracker-no-such-image:1.0"))
    with pytest.raises(ServerStartError, match=r"docker pull tracker-no-such-image:1\.0"):
        server.start(tmp_path)
    assert not server.running


@pytest.mark.docker
def test_taken_port_is_a_clear_error(docker_image: str, tmp_path: Path) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        server = DockerTritonServer(ServerSection(image=docker_image, http_port=port))
        with pytest.raises(ServerStartError, match=f"server.http_port {port} is taken"):
            server.start(tmp_path)


@pytest.mark.docker
@pytest.mark.triton
def test_containers_of_a_dead_tuner_are_removed_at_the_next_start(docker_image: str,
                                                                   tmp_path: Path) -> None:
    """A tuner killed with SIGKILL leaves its container running; the next start removes it."""
    code = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from tracker.spec import ServerSection\n"
        "from tracker.triton.server.docker import DockerTritonServer\n"
        "s = DockerTritonServer(ServerSection(image=sys.argv[1]))\n"
        "s.start(Path(sys.argv[2]))\n"
        "print(s.container_name(), flush=True)\n"
        "time.sleep(600)\n"
    )
    (tmp_path / "empty").mkdir()
    proc = subprocess.Popen([sys.executable, "-c", code, docker_image, str(tmp_path / "empty")],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    name = proc.stdout.readline().strip()
    proc.kill()
    proc.wait()
    proc.stdout.close()
    assert name, "the tuner process did not start its container"
    server = DockerTritonServer(ServerSection(image=docker_image))
    assert server.docker.containers.get(name).status == "running"  # the leftover
    with server:
        server.start(tmp_path / "empty")
        assert server.wait_removed(name, timeout_s=1), f"leftover {name} was not removed"


def test_the_container_command_carries_the_server_options(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """server.options reach the container's tritonserver command (what the daemon gets)."""
    server = DockerTritonServer(ServerSection(image="some/image:tag"))
    monkeypatch.setattr(server, "_image_labels", dict)  # no daemon needed to build the spec
    server.option_args = ("--rate-limit=execution_count", "--rate-limit-resource=R1:4")
    spec = server.container_spec(tmp_path, explicit=False, ports=PORTS)
    assert spec["command"][-2:] == ["--rate-limit=execution_count",
                                    "--rate-limit-resource=R1:4"]


@pytest.mark.docker
@pytest.mark.triton
def test_a_container_runs_with_the_server_options(docker_image: str, tmp_path: Path) -> None:
    """The rate limiter and two resources, for real: Triton's start-up table says so."""
    (tmp_path / "empty").mkdir()
    server = DockerTritonServer(ServerSection(image=docker_image))
    server.option_args = ("--rate-limit=execution_count", "--rate-limit-resource=R1:4",
                          "--rate-limit-resource=R2:2")
    with server:
        server.start(tmp_path / "empty")
        log = server.log_text()
    assert "EXEC_COUNT" in log
    assert '"name":"R1", "count":4' in log and '"name":"R2", "count":2' in log
