"""Shared fixtures: a fresh MLflow sqlite store per test, and a guard that no test leaves a
tritonserver process behind (checked after every test, cleaned up and reported)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

REPO = Path(__file__).resolve().parent.parent


def _tritonservers() -> list[psutil.Process]:
    """tritonserver processes of THIS test session: descendants of this process, or marked
    with our pid in TRACKER_OWNER_PID (servers in containers). Other people's servers on a
    shared machine are none of our business (killing them broke their runs)."""
    me = os.getpid()
    mine = {p.pid for p in psutil.Process(me).children(recursive=True)}
    found = []
    for proc in psutil.process_iter(["name", "cmdline"]):
        try:
            cmd = proc.info["cmdline"] or []
            if not (proc.info["name"] == "tritonserver"
                    or (cmd and cmd[0].endswith("tritonserver"))):
                continue
            if proc.pid in mine or proc.environ().get("TRACKER_OWNER_PID") == str(me):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


#: the files with Docker tests, one unit of work for pytest-xdist: the session's
#: ``docker_image`` fixture starts, cleans and stops the machine's one Docker daemon, so one
#: worker runs them all (tests/triton/test_server_docker.py checks the list)
DOCKER_FILES = frozenset({"tests/triton/test_server_contract.py",
                          "tests/triton/test_server_docker.py"})


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook; without xdist it is never called
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under pytest-xdist (scripts/test.sh, ``-n 2``): a test file is one unit of work, so a
    module's shared server serves all of its tests in one worker; the Docker files are one
    unit together."""
    from xdist.scheduler import LoadScopeScheduling

    class ByFile(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return "docker" if path in DOCKER_FILES else path

    return ByFile(config, log)


@pytest.fixture(autouse=True)
def _no_leftover_servers(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail a test that leaves a tritonserver running; kill it so the next test starts clean."""
    before = {p.pid for p in _tritonservers()}
    yield
    left = [p for p in _tritonservers() if p.pid not in before]
    for proc in left:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
    if left:
        pytest.fail(f"test left {len(left)} tritonserver process(es) running: "
                    f"{[p.pid for p in left]}", pytrace=False)


@pytest.fixture()
def mlflow_uri(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh sqlite tracking store for this test (MLflow's own test habit)."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_REGISTRY_URI", uri)
    artifacts = tmp_path / "artifacts"
    artifacts.mkdir()
    monkeypatch.chdir(tmp_path)
    return uri


@pytest.fixture(scope="session")
def cpu_count() -> int:
    return os.cpu_count() or 1


# ---- scale-out: a private PostgreSQL and a real `mlflow server` (tests/support/postgres.py) ----

@pytest.fixture(scope="session")
def postgres() -> Iterator[Any]:
    """A private PostgreSQL (initdb in a temp dir, 127.0.0.1, free port) for the whole session;
    stopped (`pg_ctl stop -m immediate`) and removed at the end, also when tests fail."""
    from tests.support import postgres

    try:
        inst = postgres.start_postgres()
    except postgres.ServiceUnavailable as exc:
        pytest.skip(f"PostgreSQL unavailable: {exc}")
    pids = inst.backend_pids()
    yield inst
    inst.stop()
    left = postgres.still_running(pids)
    if left:
        pytest.fail(f"PostgreSQL processes survived pg_ctl stop: {left}", pytrace=False)


@pytest.fixture()
def pg_url(postgres: Any) -> str:
    """A fresh database in the session's PostgreSQL; URL with the test user's real password."""
    return str(postgres.url(postgres.create_database()))


@pytest.fixture(scope="session")
def mlflow_server() -> Iterator[Any]:
    """A real `mlflow server` process (sqlite backend, --serve-artifacts) on 127.0.0.1; its
    process group is stopped at the end of the session."""
    from tests.support import postgres

    try:
        server = postgres.start_mlflow_server()
    except postgres.ServiceUnavailable as exc:
        pytest.skip(f"mlflow server unavailable: {exc}")
    yield server
    pids = postgres.group_pids(server.proc.pid)
    server.stop()
    left = postgres.still_running(pids)
    if left:
        pytest.fail(f"mlflow server processes survived stop: {left}", pytrace=False)


# ---- Triton servers: the quickstart model; the Docker daemon and a local test image ----

@pytest.fixture(scope="session")
def quickstart_info() -> Any:
    """The quickstart model (projects/quickstart) as a ModelInfo named "quickstart", built the
    way a study builds it (its spec's model.build, on first use)."""
    from tracker.spec import ensure_model, load_spec
    from tracker.triton import formats

    spec = load_spec(REPO / "projects" / "quickstart" / "study.yaml")
    ensure_model(spec)
    return formats.model_info(spec.model)


@pytest.fixture(scope="session")
def docker_image() -> Iterator[str]:
    """The tag of a local Triton image built from the wheel's server (cached by content hash).
    Starts dockerd when none runs (and stops it at the end); skips, saying why, where the
    daemon cannot start. Removes every container the tests left (and fails if there were)."""
    from tests.support import docker_host

    try:
        daemon = docker_host.start_daemon()
    except docker_host.DockerUnavailable as exc:
        pytest.skip(f"Docker daemon unavailable: {exc}")
    try:
        import docker

        client = docker.from_env(timeout=120)
        tag = docker_host.ensure_image(client)
        docker_host.remove_old_images(client, tag)
        yield tag
        left = docker_host.managed_containers(client)
        for container in left:
            container.remove(force=True)
        client.close()
    finally:
        daemon.stop()
    if left:
        pytest.fail(f"tests left containers: {[c.name for c in left]}", pytrace=False)

