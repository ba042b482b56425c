"""A Triton started with TLS (mutual, on gRPC) profiled and tuned in remote mode with the
certificates; with a wrong certificate the command exits 1 at once, naming the URL; bad TLS,
header and shared-memory settings are refused by `tracker check`."""

from __future__ import annotations

import dataclasses
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.support.tls import Certs, make_certs, triton_tls_args
from tracker.cli import cli
from tracker.triton import model_config
from tracker.triton.client import TritonClient
from tracker.triton.repository import write_repository
from tracker.triton.server.local import LocalTritonServer
from tracker.triton.tls import Security

QUICKSTART = Path(__file__).resolve().parents[2] / "projects" / "quickstart"

SPEC = """
model: {{name: quickstart, path: model.onnx, build: make_model.py}}
server:
  mode: remote
  url: {url}
  serving: python
  startup_timeout_s: 100
  tls: {{root_cert: {root}, client_cert: {cert}, client_key: {key}}}
  headers: {{x-team: tuning}}
load: {{concurrency: [1, 4], window_ms: 200, max_tries: 3, stability_pct: 80,
        warmup_requests: 5}}
search: {{n_trials: 2, seed: 1, space: {{dynamic_batching.max_queue_delay_microseconds: [0, 100]}}}}
confirm: {{enabled: false}}
"""


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, certs: Certs,
           quickstart_info: model_config.ModelInfo) -> Iterator[LocalTritonServer]:
    """Someone else's server: TLS on gRPC, explicit model control, the model's files in its
    repository (the onnxruntime shim)."""
    cfg = model_config.apply(quickstart_info, {}, supports_batching=True)
    repo = write_repository(tmp_path_factory.mktemp("served"), quickstart_info, cfg,
                            serving="python", ort_threads=(1, 1))
    with LocalTritonServer(extra_args=triton_tls_args(certs, mutual=True)) as owner:
        owner.start(repo.path, explicit=True)
        yield owner


def _spec(folder: Path, server: LocalTritonServer, certs: Certs, **change: str) -> Path:
    for name in ("make_model.py", "model.onnx"):
        if (QUICKSTART / name).exists():
            shutil.copy(QUICKSTART / name, folder / name)
    values = {"url": server.endpoints.grpc, "root": str(certs.ca),
              "cert": str(certs.client.cert), "key": str(certs.client.key), **change}
    path = folder / "study.yaml"
    path.write_text(SPEC.format(**values))
    return path


@pytest.mark.triton
def test_profile_and_tune_a_tls_server_in_remote_mode(
        server: LocalTritonServer, certs: Certs, tmp_path: Path, mlflow_uri: str) -> None:
    spec = _spec(tmp_path, server, certs)
    got = CliRunner().invoke(cli, ["profile", str(spec), "--csv", str(tmp_path / "p.csv")])
    assert got.exit_code == 0, got.output
    assert "best level: concurrency" in got.output
    got = CliRunner().invoke(cli, ["tune", str(spec), "--no-bar"])
    assert got.exit_code == 0, got.output
    assert "trial   1" in got.output
    sec = Security(tls=True, root_cert=certs.ca, client_cert=certs.client.cert,
                   client_key=certs.client.key)
    # the owner's server: still there, and our models unloaded
    with TritonClient(dataclasses.replace(server.endpoints, security=sec)) as client:
        assert client.is_ready()
        assert not [m for m in client.repository_index() if m.get("state") == "READY"]


@pytest.mark.triton
def test_a_wrong_certificate_exits_1_naming_the_url(
        server: LocalTritonServer, certs: Certs, tmp_path: Path, mlflow_uri: str) -> None:
    spec = _spec(tmp_path, server, certs, root=str(certs.other_ca))
    start = time.monotonic()
    got = CliRunner().invoke(cli, ["profile", str(spec), "--csv", str(tmp_path / "p.csv")])
    assert got.exit_code == 1, got.output
    assert f"grpcs://{server.endpoints.grpc}" in got.output
    assert "CERTIFICATE_VERIFY_FAILED" in got.output
    assert "Traceback" not in got.output
    assert time.monotonic() - start < 60  # not the 100 s readiness wait


@pytest.mark.parametrize(("change", "expected"), [
    ("server:\n  mode: local\n  tls: {root_cert: missing.pem}\n",
     "server.tls.root_cert: must be an existing PEM file, but"),
    ("server:\n  mode: local\n  headers: {authorization: }\n",
     "server.headers: header 'authorization' needs a value"),
    ("server:\n  mode: remote\n  url: 127.0.0.1:1\nload: {shared_memory: system}\n",
     "load.shared_memory: 'system' needs a server on this machine"),
])
def test_check_refuses_bad_connection_settings(tmp_path: Path, change: str,
                                               expected: str) -> None:
    for name in ("make_model.py", "model.onnx"):
        if (QUICKSTART / name).exists():
            shutil.copy(QUICKSTART / name, tmp_path / name)
    spec = tmp_path / "study.yaml"
    spec.write_text("model: {name: quickstart, path: model.onnx, build: make_model.py}\n"
                    + change)
    got = CliRunner().invoke(cli, ["check", str(spec)])
    assert got.exit_code == 1, got.output
    assert expected in got.output, got.output
    assert "Traceback" not in got.output
