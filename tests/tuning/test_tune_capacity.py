"""Capacity at the SLA, end to end on the embedded tritonserver (real MLflow and Optuna on
sqlite): a study with ``objectives: {perf_capacity: maximize}`` replays a recorded trace
(``load.trace``, scaled by the search), probes closed loop, then measures open-loop rates
until the capacity is bracketed or its budget is spent. What is asserted holds whatever the
machine's load: the probe and the rates are logged as steps with their goodput, the capacity
is the highest rate that held and the trial is judged at it, replicas and cost follow from
it, and the confirmation re-searches both capacities in rounds to a verdict. ``tracker
check`` refuses what a capacity study cannot take, in one line."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from mlflow import MlflowClient

from tests.search.test_sequence_check import project
from tests.support.tune import build_quickstart, measured_trial_runs, refused_by_check, write_spec
from tracker import tags
from tracker.cli import cli
from tracker.errors import SpecError
from tracker.invocation.session import TuneOptions
from tracker.spec import parse_spec
from tracker.tuning.tune import tune

pytestmark = pytest.mark.triton

TARGET, PRICE, HEADROOM = 5000.0, 2.9, 20.0


def test_a_capacity_study_searches_rates_and_prices_the_capacity(tmp_path: Path,
                                                                  mlflow_uri: str) -> None:
    trace = tmp_path / "day.jsonl"  # a burst of 5 every 10 ms, then a lull: its shape
    trace.write_text("".join(f'{{"timestamp": {10 * (i // 5) + 0.1 * (i % 5):.1f}, '
                             f'"input_index": {i % 3}}}\n' for i in range(200)))
    spec = write_spec(tmp_path, build_quickstart(tmp_path), {"instance_group.count": [1, 2]},
                      n_trials=2,
                      load={"concurrency": [4], "trace": str(trace),
                            "capacity_max_probes": 3, "capacity_tolerance_pct": 30},
                      capacity={"target_rps": TARGET, "price_per_hour": PRICE,
                                "headroom_pct": HEADROOM},
                      confirm={"enabled": True, "rounds": 2, "min_rounds": 2, "top_k": 1},
                      mlflow={"tracking_uri": mlflow_uri})
    data = yaml.safe_load(spec.read_text())
    data["objectives"] = {"perf_capacity": "maximize"}
    spec.write_text(yaml.safe_dump(data))
    result = tune(spec, TuneOptions(bar=False))

    kids = measured_trial_runs(mlflow_uri, result.parent_run_id)
    assert len(kids) == 2
    run = next(r for r in kids if r.data.params.get("instance_group.count") == "1")
    got = run.data.metrics
    probes = int(got["perf_capacity_probes"])
    assert 1 <= probes <= 3
    stop = run.data.tags[tags.SWEEP_STOP]
    assert any(why in stop for why in ("bracketed", "step budget", "no rate")), stop
    client = MlflowClient(mlflow_uri)
    points = client.get_metric_history(run.info.run_id, "sweep/perf_throughput")
    steps = {m.step for m in points}  # the probe, then each reading (a failed rate's 2nd too)
    assert 4 in steps and len(points) == probes + 1 and len(steps) <= probes + 1
    goodput = client.get_metric_history(run.info.run_id, "sweep/perf_goodput_pct")
    assert {m.step for m in goodput} <= steps - {4} and goodput  # open-loop levels only
    capacity = got["perf_capacity"]
    assert capacity == got["perf_capacity_low"]
    if capacity > 0:  # the trial is judged at the rate of its capacity
        assert got["request_rate"] == capacity and got["feasible"] == 1.0
        assert got["replicas"] == math.ceil(TARGET * (1 + HEADROOM / 100) / capacity)
        assert got["cost_per_million"] == pytest.approx(PRICE / (capacity * 3600) * 1e6)
        assert got.get("perf_capacity_high", math.inf) > capacity
    else:
        assert "replicas" not in got and "cost_per_million" not in got
    # the pictures: latency against offered load with each capacity marked; cost when priced
    drawn = {f.path for f in client.list_artifacts(result.parent_run_id, "plots")}
    assert "plots/capacity.png" in drawn and "plots/capacity.html" in drawn
    assert ("plots/cost.png" in drawn) == any(r.data.metrics["perf_capacity"] > 0 for r in kids)
    # the confirmation re-searches both capacities round by round: a verdict on capacity
    parent = client.get_run(result.parent_run_id).data.tags
    assert parent[tags.CONFIRM_DESIGN] == "rounds"
    assert "a capacity is searched for each configuration" in parent[tags.CONFIRM_DESIGN_REASON]
    assert parent[tags.VERDICT] in ("better", "tied", "equivalent", "inconclusive")


@pytest.mark.parametrize(("extra", "said"), [
    ("objectives: {perf_capacity: maximize}\nsearch: {space: {concurrency: [1, 4]}}",
     "search.space.concurrency: a capacity search sets the load itself"),
    ("load: {trace: t.jsonl, batch_size: 2}",
     "t.jsonl, line 2: batch_size 4 differs from load.batch_size 2"),
])
def test_check_refuses_what_a_capacity_study_cannot_take(tmp_path: Path, extra: str,
                                                         said: str) -> None:
    (tmp_path / "t.jsonl").write_text('{"timestamp": 0}\n{"timestamp": 1, "batch_size": 4}\n')
    err = refused_by_check(tmp_path, extra)
    assert said in err, err


def test_check_refuses_capacity_for_a_stateful_model(tmp_path: Path) -> None:
    spec = project(tmp_path)
    spec.write_text(spec.read_text() + "objectives: {perf_capacity: maximize}\n")
    result = CliRunner().invoke(cli, ["check", str(spec)])
    assert result.exit_code == 1 and "Traceback" not in result.stderr
    assert ("objectives: perf_capacity needs requests that arrive on their own, but model "
            "'acc' is stateful") in result.stderr


def test_several_entry_models_are_refused_a_capacity_objective() -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec({"model": {"name": ["a", "b"], "path": "."},
                    "objectives": {"perf_capacity": "maximize"}})
    assert "several entry models (a, b) are judged by one score, weighted_gain" in str(
        caught.value)
