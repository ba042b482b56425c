"""`mlflow run` as a user runs the project: a git clone of it, driven from another folder.

``snapshot(folder)`` makes a git repository whose branch ``main`` holds this working tree
(tracked files and new ones git does not ignore: what would be committed), and a clone of it,
so ``--version main`` fetches and checks out exactly the code under test, as MLflow does for a
repository URI. ``mlflow_run`` runs the `mlflow` CLI and, on a timeout, stops every process it
started (tritonserver included) before failing.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import yaml
from mlflow import MlflowClient
from mlflow.entities import Run

from tracker import tags

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent  # mlflow, tracker, uv


def snapshot(folder: Path) -> Path:
    """A clone (``folder/clone``) of a repository (``folder/origin``) whose ``main`` is this
    working tree; the clone's path."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO,
                           capture_output=True, check=True).stdout.decode().split("\0")
    origin = folder / "origin"
    for name in filter(None, files):
        src = REPO / name
        if src.is_file():
            dst = origin / name
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_bytes(src.read_bytes())
            dst.chmod(src.stat().st_mode)
    git = ["git", "-c", "user.name=test", "-c", "user.email=test@example.invalid"]
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "snapshot"]):
        subprocess.run([*git, *args], cwd=origin, check=True, capture_output=True)
    subprocess.run(["git", "clone", "-q", str(origin), str(folder / "clone")], check=True,
                   capture_output=True)
    return folder / "clone"


def env_in(folder: Path) -> dict[str, str]:
    """The environment of a user in ``folder``: MLflow on ``folder/mlflow.db``, no experiment
    or run chosen, this venv's commands first on PATH."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("MLFLOW_") and k != "TRACKER_CALLER_DIR"}
    env["MLFLOW_TRACKING_URI"] = f"sqlite:///{folder / 'mlflow.db'}"
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    return env


def mlflow_run(args: list[str], cwd: Path, timeout_s: float,
               env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``mlflow run ARGS`` in ``cwd`` as a user there (``env`` added); every process it
    started is stopped (SIGTERM, then SIGKILL) when it overruns ``timeout_s``, then the test
    fails."""
    proc = subprocess.Popen([str(BIN / "mlflow"), "run", *args], cwd=cwd,
                            env={**env_in(cwd), **(env or {})},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _stop_tree(proc)
        out, err = proc.communicate()
        raise AssertionError(f"mlflow run {' '.join(args)} took over {timeout_s:g} s:\n"
                             f"{out[-3000:]}{err[-3000:]}") from None
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _stop_tree(proc: subprocess.Popen[str]) -> None:
    try:
        family = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    for p in family:
        with contextlib.suppress(psutil.Error):
            p.send_signal(signal.SIGTERM)
    _, alive = psutil.wait_procs(family, timeout=30)
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.kill()


def own_spec(folder: Path) -> Path:
    """A user's own project in ``folder/own``: the quickstart model's build script and a fast
    spec (two levels, 200 ms windows); the spec's path relative to ``folder``."""
    own = folder / "own"
    own.mkdir()
    (own / "make_model.py").write_bytes((REPO / "projects/quickstart/make_model.py").read_bytes())
    (own / "study.yaml").write_text(yaml.safe_dump({
        "model": {"name": "own", "path": "model.onnx", "build": "make_model.py"},
        "load": {"concurrency": [1, 4], "window_ms": 200, "max_tries": 4,
                 "warmup_requests": 5},
        "search": {"sampler": "grid", "n_trials": 2, "space": {"instance_group.count": [1, 2]}},
        "confirm": {"enabled": False}}))
    return Path("own/study.yaml")


def runs_in(folder: Path, experiment: str) -> list[Run]:
    """Every run of ``experiment`` in ``folder/mlflow.db`` (none when it does not exist)."""
    client = MlflowClient(f"sqlite:///{folder / 'mlflow.db'}")
    exp = client.get_experiment_by_name(experiment)
    return [] if exp is None else list(client.search_runs([exp.experiment_id],
                                                          max_results=1000))


def study_parents(found: list[Run]) -> list[Run]:
    return [r for r in found if r.data.tags.get(tags.ROLE) == "study"]


def children_of(found: list[Run], parent: Run) -> list[Run]:
    return [r for r in found if r.data.tags.get(tags.PARENT) == parent.info.run_id]
