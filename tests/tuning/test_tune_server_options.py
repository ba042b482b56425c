"""Server options and the response cache, tuned end to end on the embedded tritonserver (real
MLflow and Optuna on sqlite): the server runs with the rate limiter on and two resources
(server.options), the trials search the cache (``response_cache.enable`` with
``server/cache_size``) and the instance group's rate_limiter, on a load that repeats 90% of
its inputs. Trials that enable the cache log its hits; every trial's server log shows the
rate limiter Triton ran with, and its tags the flags."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow import MlflowClient

from tests.support.tune import build_quickstart, measured_trial_runs, write_spec
from tracker import tags
from tracker.invocation.session import TuneOptions
from tracker.tuning.tune import tune

pytestmark = pytest.mark.triton

SPACE = {"response_cache.enable": [True, False], "server/cache_size": [1048576, 4194304],
         "instance_group.rate_limiter.resources.name": ["R1"],
         "instance_group.rate_limiter.resources.count": [2],
         "instance_group.rate_limiter.priority": [1]}


def test_cache_and_rate_limiter_study_runs_with_its_server_options(tmp_path: Path,
                                                                   mlflow_uri: str) -> None:
    spec = write_spec(tmp_path, build_quickstart(tmp_path), SPACE, n_trials=5,
                      server={"options": {"rate_limit": "execution_count",
                                          "rate_limit_resources": {"R1": 4, "R2": 2}}},
                      load={"concurrency": [4], "repeat": {"pct": 90, "distinct": 2000}},
                      mlflow={"tracking_uri": mlflow_uri})
    result = tune(spec, TuneOptions(bar=False))

    client = MlflowClient(mlflow_uri)
    kids = measured_trial_runs(mlflow_uri, result.parent_run_id)
    cached = [r for r in kids if r.data.params.get("response_cache.enable") == "True"
              and r.data.tags.get(tags.BASELINE) != "true"]
    plain = [r for r in kids if r not in cached]
    assert cached and plain, [r.data.params for r in kids]
    for run in cached:  # the cache answered the repeats
        assert run.data.metrics["cache_hit_ratio"] > 0
        assert run.data.metrics["cache_hits_per_s"] > 0
        size = run.data.params["server/cache_size"]
        assert f"--cache-config=local,size={size}" in run.data.tags[tags.SERVER_FLAGS]
    for run in plain:
        assert "cache_hit_ratio" not in run.data.metrics
    for run in kids:  # every server ran with the rate limiter and both resources
        flags = run.data.tags[tags.SERVER_FLAGS]
        assert "--rate-limit=execution_count" in flags
        assert "--rate-limit-resource=R1:4 --rate-limit-resource=R2:2" in flags
        log = Path(client.download_artifacts(run.info.run_id, "server.log",
                                             str(tmp_path / run.info.run_id[:8]))).read_text()
        assert "EXEC_COUNT" in log and '"name":"R2", "count":2' in log
