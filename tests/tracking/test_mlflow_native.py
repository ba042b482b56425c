"""MLflow-native results on a real quickstart study (real Triton, MLflow on sqlite, Optuna):
the model file stored once per study, a registered model MLflow itself loads, honest params,
an Optuna study optuna-dashboard can read, and the saved view the printed link opens, checked
in headless Chromium against a real `mlflow server`."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pytest
from click.testing import CliRunner
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from tests.support.tune import TRACKER, build_quickstart, env_for, write_spec
from tracker.candidate.model_store import CONFIGURATION_DIR
from tracker.cli import cli
from tracker.search.optuna_study import best_trials
from tracker.tracking import flavor, model_files, runs, view

KNOBS = ("instance_group.count", "parameters.intra_op_thread_count")


@dataclass
class Finished:
    tmp: Path
    spec: Path
    uri: str
    storage: str
    parents: list[str]        # parent run per invocation (the first stored the model file)
    outputs: list[str]        # stdout per invocation
    experiment_id: str

    @property
    def client(self) -> MlflowClient:
        return MlflowClient(self.uri)

    def trial_runs(self) -> list[Any]:
        return [r for r in self.client.search_runs([self.experiment_id], max_results=100)
                if r.data.tags.get(runs.ROLE) == "trial"]

    def study(self) -> optuna.Study:
        return optuna.load_study(study_name="quick",
                                 storage=optuna.storages.RDBStorage(self.storage))


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Finished:
    """A 3-trial study, then the same command resumed to 4 trials (a new parent run)."""
    tmp = tmp_path_factory.mktemp("native")
    model = build_quickstart(tmp)
    spec = write_spec(tmp, model, {k: [1, 2] for k in KNOBS}, n_trials=3)
    env = env_for(tmp)
    outputs, parents = [], []
    for n in (3, 4):
        proc = subprocess.run([TRACKER, "tune", str(spec), "--no-bar", "--n-trials", str(n)],
                              cwd=tmp, env=env, capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        outputs.append(proc.stdout)
        parents.append(re.findall(r"MLflow parent run ([0-9a-f]{32})", proc.stdout)[-1])
    uri = env["MLFLOW_TRACKING_URI"]
    exp = MlflowClient(uri).get_run(parents[0]).info.experiment_id
    return Finished(tmp, spec, uri, f"sqlite:///{tmp / 'optuna.db'}", parents, outputs, exp)


def _model_copies(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("model.onnx") if "mlruns" in p.parts)


def test_the_model_file_is_stored_once_and_resume_reuses_it(finished: Finished) -> None:
    """One model is stored as the one-entry configuration: ``<model>/1/<its file>`` in one
    folder, uploaded by the first invocation; the resumed one points at that upload."""
    first, second = finished.parents
    name = finished.trial_runs()[0].data.tags["tracker.entry_model"]
    stored = (finished.tmp / "mlruns" / finished.experiment_id / first / "artifacts"
              / model_files.ARTIFACT_DIR / CONFIGURATION_DIR)
    assert _model_copies(finished.tmp) == [stored / name / "1" / "model.onnx"]
    assert len(finished.client.search_logged_models([finished.experiment_id])) == 0
    measured = [r for r in finished.trial_runs()
                if r.data.tags.get(runs.STATE) == "COMPLETE"
                and "tracker.duplicate_of" not in r.data.tags]
    assert len(measured) == 4
    for run in measured:  # both invocations point at the first parent's upload
        assert run.data.tags[model_files.TAG_URI] == f"runs:/{first}/study_model"
        assert run.data.tags[model_files.TAG_SHA] == model_files.sha256_of(stored)
        assert json.loads(run.data.tags["tracker.models"]) == [name]
        names = {a.path for a in finished.client.list_artifacts(run.info.run_id)}
        assert {"config.pbtxt", "perf.csv", "server.log", "configs"} <= names
        assert not names & {"model", model_files.ARTIFACT_DIR}
    assert finished.study().user_attrs[model_files.STUDY_ATTR]["run_id"] == first
    assert second != first


def test_a_knob_the_default_leaves_unset_shows_unset(finished: Finished) -> None:
    base = next(r for r in finished.trial_runs() if r.data.tags.get("tracker.baseline") == "true")
    assert base.data.params["parameters.intra_op_thread_count"] == "unset"
    assert base.data.params["instance_group.count"] == "1"
    t0 = finished.study().trials[0]
    assert isinstance(t0.params["parameters.intra_op_thread_count"], int)  # Optuna's view
    csv_path = finished.client.download_artifacts(finished.parents[1], "trials.csv",
                                                  str(finished.tmp / "dl-csv"))
    head, row0 = Path(csv_path).read_text().splitlines()[:2]
    column = head.split(",").index("parameters.intra_op_thread_count")
    assert row0.split(",")[column] == "unset"
    assert "parameters.intra_op_thread_count=unset" in finished.outputs[0]


def test_parent_holds_spec_table_and_the_saved_view(finished: Finished) -> None:
    parent = finished.parents[1]
    client = finished.client
    spec = client.download_artifacts(parent, "study.yaml", str(finished.tmp / "dl-spec"))
    assert Path(spec).read_text() == finished.spec.read_text()
    table = json.loads(Path(client.download_artifacts(parent, "trials.json",
                                                      str(finished.tmp / "dl-t"))).read_text())
    assert len(table["data"]) == 4 and "parameters.intra_op_thread_count" in table["columns"]
    assert "trials.json" in client.get_run(parent).data.tags["mlflow.loggedArtifacts"]
    views = {k for k in client.get_experiment(finished.experiment_id).tags
             if k.startswith(view.VIEW_TAG_PREFIX)}
    assert views == {view.VIEW_TAG_PREFIX + parent}  # the superseded parent's view is gone
    tag = client.get_experiment(finished.experiment_id).tags[view.VIEW_TAG_PREFIX + parent]
    state = json.loads(json.loads(tag)["state"])
    assert state["searchFilter"] == f"tags.`mlflow.parentRunId` = '{parent}'"
    assert (state["orderByKey"], state["orderByAsc"]) == ("metrics.`perf_throughput`", False)
    assert state["runsHiddenMode"] == "SHOW_ALL"
    assert {f"params.`{k}`" for k in KNOBS} | {"metrics.`perf_latency_p99`"} <= set(
        state["selectedColumns"])
    charts = {c["type"]: c for c in state["compareRunCharts"]}
    assert charts["PARALLEL"]["selectedParams"] == list(KNOBS)
    assert charts["SCATTER"]["xaxis"]["key"] == "perf_latency_p99"
    assert "sweep/perf_throughput" in {c.get("metricKey") for c in state["compareRunCharts"]
                                       if c["type"] == "LINE"}
    store = f"sqlite:///{finished.tmp / 'mlflow.db'}"
    assert (f"run `mlflow ui --backend-store-uri {store}` and open http://127.0.0.1:5000/"
            f"{view.view_fragment(finished.experiment_id, parent)}") in finished.outputs[1]
    params = client.get_run(parent).data.params
    assert params["study.n_trials"] == "4" and "" not in params.values()


def test_the_optuna_study_names_its_metrics_for_the_dashboard(finished: Finished) -> None:
    study = finished.study()
    assert study.metric_names == ["perf_throughput"]
    by_run = {r.info.run_id: r for r in finished.trial_runs()}
    for t in study.get_trials(states=(optuna.trial.TrialState.COMPLETE,)):
        got = t.user_attrs["perf_throughput"]
        assert isinstance(got, float) and isinstance(t.user_attrs["perf_latency_p99"], float)
        run = by_run[t.user_attrs["mlflow_run_id"]]
        assert run.data.metrics["perf_throughput"] == pytest.approx(got)
    best = best_trials(study)
    tags = finished.client.get_run(finished.parents[1]).data.tags
    assert [t.number for t in best] == [int(tags["tracker.best_trial"])]


def _promote(finished: Finished, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", finished.uri)
    monkeypatch.setenv("MLFLOW_REGISTRY_URI", finished.uri)
    monkeypatch.chdir(finished.tmp)
    return CliRunner().invoke(cli, ["promote", str(finished.spec), "--no-deploy"])


def test_promote_registers_a_model_mlflow_loads_from_the_stored_file(
        finished: Finished, monkeypatch: pytest.MonkeyPatch) -> None:
    import mlflow.pyfunc
    import onnxruntime

    result = _promote(finished, monkeypatch)
    assert result.exit_code == 0, result.output
    client = finished.client
    mv = client.get_model_version_by_alias("quick", "production")
    assert mv.current_stage == "Production"
    assert mv.run_id == finished.client.get_run(finished.parents[1]).data.tags[runs.BEST_RUN]
    model = mlflow.pyfunc.load_model("models:/quick@production")
    inputs = model.metadata.get_input_schema().inputs
    assert [(i.name, i.type, i.shape) for i in inputs] == [("INPUT0", np.dtype("float32"),
                                                            (-1, 64))]
    batch = np.random.default_rng(0).random((3, 64), dtype=np.float32)
    want = onnxruntime.InferenceSession(str(finished.tmp / "model.onnx")).run(
        None, {"INPUT0": batch})[0]
    np.testing.assert_allclose(model.predict(batch)["OUTPUT0"], want, rtol=1e-5)
    assert {"triton", "onnx", "python_function"} <= set(model.metadata.flavors)
    got = flavor.load_model("models:/quick@production", dst_path=finished.tmp / "dl-model").entry
    served = client.download_artifacts(mv.run_id, "production_config.pbtxt",
                                       str(finished.tmp / "dl-prod"))
    assert got.config_text == Path(served).read_text()  # the winner's production config
    assert (got.latest_version_dir / "model.onnx").read_bytes() == (
        finished.tmp / "model.onnx").read_bytes()


def test_promote_sets_the_alias_alone_when_the_registry_refuses_stages(
        finished: Finished, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise MlflowException("stages are not supported by this registry")

    monkeypatch.setattr(MlflowClient, "transition_model_version_stage", refuse)
    result = _promote(finished, monkeypatch)
    assert result.exit_code == 0, result.output
    assert "refused the stage transition" in result.output
    alias = finished.client.get_model_version_by_alias("quick", "production")
    assert str(alias.version) == "2" and alias.current_stage == "None"
    # the winner's MLflow model is built once and registered again, not uploaded again
    assert len(finished.client.search_logged_models([finished.experiment_id])) == 1


# ---- the printed link in a real browser ------------------------------------------------------

CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--window-size=1600,1200")


def _dump_dom(browser: str, url: str, profile: Path, budget_ms: int) -> str:
    proc = subprocess.Popen([browser, *CHROMIUM_FLAGS, f"--user-data-dir={profile}",
                             f"--virtual-time-budget={budget_ms}", "--dump-dom", url],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    return out.decode(errors="replace")


def test_the_printed_link_opens_the_trials_in_throughput_order(
        finished: Finished, tmp_path: Path) -> None:
    from tests.support import postgres

    browser = shutil.which("chromium")
    if browser is None:
        pytest.skip("Debian's chromium is not installed (scripts/system-deps.sh installs it "
                    "as root)")
    parent = finished.parents[1]
    link = re.findall(r"and open (http://127\.0\.0\.1:5000/\S+)", finished.outputs[1])[-1]
    try:
        server = postgres.start_mlflow_server(backend_uri=finished.uri, timeout_s=240)
    except postgres.ServiceUnavailable as exc:
        pytest.skip(f"mlflow server unavailable: {exc}")
    try:
        dom = _dump_dom(browser, link.replace("http://127.0.0.1:5000", server.uri),
                        tmp_path / "profile", budget_ms=30000)
    finally:
        pids = postgres.group_pids(server.proc.pid)
        server.stop()
        assert postgres.still_running(pids) == []
    order = list(dict.fromkeys(re.findall(r'row-index="\d+" row-id="([0-9a-f]{32})"', dom)))
    kids = finished.client.search_runs([finished.experiment_id],
                                       f"tags.`mlflow.parentRunId` = '{parent}'")
    want = [r.info.run_id for r in sorted(kids, key=lambda r: -r.data.metrics.get(
        "perf_throughput", -1.0))]
    assert order == want, (order, want)
    columns = set(re.findall(r'col-id="([^"]+)"', dom))
    assert {f"params.`{k}`" for k in KNOBS} | {"metrics.`perf_throughput`"} <= columns
