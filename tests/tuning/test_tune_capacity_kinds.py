"""Capacity at the SLA for each kind of model beside an ONNX file (tests/matrix/table.py's
capacity column), end to end on the embedded tritonserver with MLflow and Optuna on sqlite:
each kind's model as the matrix walk builds it (tests/matrix/test_walks.py), one study of its
default with ``objectives: {perf_capacity: maximize}``, a closed-loop probe and a search of
at most two open-loop rates. A streaming model's SLA is on its time to first token.

What is asserted holds whatever the machine's load: the probe and each rate are steps of the
trial's run, the capacity is the highest rate that held (its bracket and probe count beside
it), and the trial is judged at that rate, whose SLA figures (and goodput) are logged."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from mlflow import MlflowClient

from tests.matrix.test_walks import WALKS
from tests.support.tune import measured_trial_runs
from tracker import tags
from tracker.invocation.session import TuneOptions
from tracker.tuning.tune import tune

pytestmark = pytest.mark.triton

#: the kinds whose capacity column these tests fill, and the SLA each is held to
SLA: dict[str, dict[str, Any]] = {
    "python": {"perf_latency_p99": {"max": 2000}},
    "autocomplete": {"perf_latency_p99": {"max": 2000}},
    "decoupled": {"perf_time_to_first_token_p99": {"max": 2000}},
    "ensemble": {"perf_latency_p99": {"max": 2000}},
    "bls": {"perf_latency_p99": {"max": 2000}},
    "file_knobs": {"perf_latency_p99": {"max": 2000}},
}
PROBE = 2  # the closed-loop probe's concurrency: the first step


def _spec(tmp: Path, uri: str, kind: str) -> Path:
    model, load = WALKS[kind].build(tmp / "user")
    spec = tmp / "study.yaml"
    spec.write_text(yaml.safe_dump({
        "model": model,
        "load": {"concurrency": [PROBE], "window_ms": 200, "max_tries": 3,
                 "warmup_requests": 3, "stability_pct": 50, "capacity_max_probes": 2,
                 "capacity_tolerance_pct": 50, **load},
        "objectives": {"perf_capacity": "maximize"},
        "constraints": SLA[kind],
        "search": {"sampler": "grid", "n_trials": 1, "seed": 1,
                   "storage": f"sqlite:///{tmp / 'optuna.db'}", "space": WALKS[kind].space},
        "confirm": {"enabled": False},
        "mlflow": {"tracking_uri": uri, "experiment": f"capacity-{kind}"},
    }, sort_keys=False))
    return spec


@pytest.mark.parametrize("kind", list(SLA))
def test_each_kinds_capacity_is_searched_at_its_sla(tmp_path: Path, mlflow_uri: str,
                                                     kind: str) -> None:
    result = tune(_spec(tmp_path, mlflow_uri, kind), TuneOptions(bar=False))
    [run] = measured_trial_runs(mlflow_uri, result.parent_run_id)
    got = run.data.metrics
    probes = int(got["perf_capacity_probes"])
    assert 1 <= probes <= 2, got
    stop = run.data.tags[tags.SWEEP_STOP]
    assert any(why in stop for why in ("bracketed", "step budget", "no rate")), stop
    client = MlflowClient(mlflow_uri)
    points = client.get_metric_history(run.info.run_id, "sweep/perf_throughput")
    steps = {m.step for m in points}  # the probe, then each reading (a failed rate's 2nd too)
    assert PROBE in steps and len(points) == probes + 1, points
    goodput = client.get_metric_history(run.info.run_id, "sweep/perf_goodput_pct")
    assert goodput and {m.step for m in goodput} <= steps - {PROBE}  # open-loop levels
    sla = next(iter(SLA[kind]))
    assert {m.step for m in client.get_metric_history(run.info.run_id, f"sweep/{sla}")} \
        == steps  # the SLA's figure measured at every step
    capacity = got["perf_capacity"]
    assert capacity == got["perf_capacity_low"]
    if capacity > 0:  # judged at the rate of its capacity, where the SLA held
        assert got["request_rate"] == capacity and got["feasible"] == 1.0, got
        assert got[sla] <= SLA[kind][sla]["max"] and "perf_goodput" in got, got
        assert got.get("perf_capacity_high", float("inf")) > capacity
