"""The load over TLS: Triton started with TLS on gRPC from certificates the test makes, one-way
and mutual; HTTP through a TLS proxy (Triton's HTTP endpoint has no TLS); headers sent; a wrong
certificate or a port that does not answer is an error naming the URL, at once."""

from __future__ import annotations

import dataclasses
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.tls import Certs, TlsProxy, make_certs, triton_tls_args
from tracker.errors import DeployError, ServerError
from tracker.measure.entry import EntryLoad
from tracker.measure.sweep import sweep
from tracker.spec import LoadSection
from tracker.triton import model_config
from tracker.triton.client import TritonClient
from tracker.triton.endpoints import Endpoints
from tracker.triton.repository import TrialRepository, write_repository
from tracker.triton.server.local import LocalTritonServer
from tracker.triton.tls import Security, probe

pytestmark = pytest.mark.triton

LOAD = {"concurrency": [2], "window_ms": 200, "max_tries": 3, "stability_pct": 80,
        "warmup_requests": 5}


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory,
         quickstart_info: model_config.ModelInfo) -> TrialRepository:
    cfg = model_config.apply(quickstart_info, {}, supports_batching=True)
    return write_repository(tmp_path_factory.mktemp("repo"), quickstart_info, cfg,
                            serving="python", ort_threads=(1, 1))


def _server(repo: TrialRepository, certs: Certs, mutual: bool) -> Iterator[LocalTritonServer]:
    with LocalTritonServer(extra_args=triton_tls_args(certs, mutual)) as server:
        server.start(repo.path)
        yield server


@pytest.fixture(scope="module")
def mutual(repo: TrialRepository, certs: Certs) -> Iterator[LocalTritonServer]:
    yield from _server(repo, certs, mutual=True)


@pytest.fixture(scope="module")
def oneway(repo: TrialRepository, certs: Certs) -> Iterator[LocalTritonServer]:
    yield from _server(repo, certs, mutual=False)


def _with(server: LocalTritonServer, security: Security, http: str | None = None) -> Endpoints:
    ep = server.endpoints
    return dataclasses.replace(ep, security=security) if http is None else \
        Endpoints.from_urls(ep.grpc, http, ep.metrics, security)


def _measure(endpoints: Endpoints, repo: TrialRepository, **load: Any) -> float:
    result = sweep(endpoints, {repo.model_name: EntryLoad(
        repo.served_config, LoadSection(**{**LOAD, **load}))})
    m = result.measurements[0]
    assert m.valid, m.invalid_reason
    return m.throughput


def test_grpc_one_way_tls(oneway: LocalTritonServer, repo: TrialRepository,
                          certs: Certs) -> None:
    ep = _with(oneway, Security(tls=True, root_cert=certs.ca))
    assert _measure(ep, repo) > 0
    with TritonClient(ep) as client:  # the control client goes over TLS too
        assert client.model_ready(repo.model_name)


def test_grpc_mutual_tls_with_headers(mutual: LocalTritonServer, repo: TrialRepository,
                                      certs: Certs) -> None:
    sec = Security(tls=True, root_cert=certs.ca, client_cert=certs.client.cert,
                   client_key=certs.client.key, server_name="localhost",
                   headers=(("x-team", "tuning"),))
    assert _measure(_with(mutual, sec), repo) > 0
    probe("127.0.0.1", mutual.endpoints.grpc_port, sec)  # no error: the pair is accepted


@pytest.mark.parametrize("case", ["wrong root", "no client cert", "stranger's cert"])
def test_a_wrong_certificate_is_an_error_naming_the_url(
        mutual: LocalTritonServer, certs: Certs, case: str) -> None:
    sec = {"wrong root": Security(tls=True, root_cert=certs.other_ca,
                                  client_cert=certs.client.cert, client_key=certs.client.key),
           "no client cert": Security(tls=True, root_cert=certs.ca),
           "stranger's cert": Security(tls=True, root_cert=certs.ca,
                                       client_cert=certs.stranger.cert,
                                       client_key=certs.stranger.key)}[case]
    port = mutual.endpoints.grpc_port
    start = time.monotonic()
    with pytest.raises(ServerError, match=f"TLS to grpcs://127.0.0.1:{port} failed"):
        probe("127.0.0.1", port, sec)
    assert time.monotonic() - start < 30  # never the gRPC channel's endless retry


def test_a_port_that_does_not_answer_is_an_error_naming_it(certs: Certs) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ServerError, match=f"cannot reach grpcs://127.0.0.1:{port}"):
        probe("127.0.0.1", port, Security(tls=True, root_cert=certs.ca))


def test_http_over_a_tls_proxy_sends_the_headers(oneway: LocalTritonServer,
                                                 repo: TrialRepository, certs: Certs) -> None:
    http_port = oneway.endpoints.http_port
    assert http_port is not None
    sec = Security(tls=True, root_cert=certs.ca, headers=(("authorization", "Bearer t0k"),))
    with TlsProxy(http_port, certs) as proxy:
        ep = _with(oneway, sec, http=f"https://127.0.0.1:{proxy.port}")
        assert _measure(ep, repo, protocol="http") > 0
        with TritonClient(ep) as client:  # readiness over https with the headers
            assert client.is_ready()
        with pytest.raises(ServerError, match=f"TLS to https://127.0.0.1:{proxy.port} failed"):
            probe("127.0.0.1", proxy.port, Security(tls=True, root_cert=certs.other_ca),
                  protocol="http")
    sent = b"".join(proxy.seen).lower()
    assert b"authorization: bearer t0k" in sent and b"/v2/models/quickstart/infer" in sent


def test_missing_files_and_empty_headers_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ServerError, match="does not exist"):
        Security(tls=True, root_cert=tmp_path / "nope.pem")
    with pytest.raises(ServerError, match="needs a name and a value"):
        Security(headers=(("authorization", ""),))


def test_the_deploy_target_reaches_a_tls_server(
        mutual: LocalTritonServer, oneway: LocalTritonServer, certs: Certs,
        tmp_path: Path) -> None:
    """The `triton` deployment target's client: grpcs:// with the client pair, https://
    through the proxy, headers sent; bad settings are DeployErrors."""
    from tracker.deploy.settings import resolve_settings
    from tracker.deploy.transport import make_client

    pair = {"repository": str(tmp_path), "root_cert": str(certs.ca),
            "client_cert": str(certs.client.cert), "client_key": str(certs.client.key),
            "headers": "x-team: tuning"}
    settings = resolve_settings(f"triton:/grpcs://{mutual.endpoints.grpc}", pair)
    assert settings.endpoint == f"grpcs://{mutual.endpoints.grpc}"
    with make_client(settings) as client:
        assert "quickstart" in {m["name"] for m in client.repository_index()}
    http_port = oneway.endpoints.http_port
    assert http_port is not None
    with TlsProxy(http_port, certs) as proxy:
        settings = resolve_settings(f"triton:/https://127.0.0.1:{proxy.port}", pair)
        with make_client(settings) as client:
            assert client.model_ready("quickstart")
    assert any(b"x-team: tuning" in seen.lower() for seen in proxy.seen)
    with pytest.raises(DeployError, match="a value"):
        resolve_settings("triton", {**pair, "headers": "authorization:"})
    with pytest.raises(DeployError, match="does not exist"):
        resolve_settings("triton", {**pair, "root_cert": str(tmp_path / "none.pem")})


def test_a_local_server_with_tls_settings_gives_them_to_its_clients(certs: Certs) -> None:
    """server.tls in local (or docker) mode: the Triton started with TLS options (e.g. in its
    extra arguments) is reached with the spec's certificates."""
    from tracker.spec.sections import ServerSection
    from tracker.triton.server.modes import make_server

    made = make_server(ServerSection.model_validate(
        {"mode": "local", "tls": {"root_cert": str(certs.ca)}, "headers": {"x-a": "b"}}))
    assert isinstance(made, LocalTritonServer) and made.security is not None
    assert made.security.tls and made.security.root_cert == certs.ca
    assert made.security.headers == (("x-a", "b"),)
