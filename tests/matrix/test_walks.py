"""Each kind of model walked through the steps after the search, on real parts: one serving
Triton for the module, a study's own embedded Triton, MLflow and Optuna on sqlite.

A walk is ``tracker check`` and ``tracker check --outputs`` (the default served and asked twice),
one study (the default and one other configuration, the output check on, the confirmation on
with a small budget) whose ``tracker tune`` is killed with SIGKILL during its second trial and
run again with ``mlflow run`` of the project's main entry point (the killed trial is failed
and measured again, against the reference the default stored; ``mlflow run``'s own run joins
the study's parent run as a worker run, as a second worker's does), then:

1. the confirmation's design: paired (then ``tracker confirm --new`` with
   ``confirm.design: rounds`` confirms the same study in rounds), rounds (and why) for a BLS
   model, as ``tracker check`` says, which also refuses ``mlflow.pyfunc`` for each of these
   kinds (none is one ONNX file);
2. the parent run's report: ``report.html``, ``trials.csv`` and the plots;
3. ``tracker promote --force``: version 1 registered, deployed with its output check (the
   version carries the study's reference), and serving;
4. ``mlflow deployments predict`` against the serving Triton (a stateful model's rows are
   the steps of one sequence);
5. rollback: version 2 is version 1's files registered with the study's answers altered, so
   its deploy check fails; version 1 keeps serving and the alias stays on it;
6. ``tracker watch --once``: version 3 (version 1's files and answers) gets the production
   alias, as the registry UI does, and the watcher deploys it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlflow
import numpy as np
import optuna
import psutil
import pytest
import yaml
from click.testing import CliRunner
from mlflow.deployments import get_deploy_client

from tests.deploy.test_deploy_kinds import (
    COUNTER,
    COUNTER_CONFIG,
    DCOUNTER,
    DCOUNTER_CONFIG,
    ECHO,
    ECHO_CONFIG,
    PROMPT,
    STREAMER,
    STREAMER_CONFIG,
)
from tests.support.deploy import module_server as module_server  # the fixtures, re-exported
from tests.support.deploy import shared_serving as shared_serving
from tests.support.formats import prompts_file, python_model, python_scale_model
from tests.support.pipeline import bls_repository, ensemble_repository
from tests.tuning.test_tune_file_knobs import CONFIG as SLEEPER_CONFIG
from tests.tuning.test_tune_file_knobs import MODEL as SLEEPER
from tracker import tags
from tracker.cli import cli
from tracker.deploy import service, verify
from tracker.deploy.settings import resolve_settings
from tracker.errors import DeployError
from tracker.outputs import probes
from tracker.tracking import registry, runs
from tracker.triton.server.local import LocalTritonServer

pytestmark = pytest.mark.triton

ROOT = Path(__file__).resolve().parents[2]
AUTO = ROOT / "projects" / "auto_complete" / "batch_auto_complete"
X = np.arange(8, dtype=np.float32).reshape(2, 4)
Outputs = dict[str, Any]


@dataclass(frozen=True)
class Walk:
    """One kind's study: ``build`` writes the user's model(s) under a folder and returns the
    spec's ``model`` and ``load`` sections; ``predict`` is (model, inputs, what the outputs
    must be)."""

    kind: str      # the matrix's kind key (tests/matrix/table.py)
    entry: str     # the deployment's name: the (first) entry model
    build: Callable[[Path], tuple[dict[str, Any], dict[str, Any]]]
    space: dict[str, list[Any]]
    design: str    # the confirmation's design
    predict: tuple[str, dict[str, np.ndarray], Callable[[Outputs], bool]]
    check_outputs: bool = True  # False: tests/deploy/test_deploy_kinds.py asks it already


def _python_kind(user: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    return {"name": "pyscale", "path": str(python_scale_model(user))}, {}


def _auto(user: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    shutil.copytree(AUTO, user / "batch_auto_complete")
    return {"name": "batch_auto_complete", "path": str(user / "batch_auto_complete")}, {}


def _ensemble(user: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ensemble pipe = prep -> enet -> post: its ONNX step renamed from ``net``, which the
    BLS walk's callee is called on the same serving Triton (a model is one deployment's)."""
    repo = ensemble_repository(user / "repo")
    (repo / "net").rename(repo / "enet")
    for config, old, new in ((repo / "enet" / "config.pbtxt", 'name: "net"', 'name: "enet"'),
                             (repo / "pipe" / "config.pbtxt", 'model_name: "net"',
                              'model_name: "enet"')):
        config.write_text(config.read_text().replace(old, new))
    return {"name": "pipe", "path": str(repo)}, {}


def _labels(out: Outputs) -> bool:
    """The ensemble's post step: one class label per image."""
    labels = np.asarray(out["LABEL"]).ravel().tolist()
    return len(labels) == 2 and all(str(k).startswith("class_") for k in labels)


def _bls(user: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    return {"name": "bls", "path": str(bls_repository(user)), "composing": ["net"]}, {}


def _file_knobs(user: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    model = python_model(user, "sleeper", SLEEPER, SLEEPER_CONFIG)
    (model / "1" / "model.json").write_text(json.dumps({"delay_ms": 5}))
    return {"name": "sleeper", "path": str(model)}, {}


def _one(name: str, code: str, config: str, load: dict[str, Any] | None = None,
         ) -> Callable[[Path], tuple[dict[str, Any], dict[str, Any]]]:
    def build(user: Path) -> tuple[dict[str, Any], dict[str, Any]]:
        model = python_model(user, name, code, config)
        given = {"input_data": str(prompts_file(user))} if load is None else load
        return {"name": name, "path": str(model)}, given
    return build


def _entries(user: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    python_model(user, "wecho", ECHO, ECHO_CONFIG)
    python_scale_model(user, "wscale")
    return {"name": ["wecho", "wscale"], "path": str(user)}, {}


def _entries_decoupled(user: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    python_model(user, "wstreamer", STREAMER.replace("@SHIFT@", ""), STREAMER_CONFIG)
    python_model(user, "wecho2", ECHO, ECHO_CONFIG)
    return ({"name": ["wstreamer", "wecho2"], "path": str(user)},
            {"models": {"wstreamer": {"input_data": str(prompts_file(user))}}})


def _tokens(out: Outputs) -> bool:
    return bool(out["TOKEN"] == [[10], [11], [12]])


def _counted(out: Outputs) -> bool:
    """The counter's running sums of the steps 1, 2, 3 of one sequence."""
    return bool(np.asarray(out["OUTPUT0"]).ravel().tolist() == [1, 3, 6])


STEPS = {"INPUT0": np.array([[1], [2], [3]], dtype=np.int32)}  # one sequence, a step a row
STREAM_INPUTS = {"PROMPT": PROMPT, "MAX_TOKENS": np.array([3], dtype=np.int32)}
ECHO_X = np.array([1, 2, 3, 4], dtype=np.float32)

WALKS: dict[str, Walk] = {w.kind: w for w in (
    Walk("python", "pyscale", _python_kind, {"instance_group.count": [2]}, "paired",
         ("pyscale", {"INPUT0": X}, lambda out: np.allclose(out["OUTPUT0"], X * 2))),
    Walk("autocomplete", "batch_auto_complete", _auto, {"instance_group.count": [2]},
         "paired", ("batch_auto_complete", {"INPUT0": X, "INPUT1": X},
                    lambda out: np.allclose(out["OUTPUT0"], 2 * X))),
    Walk("decoupled", "wstream1", _one("wstream1", STREAMER.replace("@SHIFT@", ""),
                                       STREAMER_CONFIG),
         {"instance_group.count": [2]}, "paired", ("wstream1", STREAM_INPUTS, _tokens)),
    Walk("stateful", "wcounter", _one("wcounter", COUNTER, COUNTER_CONFIG.replace(
        '"counter"', '"wcounter"'), {"sequence": {"length": 3}}),
         {"instance_group.count": [2]}, "paired", ("wcounter", STEPS, _counted),
         check_outputs=False),
    Walk("stateful_decoupled", "wdcounter", _one("wdcounter", DCOUNTER, DCOUNTER_CONFIG.replace(
        '"dcounter"', '"wdcounter"'), {"sequence": {"length": 3}}),
         {"instance_group.count": [2]}, "paired", ("wdcounter", STEPS, _counted),
         check_outputs=False),
    Walk("ensemble", "pipe", _ensemble, {"prep/instance_group.count": [2]}, "paired",
         ("pipe", {"IMAGE": np.arange(32, dtype=np.uint8).reshape(2, 16)}, _labels)),
    Walk("bls", "bls", _bls, {"bls/instance_group.count": [2]}, "rounds",
         ("bls", {"INPUT0": np.ones((2, 8), dtype=np.float32)},
          lambda out: np.asarray(out["OUTPUT0"]).shape == (2, 4))),
    Walk("entries", "wecho", _entries, {"wecho/instance_group.count": [2]}, "paired",
         ("wscale", {"INPUT0": X}, lambda out: np.allclose(out["OUTPUT0"], X * 2))),
    Walk("entries_decoupled", "wstreamer", _entries_decoupled,
         {"wecho2/instance_group.count": [2]}, "paired",
         ("wecho2", {"X": ECHO_X}, lambda out: np.allclose(out["Y"], ECHO_X))),
    Walk("file_knobs", "sleeper", _file_knobs, {"model.json:delay_ms": [1]}, "paired",
         ("sleeper", {"INPUT0": ECHO_X}, lambda out: np.allclose(out["OUTPUT0"], ECHO_X))),
)}


def _spec(tmp: Path, uri: str, walk: Walk) -> Path:
    model, load = walk.build(tmp / "user")
    spec = tmp / "study.yaml"
    spec.write_text(yaml.safe_dump({
        "model": model,
        "load": {"concurrency": [1], "window_ms": 300, "max_tries": 4, "warmup_requests": 3,
                 "stability_pct": 50, **load},
        "search": {"sampler": "grid", "n_trials": 2, "seed": 1, "sweep": "full",
                   "storage": f"sqlite:///{tmp / 'optuna.db'}", "space": walk.space},
        "confirm": {"enabled": True, "top_k": 1, "rounds": 2, "min_rounds": 1,
                    "budget_s": 3},
        "mlflow": {"tracking_uri": uri, "experiment": walk.kind,
                   "registered_model": f"walk-{walk.kind}"},
    }, sort_keys=False))
    return spec


def _changed(values: np.ndarray) -> np.ndarray:
    """Every number one more, every string (a BYTES output) with a prefix."""
    if values.dtype == np.object_:
        return np.array([b"not " + bytes(v) for v in values.ravel()],
                        dtype=np.object_).reshape(values.shape)
    return values + 1


def _altered(reference: probes.ProbeSet) -> probes.ProbeSet:
    """The study's answers, every value changed: no version answers them."""
    return dataclasses.replace(reference, answers=[
        a if isinstance(a, str) else {k: _changed(v) for k, v in a.items()}
        for a in reference.answers])


def _register_like(client: mlflow.MlflowClient, name: str, first: Any, reference_run: str,
                   ) -> str:
    """A new version of ``name`` with version ``first``'s files and tolerance, checked
    against the answers stored on run ``reference_run``; its number."""
    made = registry.register_version(client, name, registry.VersionRequest(
        source=first.source, run_id=first.run_id, model_id=first.model_id,
        tags={tags.CHECK_REFERENCE: reference_run,
              tags.CHECK_TOLERANCE: first.tags[tags.CHECK_TOLERANCE]}))
    return str(made.version)


BEATS = ("--heartbeat-interval", "1", "--grace-period", "2")


def _running_second(storage: str) -> int | None:
    """The number of a RUNNING trial after the first that has its MLflow run, read straight
    from the sqlite file, read-only (a few milliseconds: a trial of a small model runs for
    about a second); None when there is none yet."""
    path = storage.removeprefix("sqlite:///")
    if not Path(path).exists():
        return None
    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True,
                                                timeout=1)) as db:
            found = db.execute(
                "SELECT t.number FROM trials t JOIN trial_user_attributes a "
                "ON a.trial_id = t.trial_id WHERE t.state = 'RUNNING' AND t.number >= 1 "
                "AND a.key = 'mlflow_run_id'").fetchone()
    except sqlite3.Error:  # the tuner is still creating its tables
        return None
    return None if found is None else int(found[0])


def _kill_in_second_trial(spec: Path, storage: str) -> int:
    """``tracker tune`` in its own process, killed with SIGKILL once its second trial runs
    with its Triton up; that trial's number."""
    log = spec.with_name("killed-tuner.log")
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "tracker.cli", "tune", str(spec),
                                 "--no-bar", *BEATS], stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                pytest.fail(f"the tuner stopped before its second trial:\n"
                            f"{log.read_text()[-3000:]}")
            running = _running_second(storage)
            tritons = [p for p in psutil.Process(proc.pid).children(recursive=True)
                       if "tritonserver" in p.name()] if running is not None else []
            if running is not None and tritons:
                os.kill(proc.pid, signal.SIGKILL)  # the tuner only: its Triton must follow it
                proc.wait()
                assert not psutil.wait_procs(tritons, timeout=15)[1], "its Triton survived it"
                return running
            time.sleep(0.02)
        pytest.fail("the tuner never ran a second trial")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _resume(spec: Path, walk: Walk, uri: str) -> None:
    """The killed study run again with ``mlflow run`` of the project's main entry point."""
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_RUN_ID",
                                                             "MLFLOW_EXPERIMENT_ID")}
    env["MLFLOW_TRACKING_URI"] = uri
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "mlflow"), "run", str(ROOT), "--env-manager", "local",
         "--experiment-name", walk.kind, "-P", f"spec={spec}", "-P", "heartbeat_interval=1",
         "-P", "grace_period=2"], cwd=spec.parent, env=env, capture_output=True, text=True,
        timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


def _confirm_in_rounds(spec: Path, runner: CliRunner) -> str:
    """``tracker confirm --new`` of the finished study with ``confirm.design: rounds``: a
    confirmation in interleaved rounds of a kind whose study confirmed in pairs; its output."""
    rounds = spec.with_name("study-rounds.yaml")
    doc = yaml.safe_load(spec.read_text())
    doc["confirm"]["design"] = "rounds"
    rounds.write_text(yaml.safe_dump(doc, sort_keys=False))
    confirmed = runner.invoke(cli, ["confirm", str(rounds), "--new"])
    assert confirmed.exit_code == 0, confirmed.output
    return confirmed.output


def _ready(server: LocalTritonServer, name: str) -> list[str]:
    return sorted(m["version"] for m in server.client().repository_index()
                  if m["name"] == name and m.get("state") == "READY")


@pytest.mark.parametrize("kind", list(WALKS))
def test_each_kind_walks_from_its_study_to_the_watcher(
        tmp_path: Path, mlflow_uri: str, shared_serving: tuple[LocalTritonServer, Path],
        kind: str) -> None:
    walk, (server, _repo) = WALKS[kind], shared_serving
    spec, runner = _spec(tmp_path, mlflow_uri, walk), CliRunner()
    registered = f"walk-{kind}"
    checked = runner.invoke(cli, ["check", str(spec)])
    assert checked.exit_code == 0, checked.output
    assert f"confirmation: {'paired' if walk.design == 'paired' else 'in rounds'}" in \
        checked.output, checked.output
    assert "mlflow.pyfunc: refused: " in checked.output, checked.output  # no ONNX file alone
    if walk.check_outputs:  # the default served and asked twice
        twice = runner.invoke(cli, ["check", str(spec), "--outputs"])
        assert twice.exit_code == 0, twice.output
        assert " the same twice: its outputs [" in twice.output, twice.output
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    killed = _kill_in_second_trial(spec, storage)
    _resume(spec, walk, mlflow_uri)
    study = optuna.load_study(study_name=optuna.get_all_study_names(storage)[0],
                              storage=storage)
    dead = study.trials[killed]
    retried = [t for t in study.trials if t.system_attrs.get("failed_trial") == killed]
    assert dead.state == optuna.trial.TrialState.FAIL, dead
    assert [t.state for t in retried] == [optuna.trial.TrialState.COMPLETE], study.trials
    assert retried[0].params == dead.params
    client = mlflow.MlflowClient()
    experiment = client.get_experiment_by_name(kind)
    parent = next(r for r in client.search_runs([experiment.experiment_id])
                  if r.data.tags.get(tags.ROLE) == "study"
                  and tags.SUPERSEDED_BY not in r.data.tags)
    assert parent.info.status == "FINISHED", parent.info
    # `mlflow run`'s own run joined the study's (left RUNNING by the kill) as a worker run
    launched = [r for r in client.search_runs([experiment.experiment_id])
                if r.data.tags.get("mlflow.project.entryPoint") == "main"]
    assert [(r.data.tags.get(tags.ROLE), r.data.tags.get(tags.STUDY_RUN_ID),
             r.info.status) for r in launched] == [
        ("worker", parent.info.run_id, "FINISHED")], [r.data.tags for r in launched]
    # 1. the design check said; 2. the report
    assert parent.data.tags[tags.CONFIRM_DESIGN] == walk.design, parent.data.tags
    if walk.design == "paired":  # the pairs were measured: their ratios are on the run
        ratios = parent.data.tags[tags.CONFIRM_PAIR_RATIOS].split(", ")
        assert all(float(r) > 0 for r in ratios), parent.data.tags
        # and a confirmation in rounds of the same study, as `confirm.design: rounds` asks
        said = _confirm_in_rounds(spec, runner)
        parent = client.get_run(parent.info.run_id)
        assert parent.data.tags[tags.CONFIRM_DESIGN] == "rounds", (said, parent.data.tags)
    top = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"report.html", "trials.csv", "plots"} <= top, top
    report = runs.read_file(client, parent.info.run_id, "report.html").decode()
    assert "<img" in report or "<svg" in report or "plot" in report

    # 3. promoted, deployed with its check, serving
    promoted = runner.invoke(cli, ["promote", str(spec), "--force"])
    assert promoted.exit_code == 0, promoted.output
    first = client.get_model_version(registered, "1")
    assert first.tags[registry.TAG_DEPLOY_STATUS] == "serving", first.tags
    assert first.tags.get(tags.CHECK_REFERENCE), first.tags
    assert _ready(server, walk.entry) == ["1"]

    # 4. mlflow deployments predict, through the serving Triton
    name, inputs, holds = walk.predict
    answered = get_deploy_client("triton").predict(name, inputs)["outputs"]
    assert holds(answered), answered

    # 5. rollback: a version whose answers differ from its study's is refused
    reference = probes.loads(runs.read_file(client, first.tags[tags.CHECK_REFERENCE],
                                            verify.ARTIFACT))
    other = client.create_run(experiment.experiment_id)
    stored = tmp_path / "altered" / "check"
    stored.mkdir(parents=True)
    (stored / "reference.npz").write_bytes(probes.dumps(_altered(reference)))
    client.log_artifact(other.info.run_id, str(stored / "reference.npz"), "check")
    second = _register_like(client, registered, first, other.info.run_id)
    with pytest.raises(DeployError) as refused:
        service.deploy(resolve_settings(), walk.entry, f"models:/{registered}/{second}")
    message = str(refused.value)
    assert verify.STEP in message and "version 1 still serves" in message, message
    assert _ready(server, walk.entry) == ["1"]
    assert str(client.get_model_version_by_alias(registered, "production").version) == "1"

    # 6. the alias moved to version 3 (version 1 again), the watcher deploys it
    third = _register_like(client, registered, first, first.tags[tags.CHECK_REFERENCE])
    client.set_registered_model_alias(registered, "production", third)
    watched = runner.invoke(cli, ["watch", "--once", "--model", registered])
    assert watched.exit_code == 0, watched.output
    assert f"{registered} v{third} (alias): ok" in watched.output, watched.output
    assert _ready(server, walk.entry) == [third]
    assert holds(get_deploy_client("triton").predict(name, inputs)["outputs"])
