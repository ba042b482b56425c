"""The pieces of the MLflow-native results that need no server: the signature from a config,
the saved view and its link, the parameters as shown, the metric attributes, the MLproject."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from click.testing import CliRunner
from mlflow import MlflowClient

from tracker.cli import cli
from tracker.tracking import view
from tracker.tracking.winner import signature_for
from tracker.trial_record import Attr, metric_attrs, read_metrics, shown_params
from tracker.triton import model_config

REPO = Path(__file__).resolve().parents[2]

CONFIG = """
name: "m"
max_batch_size: 8
input [{ name: "pixels" data_type: TYPE_FP32 dims: [3, -1, 224] },
       { name: "ids" data_type: TYPE_INT64 dims: [4] }]
output [{ name: "probs" data_type: TYPE_FP16 dims: [1000] }]
"""


def test_signature_lists_dtypes_and_dims_with_the_batch_dim_first() -> None:
    sig = signature_for(model_config.parse(CONFIG))
    got = [(s.name, s.type, s.shape) for s in sig.inputs.inputs]
    assert got == [("pixels", np.dtype("float32"), (-1, 3, -1, 224)),
                   ("ids", np.dtype("int64"), (-1, 4))]
    assert [(s.name, s.type, s.shape) for s in sig.outputs.inputs] == [
        ("probs", np.dtype("float16"), (-1, 1000))]
    fixed = signature_for(
        model_config.parse(CONFIG.replace("max_batch_size: 8", "max_batch_size: 0")))
    assert fixed.inputs.inputs[1].shape == (4,)


def test_the_view_filters_the_parent_sorts_by_the_first_objective_and_fits() -> None:
    state = view.view_state("abc", ["max_batch_size", "instance_group.count"],
                            {"perf_latency_p99": "minimize", "perf_throughput": "maximize"})
    assert state["searchFilter"] == "tags.`mlflow.parentRunId` = 'abc'"
    assert (state["orderByKey"], state["orderByAsc"]) == ("metrics.`perf_latency_p99`", True)
    columns = state["selectedColumns"]
    assert isinstance(columns, list)
    assert columns[:2] == ["params.`max_batch_size`", "params.`instance_group.count`"]
    assert columns.count("metrics.`perf_throughput`") == 1
    kinds = [c["type"] for c in state["compareRunCharts"]]  # type: ignore[attr-defined]
    assert kinds == ["SCATTER", "PARALLEL", "LINE", "LINE"]


def test_view_written_as_an_experiment_tag_the_ui_reads(mlflow_uri: str) -> None:
    client = MlflowClient(mlflow_uri)
    exp = client.create_experiment("e")
    many = [f"parameters.knob_{i:03d}" for i in range(400)]  # too long with charts
    view_id = view.write_view(client, exp, "f" * 32, name="Study s", knobs=many,
                              objectives={"perf_throughput": "maximize"})
    value = client.get_experiment(exp).tags[view.VIEW_TAG_PREFIX + view_id]
    assert len(value) <= view.MAX_VIEW_CHARS
    envelope = json.loads(value)
    assert envelope["name"] == "Study s" and isinstance(envelope["createdAt"], int)
    assert json.loads(envelope["state"])["compareRunCharts"] == []


def test_link_for_a_server_and_for_a_local_store(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    fragment = ("#/experiments/3/runs?workflowType=machine_learning&compareRunsMode=TABLE"
                "&viewStateShareKey=v")
    assert view.study_link("https://u:pw@mlflow.example/", "3", "v") == (
        f"MLflow: https://u:***@mlflow.example/{fragment}")
    monkeypatch.chdir(tmp_path)
    assert view.study_link("sqlite:///mlflow.db", "3", "v") == (
        f"MLflow: run `mlflow ui --backend-store-uri sqlite:///{tmp_path}/mlflow.db` and open "
        f"http://127.0.0.1:5000/{fragment}")


def test_params_show_unset_and_real_values_of_an_approximated_baseline() -> None:
    params = {"a": 1, "b": 4, "concurrency": 8}
    assert shown_params(params, {"a": None, "b": 3}) == {"a": "unset", "b": 3,
                                                         "concurrency": 8}
    assert shown_params(params, None) == params


def test_metrics_are_one_attribute_each_and_old_studies_still_read() -> None:
    attrs = metric_attrs({"perf_throughput": 10.5, "perf_latency_p99": 2.0})
    assert attrs[Attr.METRIC_KEYS] == ["perf_latency_p99", "perf_throughput"]
    assert read_metrics(dict(attrs)) == {"perf_throughput": 10.5, "perf_latency_p99": 2.0}
    assert read_metrics({Attr.METRICS: {"perf_throughput": 3}}) == {"perf_throughput": 3.0}
    assert read_metrics({}) == {}


def test_mlproject_declares_only_the_spec_and_the_cli_takes_mlflows_spelling() -> None:
    main = yaml.safe_load((REPO / "MLproject").read_text())["entry_points"]["main"]
    # caller_dir is never given: MLflow resolves it to the caller's folder (spec/locate.py)
    assert list(main["parameters"]) == ["spec", "caller_dir"]
    out = CliRunner().invoke(cli, ["tune", "--help"])
    for option in ("--n_trials", "--study_name", "--heartbeat_interval", "--grace_period",
                   "--timeout", "--storage", "--gpus"):
        assert option in out.output
