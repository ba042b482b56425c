"""A local server whose picked ports another server took before it bound them: the start
never reports the other server as its own. One real Triton holds the ports (shared by the
module); the second launcher is made to pick them through its port seam
(``local.resolve_ports``), as a port race between two workers of one machine would."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.triton.test_server_local import add_repo
from tracker.errors import ServerStartError
from tracker.spec import ServerSection
from tracker.triton.server import local
from tracker.triton.server.live import live_servers
from tracker.triton.server.local import LocalTritonServer
from tracker.triton.server.ports import listening_sockets, sockets_of

pytestmark = pytest.mark.triton
REAL_RESOLVE = local.resolve_ports


@pytest.fixture(scope="module")
def first(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalTritonServer]:
    server = LocalTritonServer()
    with server:
        server.start(add_repo(tmp_path_factory.mktemp("first")))
        yield server


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    return add_repo(tmp_path / "second")


def _first_ports(first: LocalTritonServer) -> tuple[int, int, int]:
    ep = first.endpoints
    assert ep.http_port is not None and ep.metrics_port is not None
    return ep.http_port, ep.grpc_port, ep.metrics_port


Resolve = Callable[..., tuple[int, int, int]]


def _raced(first: LocalTritonServer, times: int) -> tuple[list[int], Resolve]:
    """A ``resolve_ports`` that hands out the first server's ports ``times`` times, then
    free ones, and the list it counts its calls in."""
    calls: list[int] = []

    def resolve(*args: int | None, host: str = "127.0.0.1") -> tuple[int, int, int]:
        calls.append(1)
        return _first_ports(first) if len(calls) <= times else REAL_RESOLVE(*args, host=host)

    return calls, resolve


def _first_unharmed(first: LocalTritonServer) -> None:
    with first.client() as client:
        assert client.is_ready()
        assert client.server_metadata()["name"] == first._server_id


def test_a_raced_port_is_retried_on_others(first: LocalTritonServer, repo: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    calls, resolve = _raced(first, times=1)
    monkeypatch.setattr(local, "resolve_ports", resolve)
    second = LocalTritonServer()
    with second:
        second.start(repo)
        assert len(calls) == 2, "the start did not notice the other server on its ports"
        ep = second.endpoints
        assert not {ep.http_port, ep.grpc_port, ep.metrics_port} & set(_first_ports(first))
        with second.client() as client:
            assert client.server_metadata()["name"] == second._server_id != first._server_id
        grpc = listening_sockets(ep.grpc_port)
        assert grpc and grpc <= sockets_of(second.pids())
        assert not set(second.pids()) & set(first.pids())
    _first_unharmed(first)


def test_ports_taken_in_every_try_fail_clearly(first: LocalTritonServer, repo: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    calls, resolve = _raced(first, times=99)
    monkeypatch.setattr(local, "resolve_ports", resolve)
    second = LocalTritonServer()
    with pytest.raises(ServerStartError, match="did not start in 3 tries") as caught:
        second.start(repo)
    assert len(calls) == 3
    assert "another process took a port" in str(caught.value)
    assert not second.running and second not in live_servers() and not second.pids()
    _first_unharmed(first)


def test_fixed_ports_answered_by_another_server_are_an_error(
        first: LocalTritonServer, repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ports given in the spec, free when checked, then taken before the server bound them:
    no retry (they are the user's), an error naming the port and the fix."""
    http, grpc, metrics = _first_ports(first)
    calls, resolve = _raced(first, times=99)
    monkeypatch.setattr(local, "resolve_ports", resolve)
    second = LocalTritonServer(ServerSection(http_port=http, grpc_port=grpc, metrics_port=metrics))
    with pytest.raises(ServerStartError) as caught:
        second.start(repo)
    message = str(caught.value)
    assert len(calls) == 1
    assert (f"server.http_port {http} on 127.0.0.1 is held by another process, not by the "
            "tritonserver started here: stop that process or choose another port" in message
            ) or "already in use" in message, message
    assert not second.running and not second.pids()
    _first_unharmed(first)
