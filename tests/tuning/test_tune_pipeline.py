"""An ensemble repository from outside the project (Python -> ONNX -> Python steps, a BYTES
output), checked and tuned end to end on the embedded Triton as a user would: every trial run
has per-model params and each model's config.pbtxt, the per-step split is logged, and the
parent run shows each step's share of the latency for the default and the best."""

from __future__ import annotations

import json
from pathlib import Path

import mlflow
import numpy as np
import pytest
from click.testing import CliRunner

from tests.support.deploy import serving as serving  # the fixture, re-exported
from tests.support.pipeline import ensemble_repository
from tracker import tags
from tracker.cli import cli
from tracker.triton import model_config
from tracker.triton.client import TritonClient
from tracker.triton.endpoints import Endpoints
from tracker.triton.infer import Request
from tracker.triton.server.local import LocalTritonServer

pytestmark = pytest.mark.triton

MODELS = ["prep", "net", "post", "pipe"]


def _spec(tmp: Path, repo: Path, uri: str, extra: str = "") -> Path:
    path = tmp / "study.yaml"
    path.write_text(f"""
model: {{name: pipe, path: {repo}}}
load: {{concurrency: [4], window_ms: 300, max_tries: 4, warmup_requests: 10,
        stability_pct: 50}}
constraints: {{model/prep/queue_ms: {{max: 10000}}}}
search:
  sampler: tpe
  seed: 3
  n_trials: 3
  storage: sqlite:///{tmp / 'optuna.db'}
mlflow: {{tracking_uri: "{uri}", experiment: pipeline}}
{extra}""")
    return path


def test_check_names_the_pipeline_and_refuses_bad_knobs(tmp_path: Path, mlflow_uri: str) -> None:
    repo = ensemble_repository(tmp_path / "user-repo")
    runner = CliRunner()
    checked = runner.invoke(cli, ["check", str(_spec(tmp_path, repo, mlflow_uri))])
    assert checked.exit_code == 0, checked.output
    out = checked.output
    assert "ensemble pipe steps: prep -> net -> post" in out
    assert "model net: onnx format, backend onnxruntime" in out
    assert "model pipe: ensemble format" in out
    assert "prep/instance_group.count" in out and "post/max_batch_size" in out
    assert "pipe/instance_group.count" not in out.split("knobs:")[0]  # not searched
    assert "110592 configurations" in out  # 3 steps x (4 batch sizes x 4 delays x 3 counts)
    spec = _spec(tmp_path, repo, mlflow_uri).read_text().replace(
        "  storage:", "  space:\n    prepp/instance_group.count: [1, 2]\n"
        "    pipe/instance_group.count: [1, 2]\n    max_batch_size: [8]\n  storage:")
    (tmp_path / "bad.yaml").write_text(spec)
    bad = runner.invoke(cli, ["check", str(tmp_path / "bad.yaml")])
    assert bad.exit_code == 1, bad.output
    assert "no model 'prepp' in the configuration (its models: prep, net, post, pipe)" \
        in bad.output
    assert "'pipe' is an ensemble" in bad.output
    assert "name the model as '<model>/max_batch_size'" in bad.output


def test_ensemble_is_tuned_with_per_model_params_configs_and_split(
        tmp_path: Path, mlflow_uri: str, serving: tuple[LocalTritonServer, Path]) -> None:
    """... and promoted: the registered version deploys every model to a serving Triton
    (composing models first) and the ensemble answers with its BYTES label."""
    repo = ensemble_repository(tmp_path / "user-repo")  # not in this repository
    spec = _spec(tmp_path, repo, mlflow_uri, "confirm: {enabled: false}\n")
    tuned = CliRunner().invoke(cli, ["tune", str(spec), "--no-bar"])
    assert tuned.exit_code == 0, tuned.output
    assert "prep/instance_group.count=" in tuned.output  # the progress line's names
    client = mlflow.MlflowClient(mlflow_uri)
    exp = client.get_experiment_by_name("pipeline")
    runs = client.search_runs([exp.experiment_id])
    trials = [r for r in runs if r.data.tags.get(tags.PARENT)]
    parent = next(r for r in runs if not r.data.tags.get(tags.PARENT))
    measured = [r for r in trials if r.info.status == "FINISHED"
                and r.data.tags.get(tags.DUPLICATE_OF) is None]
    assert len(measured) >= 2, tuned.output
    for run in measured:
        rid = run.info.run_id
        assert json.loads(run.data.tags[tags.MODELS]) == MODELS
        assert run.data.tags[tags.ENTRY_MODEL] == "pipe"
        assert run.data.tags.get(tags.MODEL_FILES, "").startswith("runs:/")
        assert {k.split("/")[0] for k in run.data.params} >= {"prep", "net", "post"}
        names = {f.path for f in client.list_artifacts(rid, "configs")}
        assert names == {f"configs/{m}" for m in MODELS}
        configs = {m: model_config.parse(Path(client.download_artifacts(
            rid, f"configs/{m}/config.pbtxt", str(tmp_path / rid))).read_text())
            for m in MODELS}
        assert configs["net"].backend == "onnxruntime"  # the production config, not the shim
        entry = model_config.parse(Path(client.download_artifacts(rid, "config.pbtxt",
                                                                  str(tmp_path / rid))).read_text())
        assert entry.platform == "ensemble" and entry.name == "pipe"
        if run.data.tags.get(tags.BASELINE) != "true":
            for m in ("prep", "net", "post"):
                assert configs[m].instance_group[0].count == int(
                    run.data.params[f"{m}/instance_group.count"])
                assert configs[m].max_batch_size == int(run.data.params[f"{m}/max_batch_size"])
        metrics = run.data.metrics
        for m in ("prep", "net", "post"):
            assert metrics[f"model/{m}/requests_per_s"] > 0
            assert f"model/{m}/queue_ms" in metrics and f"model/{m}/compute_infer_ms" in metrics
        history = client.get_metric_history(rid, "sweep/model/prep/queue_ms")
        assert [h.step for h in history] == [4]
    parent_files = {f.path for f in client.list_artifacts(parent.info.run_id, "best")}
    assert parent_files >= {"best/config.pbtxt", *(f"best/{m}" for m in MODELS)}
    plots = {f.path for f in client.list_artifacts(parent.info.run_id, "plots")}
    assert "plots/steps.png" in plots
    steps = Path(client.download_artifacts(parent.info.run_id, "steps.csv",
                                           str(tmp_path / "p"))).read_text().splitlines()
    assert steps[0].startswith("configuration,trial,step,queue_ms")
    assert {line.split(",")[2] for line in steps[1:]} == {"prep", "net", "post"}
    report = Path(client.download_artifacts(parent.info.run_id, "report.html",
                                            str(tmp_path / "p"))).read_text()
    assert "Where the time goes, step by step" in report

    promoted = CliRunner().invoke(cli, ["promote", str(spec), "--force"])
    assert promoted.exit_code == 0, promoted.output
    server, served_repo = serving
    for m in MODELS:  # every model of the configuration is in the serving repository
        assert model_config.load(served_repo / m / "config.pbtxt").name == m
    image = np.arange(16, dtype=np.uint8).reshape(1, 16)
    with TritonClient(Endpoints.from_urls(server.endpoints.grpc)) as triton:
        out = triton.infer_tensors(Request("pipe", {"IMAGE": ("UINT8", image)}, ("LABEL",)))
    assert out["LABEL"].dtype == object and out["LABEL"].reshape(-1)[0]  # a label, as bytes
