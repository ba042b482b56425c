"""Helpers for the tuning tests: a fast study spec on the quickstart model, and looks into the
Optuna and MLflow stores a study wrote."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import optuna
import psutil
import yaml
from click.testing import CliRunner
from mlflow import MlflowClient

from tests.support import models
from tracker import tags
from tracker.cli import cli
from tracker.tracking import runs

REPO = Path(__file__).resolve().parents[2]
TRACKER = str(Path(sys.executable).parent / "tracker")


def build_quickstart(folder: Path) -> Path:
    """The quickstart ONNX model, made by the project's own make_model.py."""
    out = folder / "model.onnx"
    if not out.exists():
        subprocess.run([sys.executable, str(REPO / "projects" / "quickstart" / "make_model.py"),
                        str(out)], check=True, capture_output=True)
    return out


def write_spec(folder: Path, model: Path, space: dict[str, Any], *, n_trials: int,
               sampler: str = "grid", name: str = "quick", **extra: Any) -> Path:
    """A study spec that measures fast: two concurrency levels, 200 ms windows, no
    confirmation round (``confirm={...}`` sets one)."""
    spec: dict[str, Any] = {
        "model": {"name": name, "path": str(model)},
        "load": {"concurrency": [1, 4], "window_ms": 200, "max_tries": 4,
                 "warmup_requests": 5},
        "objectives": {"perf_throughput": "maximize"},
        "constraints": {"perf_latency_p99": {"max": 1000}},
        "search": {"sampler": sampler, "n_trials": n_trials, "seed": 3, "space": space},
        "confirm": {"enabled": False},  # tests/confirm/test_confirm_tune.py turns it on
    }
    for section, values in extra.items():
        spec.setdefault(section, {}).update(values)
    path = folder / "study.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def trials(storage: str, name: str = "quick") -> list[optuna.trial.FrozenTrial]:
    return optuna.load_study(study_name=name,
                             storage=optuna.storages.RDBStorage(storage)).get_trials()


def all_runs(uri: str) -> list[Any]:
    client = MlflowClient(uri)
    exps = [e.experiment_id for e in client.search_experiments()]
    return list(client.search_runs(exps, max_results=1000))


def owned_servers(owner_pid: int) -> list[int]:
    """tritonserver processes started by process ``owner_pid`` (TRACKER_OWNER_PID)."""
    found = []
    for proc in psutil.process_iter(["name"]):
        try:
            if proc.info["name"] == "tritonserver" and \
                    proc.environ().get("TRACKER_OWNER_PID") == str(owner_pid):
                found.append(proc.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def wait_for(predicate: Any, timeout_s: float, what: str, proc: Any = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        if proc is not None and proc.poll() is not None:
            out = proc.stdout.read()[-3000:] if proc.stdout is not None else ""
            raise AssertionError(f"process exited ({proc.returncode}) before {what}: {out}")
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")


def env_for(tmp: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["MLFLOW_TRACKING_URI"] = f"sqlite:///{tmp / 'mlflow.db'}"
    env.pop("MLFLOW_RUN_ID", None)
    env.pop("MLFLOW_EXPERIMENT_ID", None)
    return env


def measured_trial_runs(uri: str, parent_run_id: str) -> list[Any]:
    """The study's trial runs that measured a configuration (no repeats, no failures)."""
    return [r for r in all_runs(uri) if r.data.tags.get(runs.PARENT_TAG) == parent_run_id
            and r.data.tags.get(tags.ROLE, "trial") == "trial"
            and tags.DUPLICATE_OF not in r.data.tags and "perf_throughput" in r.data.metrics]


def refused_by_check(folder: Path, extra: str) -> str:
    """``tracker check`` of a spec for a batching ONNX model plus the YAML ``extra``, which
    it must refuse cleanly (exit 1, no traceback): its stderr."""
    models.dynamic_batch(folder / "model.onnx")
    path = folder / "study.yaml"
    path.write_text("model: {name: quickstart, path: model.onnx}\n" + extra + "\n")
    result = CliRunner().invoke(cli, ["check", str(path)])
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.stderr
    return str(result.stderr)
