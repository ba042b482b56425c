"""Request priorities and warmup, tuned end to end on the embedded tritonserver (real MLflow and
Optuna on sqlite): the trials give the model two priority levels or none (the default's), a
saturating load sends a quarter of its requests at level 1 and the rest at level 2, and a
constraint bounds the p99 latency of the level-1 requests. Every measured trial logs the
figures of each level and both levels were served; the trials that search
``model_warmup.count: 2`` carry the warmup block in the config.pbtxt they logged (and their
server loaded it: the trial was measured). Which level is faster is not asserted: that depends
on the load of the machine."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow import MlflowClient

from tests.support.tune import build_quickstart, measured_trial_runs, write_spec
from tracker.invocation.session import TuneOptions
from tracker.triton import model_config
from tracker.tuning.tune import tune

pytestmark = pytest.mark.triton

# the default config has neither (priority_levels 0, no warmup): the grid holds it too
SPACE = {"dynamic_batching.priority_levels": [2], "model_warmup.count": [0, 2]}
LEVEL_FIGURES = ("perf_throughput", "perf_latency_avg", "perf_latency_p99")


def test_a_study_measures_each_priority_level_and_loads_the_warmup(tmp_path: Path,
                                                                  mlflow_uri: str) -> None:
    spec = write_spec(tmp_path, build_quickstart(tmp_path), SPACE, n_trials=3,
                      load={"concurrency": [16], "priorities": {1: 0.25, 2: 0.75}},
                      constraints={"perf_latency_p99/priority_1": {"max": 1000}},
                      mlflow={"tracking_uri": mlflow_uri})
    result = tune(spec, TuneOptions(bar=False))

    client = MlflowClient(mlflow_uri)
    kids = measured_trial_runs(mlflow_uri, result.parent_run_id)
    assert len(kids) >= 3, [r.data.params for r in kids]
    for run in kids:
        got = run.data.metrics
        for level in (1, 2):
            for figure in LEVEL_FIGURES:
                assert f"{figure}/priority_{level}" in got, sorted(got)
            assert got[f"perf_throughput/priority_{level}"] > 0  # both levels were served
        share = got["perf_throughput/priority_1"] / got["perf_throughput"]
        assert 0.1 < share < 0.4, share  # about the quarter sent at level 1
    warm = [r for r in kids if r.data.params.get("model_warmup.count") == "2"]
    cold = [r for r in kids if r.data.params.get("model_warmup.count") == "0"]
    assert warm and cold, [r.data.params for r in kids]
    for run in kids:  # the config.pbtxt each trial logged (the one its server loaded)
        cfg = model_config.parse(Path(client.download_artifacts(
            run.info.run_id, "config.pbtxt", str(tmp_path / run.info.run_id[:8]))).read_text())
        levels = int(run.data.params["dynamic_batching.priority_levels"])
        assert cfg.dynamic_batching.priority_levels == levels
        if levels:  # a request that names no level: the lowest (Triton needs a default)
            assert cfg.dynamic_batching.default_priority_level == levels
        if run in warm:
            (block,) = cfg.model_warmup
            assert block.count == 2 and block.batch_size == 1 and "INPUT0" in block.inputs
        else:
            assert not cfg.model_warmup
