"""The output check on a real tritonserver (tracker/outputs/trials.py): a model whose
answers depend on batch composition is refused in every configuration that batches it, a
deterministic model passes every configuration, and ``tracker check --outputs`` finds an
output that is not deterministic."""

from __future__ import annotations

import csv
import io
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from mlflow import MlflowClient
from optuna import load_study
from optuna.trial import TrialState

from tests.support.models import noisy
from tests.support.tune import REPO, build_quickstart, trials, write_spec
from tracker.cli import cli
from tracker.invocation.session import TuneOptions
from tracker.outputs import stored as check_stored
from tracker.outputs import trials as check_outputs
from tracker.outputs.probes import COPIES
from tracker.tuning.tune import tune

pytestmark = pytest.mark.triton
PROJECT = REPO / "projects" / "batch_dependent"


def _batch_dependent(folder: Path) -> Path:
    out = folder / "model.onnx"
    subprocess.run([sys.executable, str(PROJECT / "make_model.py"), str(out)], check=True,
                   capture_output=True)
    return out


def _trials_csv(client: MlflowClient, run_id: str, folder: Path) -> list[dict[str, str]]:
    path = client.download_artifacts(run_id, "trials.csv", str(folder))
    return list(csv.DictReader(io.StringIO(Path(path).read_text())))


def test_configurations_that_batch_a_batch_dependent_model_fail_their_check(
        tmp_path: Path, mlflow_uri: str) -> None:
    """The default (no dynamic batcher) sets the reference; max_batch_size 8 with a dynamic
    batcher mixes the probes and fails before it is measured, naming the output and the
    knob; max_batch_size 1 answers as the default does and is measured."""
    spec = write_spec(tmp_path, _batch_dependent(tmp_path),
                      {"max_batch_size": [1, 8],
                       "dynamic_batching.max_queue_delay_microseconds": [100]},
                      n_trials=3, name="batchdep")
    doc = yaml.safe_load(spec.read_text())
    doc["model"]["config"] = str(PROJECT / "config.pbtxt")  # no dynamic batcher
    spec.write_text(yaml.safe_dump(doc))
    result = tune(spec, TuneOptions(bar=False))
    got = {t.number: t for t in trials(f"sqlite:///{tmp_path / 'optuna.db'}", "batchdep")}
    client = MlflowClient(mlflow_uri)
    batched = [t for t in got.values() if t.params.get("max_batch_size") == 8
               and not t.user_attrs.get("baseline")]
    assert batched and all(t.state == TrialState.FAIL for t in batched)
    reason = batched[0].user_attrs["fail_reason"]
    assert "outputs differ from the default configuration's" in reason
    assert "dynamic_batching.max_queue_delay_microseconds=100" in reason
    assert "output 'OUTPUT0' of probe" in reason and f"{4 * COPIES} requests sent together" \
        in reason and "expected [" in reason and "largest difference" in reason
    run = client.get_run(batched[0].user_attrs["mlflow_run_id"])
    assert run.data.metrics[check_outputs.PASSED] == 0
    assert run.data.metrics[check_outputs.MAX_DIFF] > 1e-3
    assert "perf_throughput" not in run.data.metrics  # never measured
    passed = [t for t in got.values() if t.state == TrialState.COMPLETE]
    assert {t.params["max_batch_size"] for t in passed} >= {1}
    for t in passed:
        metrics = client.get_run(t.user_attrs["mlflow_run_id"]).data.metrics
        assert metrics[check_outputs.PASSED] == 1 and "perf_throughput" in metrics
    assert result.best_trial is not None and got[result.best_trial].state == TrialState.COMPLETE
    # the reference: stored once on the parent run, named by the study
    study = load_study(study_name="batchdep", storage=f"sqlite:///{tmp_path / 'optuna.db'}")
    assert study.user_attrs[check_stored.REFERENCE_ATTR] == result.parent_run_id
    check_stored._CACHE.clear()
    reference = check_stored.load_reference(client, result.parent_run_id)
    assert len(reference.inputs) == 4 and reference.outputs == ["OUTPUT0"]
    rows = _trials_csv(client, result.parent_run_id, tmp_path / "csv")
    assert {r[check_outputs.PASSED] for r in rows} == {"1.0", "0.0"}


def test_a_deterministic_model_passes_every_configuration(tmp_path: Path,
                                                          mlflow_uri: str) -> None:
    """No false refusal: instances, threads, batch sizes and a queue delay on the quickstart
    model all answer within the default tolerances."""
    spec = write_spec(tmp_path, build_quickstart(tmp_path),
                      {"instance_group.count": [2], "max_batch_size": [32],
                       "dynamic_batching.max_queue_delay_microseconds": [500],
                       "parameters.intra_op_thread_count": [1, 2]}, n_trials=3)
    tune(spec, TuneOptions(bar=False))
    client = MlflowClient(mlflow_uri)
    got = trials(f"sqlite:///{tmp_path / 'optuna.db'}")
    assert len(got) >= 3
    for t in got:
        assert t.state == TrialState.COMPLETE, t.user_attrs.get("fail_reason")
        metrics = client.get_run(t.user_attrs["mlflow_run_id"]).data.metrics
        assert metrics[check_outputs.PASSED] == 1


def test_check_outputs_finds_an_output_that_is_not_deterministic(tmp_path: Path,
                                                                 mlflow_uri: str) -> None:
    spec = write_spec(tmp_path, noisy(tmp_path / "noisy.onnx"), {"max_batch_size": [1]},
                      n_trials=1, name="noisy")
    result = CliRunner().invoke(cli, ["check", str(spec), "--outputs"])
    assert result.exit_code == 0, result.output
    assert "answered differently on two calls in outputs ['NOISE']" in result.output
    assert "check.outputs: {ignore: [NOISE]}" in result.output
