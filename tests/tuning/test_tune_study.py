"""Tuning studies end to end on a real tritonserver, real MLflow sqlite and Optuna sqlite."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow import MlflowClient
from optuna.trial import TrialState

from tests.support.tune import REPO, all_runs, build_quickstart, env_for, trials, write_spec
from tracker import tags
from tracker.invocation.session import TuneOptions
from tracker.tracking import runs
from tracker.tuning.tune import tune

pytestmark = pytest.mark.triton


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_quickstart(tmp_path_factory.mktemp("quickstart"))


def test_mlflow_run_one_parent_with_a_child_per_trial(tmp_path: Path, model: Path) -> None:
    """The issue's acceptance check, on a faster spec: `mlflow run . -P spec=... -P
    n_trials=6` leaves one parent run with >= 6 child runs, each with the headline metrics,
    the instance_group.count param and the config.pbtxt it served; no server left."""
    spec = write_spec(tmp_path, model, {"instance_group.count": [1, 2],
                                        "max_batch_size": [1, 4, 8]}, n_trials=3)
    env = env_for(tmp_path)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "mlflow"), "run", str(REPO), "--env-manager", "local",
         "--experiment-name", "quick", "-P", f"spec={spec}", "-P", "n_trials=6"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    uri = env["MLFLOW_TRACKING_URI"]
    found = all_runs(uri)
    parents = [r for r in found if runs.PARENT_TAG not in r.data.tags]
    assert len(parents) == 1
    parent = parents[0]
    assert parent.info.status == "FINISHED"
    params = parent.data.params  # what was given, and what the study used; no '' placeholders
    assert params["n_trials"] == "6" and params["study.n_trials"] == "6"
    assert "" not in params.values() and "sampler" not in params
    kids = [r for r in found if r.data.tags.get(runs.PARENT_TAG) == parent.info.run_id]
    assert len(kids) >= 6
    client = MlflowClient(uri)
    for kid in kids:
        assert kid.info.status == "FINISHED"
        assert {"perf_throughput", "perf_latency_p99"} <= set(kid.data.metrics)
        assert "instance_group.count" in kid.data.params
        names = {a.path for a in client.list_artifacts(kid.info.run_id)}
        assert "config.pbtxt" in names
    measured = sorted((k for k in kids if "tracker.duplicate_of" not in k.data.tags),
                      key=lambda k: int(k.data.tags[tags.TRIAL]))
    best: tuple[float, int] | None = None   # (throughput, level) of the best feasible so far
    for kid in measured:
        config = client.download_artifacts(kid.info.run_id, "config.pbtxt", str(tmp_path))
        count = kid.data.params["instance_group.count"]
        text = Path(config).read_text()
        if kid.data.tags.get("tracker.baseline") == "false":
            assert f"count: {count}" in text
        assert kid.data.tags["tracker.stable"] in {"true", "false"}
        # the guided sweep starts at the best feasible trial's level, before there is one at
        # Model Analyzer's 2 x max_batch_size x count rounded down to a level ([1, 4]), and
        # climbs from there (nothing binds here)
        sweep = client.get_metric_history(kid.info.run_id, "sweep/perf_throughput")
        start = best[1] if best else 2 * int(kid.data.params["max_batch_size"]) * int(count)
        assert sorted(m.step for m in sweep) == ([4] if start >= 4 else [1, 4])
        if kid.data.tags[tags.FEASIBLE] == "true" and (
                best is None or kid.data.metrics["perf_throughput"] > best[0]):
            best = (kid.data.metrics["perf_throughput"], int(kid.data.tags[tags.CONCURRENCY]))
    top = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"trials.csv", "best", "plots", "report.html"} <= top
    assert "best/config.pbtxt" in {a.path for a in client.list_artifacts(parent.info.run_id,
                                                                         "best")}
    assert parent.data.tags["mlflow.note.content"].startswith("In ")
    assert parent.data.tags[runs.BEST_RUN] in {k.info.run_id for k in kids}
    assert "trial" in proc.stdout and "best:" in proc.stdout  # one progress line per trial
    done = [t for t in trials(f"sqlite:///{tmp_path / 'optuna.db'}")
            if t.state == TrialState.COMPLETE]
    assert len(done) >= 6 and done[0].user_attrs["baseline"] is True


def test_refused_config_fails_the_trial_and_the_study_goes_on(
        mlflow_uri: str, tmp_path: Path, model: Path) -> None:
    """Triton refuses KIND_GPU on a machine without GPUs: that trial is FAIL in Optuna and
    FAILED in MLflow with Triton's message and the server log; the other trials complete."""
    spec = write_spec(tmp_path, model, {"instance_group.kind": ["KIND_CPU", "KIND_GPU"]},
                      n_trials=3)
    result = tune(spec, TuneOptions(bar=False))
    got = trials(f"sqlite:///{tmp_path / 'optuna.db'}")
    failed = [t for t in got if t.state == TrialState.FAIL]
    assert len(failed) == 1 and failed[0].params == {"instance_group.kind": "KIND_GPU"}
    assert "no GPUs are available" in failed[0].user_attrs["fail_reason"]
    assert sum(t.state == TrialState.COMPLETE for t in got) == 2
    client = MlflowClient(mlflow_uri)
    run = client.get_run(failed[0].user_attrs["mlflow_run_id"])
    assert run.info.status == "FAILED" and run.data.tags[runs.STATE] == "FAIL"
    assert "no GPUs are available" in run.data.tags["mlflow.note.content"]
    log = Path(client.download_artifacts(run.info.run_id, "server.log", str(tmp_path)))
    assert "KIND_GPU" in log.read_text()
    # the default config (no instance_group) is not KIND_CPU exactly, so both were measured;
    # 2 COMPLETE < n_trials, but every configuration of the space has been tried
    assert "all 2 configurations" in result.stop_reason
    assert result.best_trial is not None and "configurations" in result.summary
    assert client.get_run(result.parent_run_id).info.status == "FINISHED"
