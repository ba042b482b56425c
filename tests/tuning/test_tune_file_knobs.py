"""A knob kept outside config.pbtxt, tuned end to end: a Python-backend model made here reads
``delay_ms`` from ``model.json`` beside its model.py (as the vLLM backend reads its engine
arguments from ``1/model.json``), and the study searches ``model.json:delay_ms`` on the
embedded tritonserver, real MLflow sqlite and Optuna sqlite.

The model sleeps ``delay_ms`` per request, so the value acts on what is measured: the
default file's 40 ms shows in the latency, the trial with 0 ms does not have it.
"""

from __future__ import annotations

import json
from pathlib import Path

import mlflow
import optuna
import pytest
import yaml
from mlflow import MlflowClient

from tests.support.tune import all_runs
from tracker import tags
from tracker.deploy.promote import model_source
from tracker.invocation.session import TuneOptions
from tracker.tracking import runs
from tracker.tuning.tune import tune

pytestmark = pytest.mark.triton

KNOB = "model.json:delay_ms"
DEFAULT_MS = 40

MODEL = '''
import json
import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        path = os.path.join(args["model_repository"], args["model_version"], "model.json")
        with open(path) as f:
            self.delay_s = json.load(f)["delay_ms"] / 1000.0

    def execute(self, requests):
        out = []
        for request in requests:
            time.sleep(self.delay_s)
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x)]))
        return out
'''

CONFIG = '''name: "sleeper"
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
'''


def test_a_key_of_the_models_json_file_is_tuned_and_acts(tmp_path: Path,
                                                          mlflow_uri: str) -> None:
    model = tmp_path / "sleeper"
    (model / "1").mkdir(parents=True)
    (model / "1" / "model.py").write_text(MODEL)
    users_file = model / "1" / "model.json"
    users_file.write_text(json.dumps({"delay_ms": DEFAULT_MS, "note": "kept"}))
    (model / "config.pbtxt").write_text(CONFIG)
    spec = tmp_path / "study.yaml"
    spec.write_text(yaml.safe_dump({
        "model": {"name": "sleeper", "path": str(model)},
        "load": {"concurrency": [1], "window_ms": 400, "max_tries": 4, "warmup_requests": 3},
        "objectives": {"perf_throughput": "maximize"},
        # 2 trials: the default is the grid's first point, the other value its second
        "search": {"sampler": "grid", "n_trials": 2, "seed": 1,
                   "space": {KNOB: [0, DEFAULT_MS]}},
        "confirm": {"enabled": False},
        "mlflow": {"tracking_uri": mlflow_uri},
    }, sort_keys=False))

    result = tune(spec, TuneOptions(bar=False))

    client = MlflowClient(mlflow_uri)
    kids = [r for r in all_runs(mlflow_uri) if r.data.tags.get(runs.PARENT_TAG)
            == result.parent_run_id and r.data.tags.get(tags.ROLE, "trial") == "trial"]
    by_value = {r.data.params[KNOB]: r for r in kids  # the same string as the MLflow param
                if tags.DUPLICATE_OF not in r.data.tags}
    assert set(by_value) == {"0", str(DEFAULT_MS)}
    default, fast = by_value[str(DEFAULT_MS)], by_value["0"]
    assert default.data.tags[tags.BASELINE] == "true"
    # the value acted on the server: the default's sleep is in its latency, 0 ms has none
    assert default.data.metrics["perf_latency_p50"] >= DEFAULT_MS
    assert fast.data.metrics["perf_latency_p50"] < DEFAULT_MS / 2
    assert fast.data.metrics["perf_throughput"] > 2 * default.data.metrics["perf_throughput"]
    # each trial logs the file as the server loaded it, beside config.pbtxt
    for run, value in ((default, DEFAULT_MS), (fast, 0)):
        logged = Path(client.download_artifacts(run.info.run_id, "model.json",
                                                str(tmp_path / run.info.run_id[:8])))
        assert json.loads(logged.read_text()) == {"delay_ms": value, "note": "kept"}
    # the user's own file is untouched by the trial that changed its copy
    assert json.loads(users_file.read_text())["delay_ms"] == DEFAULT_MS
    # the same string is the Optuna parameter
    study = optuna.load_study(study_name=result.study_name, storage=result.storage)
    assert {t.params[KNOB] for t in study.trials} == {0, DEFAULT_MS}
    assert result.best_run_id == fast.info.run_id, result.summary
    # the registered model of the winner carries the winner's file, not the user's
    uri, _model_id = model_source(client, fast.info.run_id)
    registered = Path(mlflow.artifacts.download_artifacts(
        artifact_uri=uri, dst_path=str(tmp_path / "registered")))
    winner_files = list(registered.rglob("model.json"))
    assert winner_files and all(json.loads(f.read_text())["delay_ms"] == 0
                                for f in winner_files)
