"""A study in remote mode whose server wants ``Authorization: Bearer ...``: Triton refuses
every inference request without it (``--http-restricted-api``; the load goes over HTTP) and
every model load without its gRPC form (``--grpc-restricted-protocol``; the study loads each
trial's config over gRPC), so a trial that measures proves the value went over the wire. The
value is then in no MLflow param, tag or artifact of the study, in neither sqlite store and
in none of the command's output."""

from __future__ import annotations

import shutil
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from mlflow import MlflowClient

from tests.support.tune import all_runs
from tracker.cli import cli
from tracker.errors import ServerError
from tracker.triton import model_config
from tracker.triton.client import TritonClient
from tracker.triton.repository import write_repository
from tracker.triton.server.local import LocalTritonServer

QUICKSTART = Path(__file__).resolve().parents[2] / "projects" / "quickstart"
SECRET = "s3cr3t-token"
#: what Triton checks: an HTTP inference request needs ``authorization`` with this exact value,
#: a gRPC model-repository request (the study loads each trial's config through it) the same
#: value in ``triton-grpc-protocol-authorization`` (Triton's prefix for gRPC metadata)
RESTRICTED = (f"--http-restricted-api=inference:authorization=Bearer {SECRET}",
              f"--grpc-restricted-protocol=model-repository:authorization=Bearer {SECRET}")

SPEC = """
model: {{name: quickstart, path: model.onnx, build: make_model.py}}
server:
  mode: remote
  url: {url}
  http_url: {http}
  serving: python
  startup_timeout_s: 100
  headers: {{Authorization: "Bearer {secret}", x-team: tuning,
            triton-grpc-protocol-authorization: "Bearer {secret}"}}
load: {{protocol: http, concurrency: [1], window_ms: 200, max_tries: 3, stability_pct: 80,
        warmup_requests: 5}}
search: {{n_trials: 1, seed: 1, space: {{dynamic_batching.max_queue_delay_microseconds: [0]}}}}
confirm: {{enabled: false}}
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory,
           quickstart_info: model_config.ModelInfo) -> Iterator[LocalTritonServer]:
    """Someone else's server behind a token: HTTP inference and the gRPC model-repository API
    answer only requests that carry ``Bearer <SECRET>`` (RESTRICTED)."""
    cfg = model_config.apply(quickstart_info, {}, supports_batching=True)
    repo = write_repository(tmp_path_factory.mktemp("served"), quickstart_info, cfg,
                            serving="python", ort_threads=(1, 1))
    with LocalTritonServer(extra_args=list(RESTRICTED)) as owner:
        owner.start(repo.path, explicit=True)
        yield owner


def _artifacts(client: MlflowClient, run_id: str, folder: str = "") -> Iterator[str]:
    for item in client.list_artifacts(run_id, folder or None):
        if item.is_dir:
            yield from _artifacts(client, run_id, item.path)
        else:
            yield item.path


def _infer_without_header(server: LocalTritonServer) -> str:
    """Triton's answer to an HTTP inference request that lacks the header."""
    request = urllib.request.Request(f"{server.endpoints.http}/v2/models/quickstart/infer",
                                     data=b"{}", method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return str(answer.read())
    except urllib.error.HTTPError as exc:
        return str(exc.read())


@pytest.mark.triton
def test_the_header_is_sent_and_never_recorded(server: LocalTritonServer, tmp_path: Path,
                                                mlflow_uri: str) -> None:
    assert "restricted" in _infer_without_header(server)  # the server's checks are real
    with TritonClient(server.endpoints) as bare, pytest.raises(ServerError, match="restricted"):
        bare.repository_index()
    for name in ("make_model.py", "model.onnx"):
        if (QUICKSTART / name).exists():
            shutil.copy(QUICKSTART / name, tmp_path / name)
    spec = tmp_path / "study.yaml"
    spec.write_text(SPEC.format(url=server.endpoints.grpc, http=server.endpoints.http,
                                secret=SECRET))

    got = CliRunner().invoke(cli, ["tune", str(spec), "--no-bar"])
    assert got.exit_code == 0, got.output
    assert SECRET not in got.output

    client = MlflowClient(mlflow_uri)
    found = all_runs(mlflow_uri)
    measured = [r for r in found if "perf_throughput" in r.data.metrics]
    assert measured, "no trial measured: the header did not reach the server"
    parent = next(r for r in found if r.data.tags.get("tracker.role") == "study")
    spec_copy = client.download_artifacts(parent.info.run_id, "study.yaml", str(tmp_path))
    logged = Path(spec_copy).read_text()
    assert 'Authorization: "Bearer ***"' in logged or 'Authorization: "***"' in logged, logged
    assert "x-team:" in logged and "mode: remote" in logged  # the rest stays as written
    for run in found:
        assert SECRET not in str(run.data.params) + str(run.data.tags), run.info.run_name
        for path in _artifacts(client, run.info.run_id):
            local = client.download_artifacts(run.info.run_id, path, str(tmp_path / "dl"))
            assert SECRET.encode() not in Path(local).read_bytes(), (run.info.run_name, path)
    stored = [p for p in tmp_path.rglob("*") if p.is_file() and p != spec]
    assert any(p.name == "mlflow.db" for p in stored) and any(p.name == "optuna.db" for p in stored)
    for path in stored:  # the sqlite stores, the artifact folders, the downloaded copies
        assert SECRET.encode() not in path.read_bytes(), path
