"""Two entry models in one study, one of them decoupled: each entry's load keeps its own
kind, so the decoupled model is streamed (its time to first token and tokens/s logged) while
the other sends unary requests, in the same windows (tracker/measure/sweep.py, one sweep for
any number of entries)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from mlflow import MlflowClient

from tests.support.tune import all_runs
from tests.tuning.test_tune_streaming import CONFIG, MODEL
from tracker import tags
from tracker.invocation.session import TuneOptions
from tracker.tracking import runs
from tracker.tuning.tune import tune

pytestmark = pytest.mark.triton

ECHO = """
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse(
            [pb_utils.Tensor("Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy())])
            for r in requests]
"""
ECHO_CONFIG = """name: "echo"
backend: "python"
max_batch_size: 0
instance_group [{ count: 1 kind: KIND_CPU }]
input [{ name: "X" data_type: TYPE_FP32 dims: [4] }]
output [{ name: "Y" data_type: TYPE_FP32 dims: [4] }]
"""


def _spec(tmp_path: Path, mlflow_uri: str) -> Path:
    repo = tmp_path / "repo"
    for name, code, config in (("storyteller", MODEL, CONFIG), ("echo", ECHO, ECHO_CONFIG)):
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "1" / "model.py").write_text(code)
        (repo / name / "config.pbtxt").write_text(config)
    prompts = tmp_path / "prompts.json"
    prompts.write_text(json.dumps({"data": [
        {"PROMPT": {"content": list(range(20)), "shape": [20]}, "MAX_TOKENS": [4]}]}))
    spec = tmp_path / "study.yaml"
    spec.write_text(yaml.safe_dump({
        "model": {"name": ["storyteller", "echo"], "path": str(repo)},
        "load": {"concurrency": [1], "window_ms": 400, "max_tries": 4, "warmup_requests": 4,
                 "stability_pct": 50,
                 "models": {"storyteller": {"input_data": str(prompts)}}},
        "search": {"sampler": "grid", "n_trials": 1, "seed": 1, "sweep": "full",
                   "space": {"echo/instance_group.count": [1]}},
        "confirm": {"enabled": False},
        "mlflow": {"tracking_uri": mlflow_uri},
    }, sort_keys=False))
    return spec


def test_a_decoupled_entry_among_two_is_streamed(tmp_path: Path, mlflow_uri: str) -> None:
    result = tune(_spec(tmp_path, mlflow_uri), TuneOptions(bar=False))
    client = MlflowClient(mlflow_uri)
    (trial,) = [r for r in all_runs(mlflow_uri) if r.data.tags.get(runs.PARENT_TAG)
                == result.parent_run_id and r.data.tags.get(tags.ROLE, "trial") == "trial"]
    metrics = trial.data.metrics
    for name in ("perf_time_to_first_token_p99", "perf_inter_token_latency_p50",
                 "perf_output_token_throughput"):
        assert f"storyteller/{name}" in metrics, sorted(metrics)
        assert f"echo/{name}" not in metrics  # unary requests: no tokens
    assert metrics["storyteller/perf_output_token_throughput"] > 0
    assert metrics["echo/perf_throughput"] > 0
    assert client.get_metric_history(trial.info.run_id,
                                     "sweep/storyteller/perf_time_to_first_token_p99")
    perf = Path(client.download_artifacts(trial.info.run_id, "storyteller/perf.csv",
                                          str(tmp_path / "dl"))).read_text()
    assert "TTFT p99" in perf
