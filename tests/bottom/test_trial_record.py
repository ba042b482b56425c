"""The trial record (tracker/trial_record.py) and the tag names (tracker/tags.py)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import optuna
import pytest

from tracker import tags, trial_record
from tracker.trial_record import Attr, TrialRecord

PKG = Path(__file__).resolve().parents[2] / "tracker"


@pytest.fixture()
def study() -> optuna.Study:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.create_study(directions=["maximize"])


def test_a_measured_trial_reads_back(study: optuna.Study) -> None:
    trial = study.ask()
    trial_record.write_started(trial, "run-1")
    trial_record.write_worker(trial, "host:12")
    trial_record.write_measured(trial, {"perf_latency_p99.max": 0.25, "perf_throughput.min": -0.5},
                               feasible=False, concurrency=8, metrics={"perf_throughput": 100.0},
                               measurements=4)
    study.tell(trial, [100.0])
    frozen = study.trials[0]
    record = TrialRecord.of(frozen)
    assert record == TrialRecord(run_id="run-1", worker="host:12", constraints=[0.25, -0.5],
                                 feasible=False, concurrency=8,
                                 metrics={"perf_throughput": 100.0}, measurements=4)
    assert frozen.constraints == {"perf_latency_p99.max": 0.25,  # what the samplers see
                                  "perf_throughput.min": -0.5}
    assert not record.exact and not record.baseline


def test_reuse_failure_and_interruption(study: optuna.Study) -> None:
    first = study.ask()
    trial_record.write_measured(first, {"perf_latency_p99.max": -0.1}, feasible=True, concurrency=4,
                               metrics={"perf_throughput": 50.0}, measurements=3)
    study.tell(first, [50.0])
    source = study.trials[0]
    second = study.ask()
    trial_record.write_reused(second, source.number, source, source.constraints)
    study.tell(second, [50.0])
    reused = TrialRecord.of(study.trials[1])
    assert (reused.duplicate_of, reused.measurements, reused.feasible, reused.concurrency) == (
        0, 0, True, 4)
    assert study.trials[1].constraints == {"perf_latency_p99.max": -0.1}
    third = study.ask()
    trial_record.write_failed(third, "x" * 3000)
    study.tell(third, state=optuna.trial.TrialState.FAIL)
    failed = TrialRecord.of(study.trials[2])
    assert failed.fail_reason == "x" * 2000 and failed.measurements == 0
    fourth = study.ask()
    trial_record.write_abandoned(fourth, interrupted=True, reason="ignored")
    study.tell(fourth, state=optuna.trial.TrialState.FAIL)
    assert TrialRecord.of(study.trials[3]).interrupted
    assert TrialRecord.of(study.trials[3]).fail_reason is None


def test_feasibility_falls_back_to_the_stored_constraints(study: optuna.Study) -> None:
    study.enqueue_trial({}, user_attrs={Attr.BASELINE: True, Attr.EXACT_PARAMS: {"a": 1}})
    trial = study.ask()
    trial.set_constraint("perf_latency_p99.max", 0.5)  # written before the attribute existed
    study.tell(trial, [1.0])
    record = TrialRecord.of(study.trials[0])
    assert record.feasible is False and record.baseline and record.exact


TAG = re.compile(r"^(tracker|mlflow)\.[a-z_]+(\.[a-z_]+)*$")
#: container labels (docker.py) and module names are not MLflow tags
NOT_TAGS = {"tracker.managed", "tracker.owner_pid", "tracker.owner_start", "tracker.host",
            "tracker.triton.backends", "tracker.triton.binary"}


def _literals(path: Path) -> set[str]:
    return {node.value for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and TAG.match(node.value)}


def test_every_tag_name_is_in_the_tags_module() -> None:
    known = {v for k, v in vars(tags).items() if k.isupper() and isinstance(v, str)}
    modules = {".".join(p.relative_to(PKG.parent).with_suffix("").parts)
               for p in PKG.rglob("*.py")}
    stray = {}
    for path in PKG.rglob("*.py"):
        if path.name == "tags.py":
            continue
        found = {s for s in _literals(path) - NOT_TAGS - modules
                 if not s.startswith(("mlflow.entities", "mlflow.tracking"))}
        if found - known:
            stray[str(path.relative_to(PKG))] = sorted(found - known)
    assert not stray, f"tag names written outside tracker/tags.py: {stray}"


def test_the_tag_check_sees_a_stray_tag(tmp_path: Path) -> None:
    fake = tmp_path / "x.py"
    fake.write_text('TAGS = {"tracker.brand_new": 1}\n')
    assert _literals(fake) == {"tracker.brand_new"}
