"""One contract, three launchers: local process, Docker container, remote server.

Each test runs against every mode with the quickstart model (projects/quickstart): start,
READY, one inference checked against onnxruntime, another config, a config Triton refuses
(the error carries Triton's own message), stop, nothing left running.
"""

from __future__ import annotations

import shutil
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import psutil
import pytest

from tracker.errors import ModelLoadError, ServerError, ServerStartError
from tracker.spec import ServerSection
from tracker.triton import model_config
from tracker.triton.client import TritonClient
from tracker.triton.repository import TrialRepository, write_repository
from tracker.triton.server.base import TritonServer
from tracker.triton.server.docker import DockerTritonServer
from tracker.triton.server.live import live_servers
from tracker.triton.server.local import LocalTritonServer
from tracker.triton.server.remote import RemoteTritonServer

REPO = Path(__file__).resolve().parents[2]
NAME = "quickstart"

pytestmark = pytest.mark.triton


def trial(info: model_config.ModelInfo, root: Path, values: dict[str, Any]) -> TrialRepository:
    cfg = model_config.apply(info, values, supports_batching=info.supports_batching)
    return write_repository(root, info, cfg, serving="python", ort_threads=(1, 1))


class Mode:
    """Makes the server under test and stops every server it made at teardown (so that a
    failing test leaves nothing running either). ``make(**kw)`` passes launcher arguments
    (``grpc_port``, ``startup_timeout_s``); for the remote mode ``grpc_port`` is the port of
    the URL it attaches to."""

    def __init__(self, name: str, make: Callable[..., TritonServer]) -> None:
        self.name, self._make = name, make
        self.made: list[TritonServer] = []

    def make(self, **kw: Any) -> TritonServer:
        server = self._make(**kw)
        self.made.append(server)
        return server

    def stop_all(self) -> None:
        for server in self.made:
            server.stop(timeout_s=0)


def _procs(pids: list[int]) -> list[psutil.Process]:
    out = []
    for pid in pids:
        try:
            out.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            continue
    return out


def _assert_gone(procs: list[psutil.Process]) -> None:
    alive = []
    for proc in procs:  # is_running() also guards against a reused pid
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(proc.pid)
        except psutil.NoSuchProcess:
            continue
    assert not alive, f"processes left after stop: {alive}"


@pytest.fixture(params=["local", pytest.param("docker", marks=pytest.mark.docker), "remote"])
def mode(request: pytest.FixtureRequest, tmp_path: Path, quickstart_info: model_config.ModelInfo,
         _no_leftover_servers: None) -> Iterator[Mode]:
    # (_no_leftover_servers is requested so that it is torn down after the remote's owner)
    if request.param == "local":
        mode = Mode("local", lambda **kw: LocalTritonServer(ServerSection(**kw)))
        yield mode
        mode.stop_all()
    elif request.param == "docker":
        image = request.getfixturevalue("docker_image")
        mode = Mode("docker", lambda **kw: DockerTritonServer(ServerSection(image=image, **kw)))
        yield mode
        mode.stop_all()
    else:
        # someone else's server: a wheel server in explicit mode over a repository that
        # already holds the model (the shim files); the test only drives it remotely
        base = trial(quickstart_info, tmp_path / "remote-repo", {})
        with LocalTritonServer() as owner:
            owner.start(base.path, explicit=True)
            ep = owner.endpoints

            def remote(grpc_port: int | None = None, **kw: Any) -> TritonServer:
                if grpc_port is not None:  # attach to whatever listens there
                    return RemoteTritonServer(f"127.0.0.1:{grpc_port}", **kw)
                return RemoteTritonServer(ep.grpc, http_url=ep.http, metrics_url=ep.metrics,
                                          **kw)

            mode = Mode("remote", remote)
            yield mode
            mode.stop_all()
            with TritonClient(ep) as client:  # still running, and our models are unloaded
                assert client.is_ready()
                assert not [m for m in client.repository_index() if m.get("state") == "READY"]


def _reference(info: model_config.ModelInfo, x: np.ndarray) -> np.ndarray:
    out: np.ndarray = ort.InferenceSession(str(info.model_file)).run(None, {"INPUT0": x})[0]
    return out


def test_start_ready_infer_new_config_stop(mode: Mode, quickstart_info: model_config.ModelInfo,
                                           tmp_path: Path) -> None:
    server = mode.make()
    strategy_reload = isinstance(server, RemoteTritonServer)
    first = trial(quickstart_info, tmp_path / "t1",
                  {"instance_group.count": 1, "max_batch_size": 4})
    server.apply_trial(first)
    assert server.running and server in live_servers()
    procs = _procs(server.pids())
    if not strategy_reload:  # local and docker: the server's own processes, as seen here
        assert any(p.name() == "tritonserver" for p in procs), procs
    # the GPUs it was given, by identity: none on this machine, and it says where it looked
    gpus = server.gpu_set()
    assert not gpus and gpus.source.startswith(
        {"local": "CUDA_VISIBLE_DEVICES", "docker": "device request",
         "remote": "the gpu_uuid labels"}[mode.name]), gpus.source
    with server.client() as client:
        assert client.is_ready()
        assert client.server_metadata()["version"]
        x = np.random.default_rng(1).random((1, 64)).astype(np.float32)
        got = client.infer_once(NAME, first.served_config, {"INPUT0": x})["OUTPUT0"]
        np.testing.assert_allclose(got, _reference(quickstart_info, x), rtol=1e-5, atol=1e-6)
        assert client.model_config(NAME).max_batch_size == 4

    second = trial(quickstart_info, tmp_path / "t2",
                   {"instance_group.count": 2, "max_batch_size": 8,
                    "dynamic_batching.max_queue_delay_microseconds": 100})
    server.apply_trial(second)
    with server.client() as client:
        loaded = client.model_config(NAME)
        assert (loaded.max_batch_size, loaded.instance_group[0].count) == (8, 2)
        assert loaded.dynamic_batching.max_queue_delay_microseconds == 100
        assert client.infer_once(NAME, second.served_config)["OUTPUT0"].shape == (1, 16)
    if strategy_reload:
        assert server.strategy == "reload"
    procs += _procs(server.pids())
    name = server.container_name() if isinstance(server, DockerTritonServer) else None
    server.stop()
    assert not server.running and server not in live_servers()
    server.stop()  # idempotent
    _assert_gone(procs)
    if isinstance(server, DockerTritonServer) and name:
        assert server.wait_removed(name, timeout_s=5), f"container {name} still exists"


def test_refused_config_carries_tritons_message(mode: Mode, quickstart_info: model_config.ModelInfo,
                                                tmp_path: Path) -> None:
    server = mode.make()
    good = trial(quickstart_info, tmp_path / "good", {})
    bad_cfg = model_config.apply(quickstart_info, {}, supports_batching=True)
    group = bad_cfg.instance_group.add()
    group.kind = group.KIND_GPU
    group.count = 1
    group.gpus.append(99)  # no machine has GPU 99: Triton refuses at load time
    bad = write_repository(tmp_path / "bad", quickstart_info, bad_cfg, serving="python")
    with server:
        if isinstance(server, RemoteTritonServer):
            server.apply_trial(good)
        with pytest.raises(ModelLoadError) as caught:
            server.apply_trial(bad)
        message = str(caught.value)
        assert "instance group" in message and ("GPU" in message or "gpu" in message), message
        assert not server.running or isinstance(server, RemoteTritonServer) or \
            server.strategy == "reload"
        if not isinstance(server, RemoteTritonServer):
            server.apply_trial(good)  # the launcher recovers for the next trial
        with server.client() as client:
            assert client.infer_once(NAME, good.served_config)["OUTPUT0"].shape == (1, 16)
    assert not server.running


@pytest.mark.parametrize("kind", ["local", pytest.param("docker", marks=pytest.mark.docker)])
def test_reload_strategy_keeps_one_server(kind: str, request: pytest.FixtureRequest,
                                          quickstart_info: model_config.ModelInfo,
                                          tmp_path: Path) -> None:
    """Start once in explicit mode, then each trial's config is a load with an override; the
    trial folders may be deleted between trials (the runner does) without harm."""
    if kind == "docker":
        server: TritonServer = DockerTritonServer(ServerSection(
            image=request.getfixturevalue("docker_image"), strategy="reload"))
    else:
        server = LocalTritonServer(ServerSection(strategy="reload"))
    identity = None
    with server:
        for i, count in enumerate([1, 2, 1]):
            repo = trial(quickstart_info, tmp_path / f"trial-{i}",
                         {"instance_group.count": count, "max_batch_size": 2 + i})
            server.apply_trial(repo)
            now = (server.container_name() if isinstance(server, DockerTritonServer)
                   else server.pids()[0])
            identity = identity or now
            assert now == identity, "the same server serves every trial"
            with server.client() as client:
                loaded = client.model_config(NAME)
                assert (loaded.max_batch_size, loaded.instance_group[0].count) == (2 + i, count)
                assert client.infer_once(NAME, repo.served_config)["OUTPUT0"].shape == (1, 16)
            shutil.rmtree(repo.path)
    assert not server.running


# ---- one test per promise of the contract (tracker/triton/server/base.py) ----------------

SLOW_MODEL = """
import time


class TritonPythonModel:
    def initialize(self, args):
        time.sleep(120)  # READY never comes within the test's startup timeout

    def execute(self, requests):
        return []
"""


def _slow_repository(root: Path) -> Path:
    model = root / "slow"
    (model / "1").mkdir(parents=True)
    (model / "1" / "model.py").write_text(SLOW_MODEL)
    (model / "config.pbtxt").write_text(
        'name: "slow"\nbackend: "python"\nmax_batch_size: 0\n'
        'input [{ name: "X" data_type: TYPE_FP32 dims: [1] }]\n'
        'output [{ name: "Y" data_type: TYPE_FP32 dims: [1] }]\n')
    return root


def test_stop_of_a_server_never_started_does_nothing(mode: Mode) -> None:
    server = mode.make()
    server.stop()
    server.stop(timeout_s=0)
    assert not server.running and server not in live_servers()
    assert server.log_text() == ""
    with pytest.raises(ServerError, match="not running"):
        _ = server.endpoints


def test_taken_port_is_named(mode: Mode, tmp_path: Path,
                             quickstart_info: model_config.ModelInfo) -> None:
    """A fixed port that another process holds: ServerStartError naming it (remote: the
    URL answers, but not as Triton: not READY), and nothing is left running."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        port = holder.getsockname()[1]
        server = mode.make(grpc_port=port, startup_timeout_s=3.0)
        repo = trial(quickstart_info, tmp_path / "t", {})
        with pytest.raises(ServerStartError) as caught:
            server.start(repo.path, explicit=isinstance(server, RemoteTritonServer))
    message = str(caught.value)
    if isinstance(server, RemoteTritonServer):
        assert f"127.0.0.1:{port}" in message and "not READY" in message, message
    else:
        assert f"server.grpc_port {port} is taken" in message, message
    assert not server.running and server not in live_servers()


def test_start_timeout_carries_the_log_tail(mode: Mode, tmp_path: Path) -> None:
    """READY does not come within startup_timeout_s: ServerStartError saying so, with the
    tail of the server log (a remote server has no log here), and nothing left running."""
    if mode.name == "remote":
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as silent:
            silent.bind(("127.0.0.1", 0))
            silent.listen(1)
            server = mode.make(grpc_port=silent.getsockname()[1], startup_timeout_s=1.0)
            with pytest.raises(ServerStartError, match=r"not READY after 1 s") as caught:
                server.start(tmp_path)
        assert caught.value.log_tail == ""
    else:
        server = mode.make(startup_timeout_s=4.0)
        with pytest.raises(ServerStartError, match=r"not READY after 4 s") as caught:
            server.start(_slow_repository(tmp_path / "repo"))
        tail = caught.value.log_tail
        assert tail and tail == server.log_tail(), "the error carries the log's tail"
        assert "slow" in server.log_text()  # Triton said it was loading the model
    assert not server.running and server not in live_servers()


def test_log_is_kept_after_stop(mode: Mode, tmp_path: Path,
                                quickstart_info: model_config.ModelInfo) -> None:
    server = mode.make()
    server.apply_trial(trial(quickstart_info, tmp_path / "t", {}))
    during = server.log_text()
    server.stop()
    after = server.log_text()
    if isinstance(server, RemoteTritonServer):
        assert during == after == ""  # the log lives with whoever runs the server
    else:
        assert after.startswith(during) and "Started GRPCInferenceService" in after
        assert server.log_tail(3) == "\n".join(after.splitlines()[-3:])
