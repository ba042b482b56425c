"""A warm start end to end (``search.warm_start: auto``) on a real tritonserver, real MLflow and
Optuna sqlite: a first short study, then a study of the same model and knobs that starts from
it, says so in ``tracker check``, its parent run and report.html, and tags the trials it
measured again from memory."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from mlflow import MlflowClient

from tests.support.tune import all_runs, build_quickstart, write_spec
from tracker import tags
from tracker.cli import cli
from tracker.invocation.session import TuneOptions
from tracker.tracking import runs
from tracker.tuning.tune import tune

pytestmark = pytest.mark.triton

SPACE = {"instance_group.count": [1, 2], "max_batch_size": [1, 8]}


def test_a_second_study_starts_from_the_first(mlflow_uri: str, tmp_path: Path) -> None:
    model = build_quickstart(tmp_path)
    first = write_spec(tmp_path, model, SPACE, n_trials=2, sampler="random",
                       search={"study_name": "first"})
    before = tune(first, TuneOptions(bar=False))
    (tmp_path / "second").mkdir()
    second = write_spec(tmp_path / "second", model, SPACE, n_trials=3, sampler="random",
                        search={"study_name": "second", "warm_start": "auto"})
    checked = CliRunner().invoke(cli, ["check", str(second)])
    assert checked.exit_code == 0, checked.output
    assert f"warm start from study 'first' (run {before.parent_run_id})" in checked.output
    after = tune(second, TuneOptions(bar=False))
    client = MlflowClient(mlflow_uri)
    parent = client.get_run(after.parent_run_id).data.tags
    assert parent[tags.WARM_START_FROM] == before.parent_run_id
    assert "the earlier figures are not reused" in parent[tags.WARM_START_NOTE]
    assert client.get_run(before.parent_run_id).data.tags[tags.LAUNCH_MODE] == "local"
    assert '"backend": "onnxruntime"' in parent[tags.MODEL_SIGNATURE]
    kids = sorted((r for r in all_runs(mlflow_uri)
                   if r.data.tags.get(runs.PARENT_TAG) == after.parent_run_id),
                  key=lambda r: int(r.data.tags[tags.TRIAL]))
    # the default first, then the first study's best (its only non-default trial, if it
    # measured one that was feasible) tagged with the earlier trial run it repeats
    assert kids[0].data.tags[tags.BASELINE] == "true"
    before_kids = {r.info.run_id: r for r in all_runs(mlflow_uri)
                   if r.data.tags.get(runs.PARENT_TAG) == before.parent_run_id}
    remembered = [r for r in kids if tags.WARM_START in r.data.tags]
    assert remembered and remembered[0] is kids[1]
    source_run, _, source_trial = remembered[0].data.tags[tags.WARM_START].partition("/")
    source = before_kids[source_run]
    assert source_trial == f"trial-{source.data.tags[tags.TRIAL]}"
    assert source.data.params == kids[1].data.params
    # its figures are this study's own measurement, not the earlier ones copied
    assert "perf_throughput" in kids[1].data.metrics
    assert not any(tags.WARM_START in r.data.tags for r in before_kids.values())
    report = Path(client.download_artifacts(after.parent_run_id, "report.html", str(tmp_path)))
    text = report.read_text()
    assert "Started from an earlier study" in text
    assert f"/runs/{before.parent_run_id}" in text
    assert f"measured here: trial 1 (its {source_trial})" in text
