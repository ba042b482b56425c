"""A BLS model tuned with the model it calls, on the embedded Triton: ``bls`` (Python) sends
each request on to ``net`` (ONNX) through Business Logic Scripting. The spec names the callee
(``model.composing``); every trial serves both, logs both models' params and configs, and
the callee's server-side split shows the calls BLS made."""

from __future__ import annotations

import json
from pathlib import Path

import mlflow
import pytest
from click.testing import CliRunner

from tests.support.pipeline import bls_repository
from tracker import tags
from tracker.cli import cli
from tracker.triton import model_config

pytestmark = pytest.mark.triton


def test_a_bls_model_and_its_callee_are_tuned_together(tmp_path: Path, mlflow_uri: str) -> None:
    repo = bls_repository(tmp_path / "user-repo")
    spec = tmp_path / "study.yaml"
    spec.write_text(f"""
model: {{name: bls, path: {repo}, composing: [net]}}
load: {{concurrency: [2], window_ms: 300, max_tries: 4, warmup_requests: 10, stability_pct: 50}}
search:
  sampler: grid
  n_trials: 3
  space:
    net/instance_group.count: [1, 2]
    bls/instance_group.count: [1, 2]
  storage: sqlite:///{tmp_path / 'optuna.db'}
mlflow: {{tracking_uri: "{mlflow_uri}", experiment: bls}}
confirm: {{enabled: false}}
""")
    checked = CliRunner().invoke(cli, ["check", str(spec)])
    assert checked.exit_code == 0, checked.output
    assert "entry bls: the load drives it; composing models: net" in checked.output
    tuned = CliRunner().invoke(cli, ["tune", str(spec), "--no-bar"])
    assert tuned.exit_code == 0, tuned.output
    client = mlflow.MlflowClient(mlflow_uri)
    exp = client.get_experiment_by_name("bls")
    trials = [r for r in client.search_runs([exp.experiment_id]) if r.data.tags.get(tags.PARENT)]
    measured = [r for r in trials if r.info.status == "FINISHED"
                and r.data.tags.get(tags.DUPLICATE_OF) is None]
    assert len(measured) >= 2, tuned.output
    for run in measured:
        rid = run.info.run_id
        assert json.loads(run.data.tags[tags.MODELS]) == ["net", "bls"]
        assert run.data.tags[tags.ENTRY_MODEL] == "bls"
        assert {f.path for f in client.list_artifacts(rid, "configs")} == {
            "configs/net", "configs/bls"}
        m = run.data.metrics
        assert m["perf_throughput"] > 0
        # every BLS request reached net: its own statistics count them in the same windows
        assert m["model/net/requests_per_s"] == pytest.approx(m["perf_throughput"], rel=0.25)
        assert "model/net/compute_infer_ms" in m
        if run.data.tags.get(tags.BASELINE) != "true":
            for name in ("net", "bls"):
                cfg = model_config.parse(Path(client.download_artifacts(
                    rid, f"configs/{name}/config.pbtxt", str(tmp_path / rid))).read_text())
                assert cfg.instance_group[0].count == int(
                    run.data.params[f"{name}/instance_group.count"])
