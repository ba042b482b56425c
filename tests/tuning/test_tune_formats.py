"""A Python-backend model directory from outside the repository, tuned end to end on the
embedded Triton as a user would: `tracker check`, `tracker tune`, `tracker promote`. Its trials
run the user's own model.py (no shim), and the promoted version deploys and answers."""

from __future__ import annotations

from pathlib import Path

import mlflow
import numpy as np
import pytest
from click.testing import CliRunner

from tests.support.deploy import serving as serving  # the fixture, re-exported
from tests.support.formats import python_scale_model
from tracker import tags
from tracker.cli import cli
from tracker.triton import model_config
from tracker.triton.client import TritonClient
from tracker.triton.endpoints import Endpoints
from tracker.triton.infer import Request
from tracker.triton.server.local import LocalTritonServer

pytestmark = pytest.mark.triton


def _spec(tmp: Path, model_dir: Path, uri: str) -> Path:
    path = tmp / "study.yaml"
    path.write_text(f"""
model: {{name: pyscale, path: {model_dir}}}
load: {{concurrency: [1, 4], window_ms: 300, max_tries: 4, warmup_requests: 5}}
search:
  sampler: grid
  n_trials: 4
  storage: sqlite:///{tmp / 'optuna.db'}
  space:
    instance_group.count: [1, 2]
    parameters.SCALE: [2, 3]
mlflow: {{tracking_uri: "{uri}", registered_model: pyscale-reg}}
confirm: {{enabled: false}}
# SCALE changes what the model computes (a stand-in for a backend parameter): the output
# check would refuse SCALE 3, and this test is about tuning a Python-backend model's knobs
check: {{outputs: false}}
""")
    return path


def test_python_backend_model_is_checked_tuned_promoted_and_answers(
        tmp_path: Path, mlflow_uri: str, serving: tuple[LocalTritonServer, Path]) -> None:
    server, repo = serving
    model_dir = python_scale_model(tmp_path / "user-models")  # not in this repository
    spec = _spec(tmp_path, model_dir, mlflow_uri)
    runner = CliRunner()

    checked = runner.invoke(cli, ["check", str(spec)])
    assert checked.exit_code == 0, checked.output
    assert "python format, backend python" in checked.output
    assert "parameters.SCALE" in checked.output

    tuned = runner.invoke(cli, ["tune", str(spec), "--no-bar"])
    assert tuned.exit_code == 0, tuned.output
    client = mlflow.MlflowClient(mlflow_uri)
    exp = client.get_experiment_by_name("pyscale")
    trials = [r for r in client.search_runs([exp.experiment_id])
              if r.data.tags.get("mlflow.parentRunId") and r.info.status == "FINISHED"
              and r.data.tags.get(tags.DUPLICATE_OF) is None]
    assert len(trials) >= 4
    for run in trials:
        names = {f.path for f in client.list_artifacts(run.info.run_id)}
        assert "production_config.pbtxt" not in names  # no shim: served as written
        cfg = model_config.parse(Path(client.download_artifacts(run.info.run_id, "config.pbtxt",
                                                                str(tmp_path))).read_text())
        assert cfg.backend == "python" and "onnx_file" not in cfg.parameters
        params = run.data.params
        if run.data.tags.get(tags.BASELINE) != "true":  # the baseline is the config as is
            assert cfg.parameters["SCALE"].string_value == params["parameters.SCALE"]
            assert cfg.instance_group[0].count == int(params["instance_group.count"])
        log = Path(client.download_artifacts(run.info.run_id, "server.log",
                                             str(tmp_path))).read_text()
        assert "successfully loaded 'pyscale'" in log  # the user's model.py, on the server

    promoted = runner.invoke(cli, ["promote", str(spec)])
    assert promoted.exit_code == 0, promoted.output
    version_dir = next(p for p in (repo / "pyscale").iterdir() if p.name.isdigit())
    assert (version_dir / "model.py").is_file() and (version_dir / "notes.txt").is_file()
    served = model_config.load(repo / "pyscale" / "config.pbtxt")
    assert served.backend == "python"
    scale = float(served.parameters["SCALE"].string_value)
    endpoints = Endpoints.from_urls(server.endpoints.grpc)
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    with TritonClient(endpoints) as triton:
        out = triton.infer_tensors(Request("pyscale", {"INPUT0": ("FP32", x)}, ("OUTPUT0",)))
    np.testing.assert_allclose(out["OUTPUT0"], x * scale)
