"""Promotion and deployment against a real Triton (explicit model control mode, the wheel's
tritonserver) and a real sqlite MLflow registry and Optuna study.

The scenario of docs/deploy.md: promote v1; promote v2 while a client sends requests without
a version -> no failed request, the served config is v2's; promote a broken v3 (a config
Triton refuses) -> v2 still serves, v3 is tagged failed, the command exits 1 with Triton's
message; `mlflow deployments list -t triton` shows what serves.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import mlflow
import numpy as np
import pytest
from click.testing import CliRunner
from mlflow.deployments import get_deploy_client
from mlflow.exceptions import MlflowException

from tests.support import models
from tests.support.deploy import NAME, V1, V2, RequestLoop, Study, knobs, spec_file, trial_model_dir
from tests.support.deploy import serving as serving  # the fixture, re-exported
from tracker.cli import cli
from tracker.deploy import nvidia
from tracker.deploy.publish import META_FILE
from tracker.tracking import flavor, registry
from tracker.triton import model_config
from tracker.triton.server.local import LocalTritonServer

pytestmark = pytest.mark.triton

def _version(result: Any) -> str:
    """The version that answered, once the answer is checked."""
    out = result.as_numpy("OUTPUT0")
    if out is None or out.shape != (1, 4):
        raise ValueError(f"bad output {out!r}")
    return str(result.get_response().model_version)


def client_loop(url: str) -> RequestLoop:
    """Requests without a version, continuously, counted by the version that answered."""
    return RequestLoop(url, NAME, {"INPUT0": np.ones((1, 8), np.float32)}, _version,
                       limit_s=180.0)


def test_promote_switches_without_failed_requests_and_rolls_back_a_refused_config(
        tmp_path: Path, mlflow_uri: str, serving: tuple[LocalTritonServer, Path]) -> None:
    server, repo = serving
    onnx = models.dynamic_batch(tmp_path / "tiny.onnx")
    study = Study(tmp_path, onnx, mlflow_uri)
    spec = spec_file(tmp_path, onnx, study.storage, mlflow_uri)
    runner = CliRunner()
    client = mlflow.MlflowClient(mlflow_uri)

    study.add(V1, 100.0)
    first = runner.invoke(cli, ["promote", str(spec)])
    assert first.exit_code == 0, first.output
    assert "tiny-reg version 1 (trial 0) is in Production" in first.output

    best = study.add(V2, 200.0)
    with client_loop(server.endpoints.grpc) as loop:
        loop.wait_for(20)
        second = runner.invoke(cli, ["promote", str(spec)])
        assert second.exit_code == 0, second.output
        loop.wait_for(20)
        study.add(V2, 300.0, broken=True)
        third = runner.invoke(cli, ["promote", str(spec)])
        loop.wait_for(20)
    assert loop.failures == [], loop.failures[:3]
    assert set(loop.answers) == {"1", "2"} and loop.answers["2"] > 0, loop.answers

    # v2 serves exactly the best trial's config knobs
    served = server.client().model_config(NAME)
    best_cfg = model_config.parse((tmp_path / f"trial{best}" / NAME / "config.pbtxt").read_text())
    assert knobs(served, like=best_cfg) == knobs(best_cfg)
    assert len(served.instance_group) == len(best_cfg.instance_group) == 1
    index = [(m["version"], m.get("state")) for m in server.client().repository_index()
             if m["name"] == NAME and m.get("state") == "READY"]
    assert index == [("2", "READY")]
    assert sorted(p.name for p in (repo / NAME).iterdir()) == sorted(
        ["2", "config.pbtxt", META_FILE, nvidia.META_FILE])

    # the refused v3: exit 1 with Triton's message, tagged failed, registry back on v2
    assert third.exit_code == 1
    assert "version 2 still serves" in third.output
    assert "preferred size must be <= max batch size" in third.output, third.output
    versions = {str(v.version): v for v in registry.all_versions(client, "tiny-reg")}
    assert versions["3"].tags[registry.TAG_DEPLOY_STATUS] == "failed"
    assert "Triton said" in versions["3"].tags[registry.TAG_DEPLOY_MESSAGE]
    assert versions["2"].tags[registry.TAG_DEPLOY_STATUS] == "serving"
    assert versions["1"].tags[registry.TAG_DEPLOY_STATUS] == "replaced"
    assert {k: v.current_stage for k, v in versions.items()} == {
        "1": "Archived", "2": "Production", "3": "None"}  # never entered it
    alias = registry.version_for_alias(client, "tiny-reg", "production")
    assert alias is not None and str(alias.version) == "2"
    # what promote recorded on v2
    tags = versions["2"].tags
    assert (tags[registry.TAG_STUDY], tags[registry.TAG_TRIAL]) == (NAME, "1")
    assert float(tags["perf_throughput"]) == 200.0 and float(tags["perf_latency_p99"]) == 2.5
    assert tags[registry.TAG_CONSTRAINT].startswith("perf_latency_p99 <= 50")
    assert versions["2"].description.startswith("In 6 measurements across 2 configurations, "
                                                "trial-1 gives 200")
    # the registry's production model is the best trial's directory, loadable as is
    got = flavor.load_model("models:/tiny-reg@production", dst_path=tmp_path / "dl").entry
    assert got.config_text == (tmp_path / f"trial{best}" / NAME / "config.pbtxt").read_text()

    # `mlflow deployments list -t triton` shows what serves
    env = {**os.environ, "MLFLOW_TRACKING_URI": mlflow_uri}
    listed = subprocess.run([sys.executable, "-m", "mlflow", "deployments", "list", "-t",
                             "triton"], capture_output=True, text=True, env=env, timeout=120)
    assert listed.returncode == 0, listed.stderr
    assert f"'name': '{NAME}'" in listed.stdout and "'version': 2" in listed.stdout
    assert "'state': 'READY'" in listed.stdout and "'registry_version': '2'" in listed.stdout


def test_target_create_update_get_predict_delete(
        tmp_path: Path, mlflow_uri: str, serving: tuple[LocalTritonServer, Path]) -> None:
    server, repo = serving
    onnx = models.dynamic_batch(tmp_path / "tiny.onnx")
    client = mlflow.MlflowClient(mlflow_uri)
    exp = client.create_experiment("t")
    for i, values in enumerate((V1, V2)):
        run = client.create_run(exp).info.run_id
        logged = flavor.log_triton_model(trial_model_dir(tmp_path / f"m{i}", onnx, values), run)
        registry.register_version(client, NAME, registry.VersionRequest(
            source=logged.model_uri, run_id=run, model_id=logged.model_id))
    target = get_deploy_client("triton")
    made = target.create_deployment(NAME, f"models:/{NAME}/1")
    assert (made["name"], made["flavor"], made["version"], made["state"]) == \
        (NAME, "triton", 1, "READY")
    with pytest.raises(MlflowException, match="already exists"):
        target.create_deployment(NAME, f"models:/{NAME}/2")
    # again the same version: nothing to do, still served
    assert target.update_deployment(NAME, f"models:/{NAME}/1")["version"] == 1
    registry.set_alias(client, NAME, "production", 2)
    assert target.update_deployment(NAME, f"models:/{NAME}@production")["version"] == 2
    assert target.get_deployment(NAME)["registry_version"] == "2"
    assert [d["name"] for d in target.list_deployments()] == [NAME]

    x = np.arange(16, dtype=np.float32).reshape(2, 8)
    from_dict = target.predict(NAME, {"INPUT0": x})["predictions"]["OUTPUT0"]
    import onnxruntime

    expected = onnxruntime.InferenceSession(str(onnx)).run(None, {"INPUT0": x})[0]
    np.testing.assert_allclose(np.array(from_dict), expected, rtol=1e-5)
    import pandas as pd

    from_df = target.predict(NAME, pd.DataFrame(x))["predictions"]["OUTPUT0"]
    np.testing.assert_allclose(np.array(from_df), expected, rtol=1e-5)
    with pytest.raises(MlflowException, match=r"needs shape \[-1, 8\]"):
        target.predict(NAME, {"INPUT0": np.ones((2, 3), np.float32)})

    # the CLI's predict reads JSON into a DataFrame
    (tmp_path / "in.json").write_text(json.dumps(x.tolist()))
    env = {**os.environ, "MLFLOW_TRACKING_URI": mlflow_uri}
    out = subprocess.run([sys.executable, "-m", "mlflow", "deployments", "predict", "-t",
                          "triton", "--name", NAME, "--input-path", str(tmp_path / "in.json")],
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    np.testing.assert_allclose(np.array(json.loads(out.stdout)["outputs"]["OUTPUT0"]),
                               expected, rtol=1e-5)

    target.delete_deployment(NAME)
    assert not (repo / NAME).exists()
    assert not server.client().model_ready(NAME)
    target.delete_deployment(NAME)  # idempotent
    assert registry.get_version(client, NAME, 2).tags[registry.TAG_DEPLOY_STATUS] == "removed"
    with pytest.raises(MlflowException, match="no deployment named"):
        target.get_deployment(NAME)
    with pytest.raises(MlflowException, match="one path component"):
        target.create_deployment("../escape", f"models:/{NAME}/1")
    assert not (tmp_path / "escape").exists()


def test_tracker_serve_runs_an_explicit_mode_triton_until_sigterm(tmp_path: Path) -> None:
    import signal

    from tracker.triton.client import TritonClient
    from tracker.triton.endpoints import Endpoints
    from tracker.triton.server.ports import free_ports

    http, grpc, metrics = free_ports(3)
    repo = tmp_path / "serving"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tracker.cli", "serve", str(repo), "--grpc-port", str(grpc),
         "--http-port", str(http), "--metrics-port", str(metrics), "--log-dir",
         str(tmp_path / "logs")], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert f"grpc 127.0.0.1:{grpc}" in first and "explicit model control" in first, first
        assert f"TRACKER_TRITON_LOG={tmp_path / 'logs'}" in proc.stdout.readline()
        with TritonClient(Endpoints.from_urls(f"127.0.0.1:{grpc}")) as client:
            assert client.is_ready() and client.repository_index() == []
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
        if proc.stdout is not None:
            proc.stdout.close()
    assert code == 0
