"""`tracker tune --perf-analyzer`: every trial measured by the perf_analyzer on PATH (here the
stand-in of tests/measure/test_pa_load.py, which speaks its command line and writes its
CSV; no perf_analyzer binary exists on these machines), with load.perf_analyzer_flags passed
through, and the same metrics logged as with the built-in client."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from mlflow import MlflowClient

from tests.measure.test_pa_load import fake_pa  # noqa: F401  (the fixture)
from tracker.cli import cli

QUICKSTART = Path(__file__).resolve().parents[2] / "projects" / "quickstart"

SPEC = """
model: {name: quickstart, path: model.onnx, build: make_model.py}
load: {concurrency: [1, 4], perf_analyzer_flags: [--async]}
search: {n_trials: 2, seed: 3, sweep: full, space: {max_batch_size: [4, 8]}}
confirm: {enabled: false}
"""


@pytest.mark.triton
def test_tune_measures_each_trial_with_perf_analyzer(tmp_path: Path, mlflow_uri: str,
                                                     fake_pa: Path) -> None:  # noqa: F811
    for name in ("make_model.py", "model.onnx"):
        if (QUICKSTART / name).exists():
            shutil.copy(QUICKSTART / name, tmp_path / name)
    (tmp_path / "study.yaml").write_text(SPEC)
    got = CliRunner().invoke(cli, ["tune", str(tmp_path / "study.yaml"), "--perf-analyzer",
                                   "--no-bar"])
    assert got.exit_code == 0, got.output
    calls = [json.loads(line) for line in fake_pa.read_text().splitlines()]
    runs = [c for c in calls if c != ["--help"]]
    assert len(runs) >= 2, got.output  # concurrency 1 and 4 of the first trial at least
    assert all(c[:2] == ["-m", "quickstart"] and c[-1] == "--async"
                                  for c in runs)
    client = MlflowClient(mlflow_uri)
    trials = [r for r in client.search_runs(
        [e.experiment_id for e in client.search_experiments()])
        if "mlflow.parentRunId" in r.data.tags]
    measured = [r for r in trials if "tracker.duplicate_of" not in r.data.tags]
    assert measured and len(measured) <= 2  # n_trials: 2 (a repeated configuration is free)
    for run in trials:  # the stand-in's figure at concurrency 4, logged as the headline
        assert run.data.metrics["perf_throughput"] == 400.0
        assert run.data.metrics["perf_latency_p99"] == pytest.approx(12.0)
