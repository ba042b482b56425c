"""Faults injected into a deployment on a real Triton (one server for the module, one
deployment name per case) with a real sqlite registry, while a client sends requests without
a version: SIGTERM, SIGINT and SIGKILL at each step of the deployment, a version that fails its
check, a registry that is down after the switch, and two deployments at once.

After each fault (and, after a SIGKILL, after the next transaction on the repository, which
completes what the killed one left) the invariant holds: Triton serves exactly one version of
the model, its config.pbtxt lists only that version, no shadow and no journal is left, the
registry's stage, alias and ``serving`` tag name that version, and no client request was
answered by a version that had not passed its check. The table of these outcomes is in
docs/reliability.md."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import mlflow
import numpy as np
import onnxruntime as ort
import pytest

from tests.support import models
from tests.support.deploy import V1, V2, RequestLoop, trial_model_dir
from tests.support.deploy import module_server as module_server  # the fixtures, re-exported
from tests.support.deploy import shared_serving as shared_serving
from tests.support.deploy_faults import STEPS
from tracker import tags
from tracker.deploy import journal, service
from tracker.deploy.pointers import Pointers
from tracker.deploy.settings import resolve_settings
from tracker.deploy.shadow import SUFFIX
from tracker.outputs import probes
from tracker.outputs.probes import Answer, ProbeSet
from tracker.tracking import flavor, registry, runs
from tracker.triton import model_config
from tracker.triton.server.local import LocalTritonServer

pytestmark = pytest.mark.triton
ROOT = Path(__file__).resolve().parents[2]
#: MLflow's own stage API warns (deprecated since 2.9); promotion still moves the stage
STAGE_API_WARNING = "ignore:.*transition_model_version_stage.*:FutureWarning"
#: the steps before the check passed: a version stopped there never answers a client
BEFORE_CHECK = ("shadow-load", "check")
#: past the commit point: a signal waits for the end, a kill is finished by the next start
COMMITTED = ("finish", "registry")


def _register(client: mlflow.MlflowClient, tmp: Path, reg: str, values: dict[str, object],
              onnx: Path) -> int:
    exp = client.get_experiment_by_name("faults")
    exp_id = exp.experiment_id if exp else client.create_experiment("faults")
    run = client.create_run(exp_id).info.run_id
    n = len(list(tmp.glob("trial*")))
    logged = flavor.log_triton_model(trial_model_dir(tmp / f"trial{n}", onnx, values), run)
    mv = registry.register_version(client, reg, registry.VersionRequest(
        source=logged.model_uri, run_id=run, model_id=logged.model_id))
    return int(mv.version)


def _deploy_in_child(tmp: Path, step: str, fault: str, name: str, uri: str
                     ) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "tests.support.deploy_faults", step, fault,
                           name, uri], cwd=tmp, env=env, capture_output=True, text=True,
                          timeout=240, check=False)


def _ready(server: LocalTritonServer, name: str) -> list[int]:
    return sorted(int(m["version"]) for m in server.client().repository_index()
                  if m["name"] == name and m.get("state") == "READY")


def assert_invariant(server: LocalTritonServer, repo: Path, reg: str, name: str,
                     version: int) -> None:
    """Exactly ``version`` serves, on Triton, on disk and in the registry."""
    assert _ready(server, name) == [version]
    cfg = model_config.parse((repo / name / "config.pbtxt").read_text())
    assert list(cfg.version_policy.specific.versions) == [version]
    assert sorted(p.name for p in (repo / name).iterdir() if p.name.isdigit()) == [str(version)]
    assert not [m for m in server.client().repository_index() if m["name"].endswith(SUFFIX)]
    assert not list(repo.glob(f"*{SUFFIX}")) and not journal.left_behind(repo)
    client = mlflow.MlflowClient()
    serving = registry.serving_version(client, reg)
    assert serving is not None and int(serving.version) == version
    alias = registry.version_for_alias(client, reg, "production")
    assert alias is not None and int(alias.version) == version
    assert [int(v.version) for v in registry.versions_in_stage(client, reg, "Production")] \
        == [version]


def _version_of(result: object) -> str:
    return str(result.get_response().model_version)  # type: ignore[attr-defined]


CASES = [(step, "SIGTERM") for step in STEPS] + [(step, "SIGKILL") for step in STEPS] + [
    ("check", "SIGINT"), ("drop-old", "SIGINT"), ("registry", "registry-down")]


@pytest.mark.filterwarnings(STAGE_API_WARNING)
@pytest.mark.parametrize(("step", "fault"), CASES)
def test_a_fault_at_any_step_leaves_one_version_serving_everywhere(
        step: str, fault: str, tmp_path: Path,
        shared_serving: tuple[LocalTritonServer, Path]) -> None:
    server, repo = shared_serving
    name = f"f-{step}-{fault}".lower()
    reg = f"reg-{name}"
    onnx = models.dynamic_batch(tmp_path / "tiny.onnx")
    client = mlflow.MlflowClient()
    v1 = _register(client, tmp_path, reg, V1, onnx)
    v2 = _register(client, tmp_path, reg, V2, onnx)
    service.deploy(resolve_settings(), name, f"models:/{reg}/{v1}", pointers=Pointers())
    inputs = {"INPUT0": np.ones((1, 8), dtype=np.float32)}
    with RequestLoop(server.endpoints.grpc, name, inputs, _version_of) as loop:
        loop.wait_for(20)
        child = _deploy_in_child(tmp_path, step, fault, name, f"models:/{reg}/{v2}")
        if fault == "SIGKILL":
            assert child.returncode == -signal.SIGKILL, child.stdout + child.stderr
            lines: list[str] = []
            with service.transaction(resolve_settings(), lines.append):
                pass  # what the next deployment, delete or watcher poll does first
            assert any("interrupted deployment" in line or "pending is made" in line
                       or "registry update" in line for line in lines) or step in COMMITTED
        elif fault == "registry-down":
            assert child.returncode == 0, child.stdout + child.stderr
            assert "registry update pending" in child.stdout
            with service.transaction(resolve_settings(), print):
                pass  # the registry is back: the next transaction makes the update
        else:
            assert child.returncode == 128 + getattr(signal, fault), child.stdout + child.stderr
        loop.wait_for(20)
    expected = v2 if step in COMMITTED else v1
    assert_invariant(server, repo, reg, name, expected)
    assert not loop.failures, loop.failures[:3]
    if step in BEFORE_CHECK:
        assert set(loop.answers) == {str(v1)}, loop.answers  # v2 never answered
    assert set(loop.answers) <= {str(v1), str(v2)}


def _with_reference(client: mlflow.MlflowClient, reg: str, version: int, onnx_path: Path
                    ) -> None:
    """The study's reference answers (from onnxruntime, as the default configuration gave
    them) on a run, and ``version`` tagged with it as ``tracker promote`` tags a version."""
    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    inputs = [{"INPUT0": ("FP32", rng.random((1, 8), dtype=np.float32))} for _ in range(4)]
    answers: list[Answer] = [
        {"OUTPUT0": session.run(["OUTPUT0"], {"INPUT0": p["INPUT0"][1]})[0]} for p in inputs]
    run = client.create_run(client.get_experiment_by_name("faults").experiment_id).info.run_id
    runs.log_files(client, run, {probes.ARTIFACT: probes.dumps(
        ProbeSet(inputs, ["OUTPUT0"], answers))})
    client.set_model_version_tag(reg, str(version), tags.CHECK_REFERENCE, run)
    client.set_model_version_tag(reg, str(version), tags.CHECK_TOLERANCE,
                                 json.dumps({"rtol": 1e-4, "atol": 1e-5}))


class Order:
    """The versions that answered, in the order they answered."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def __call__(self, result: object) -> str:
        version = _version_of(result)
        self.seen.append(version)
        return version


@pytest.mark.filterwarnings(STAGE_API_WARNING)
@pytest.mark.parametrize("passes", [False, True], ids=["check-fails", "check-passes"])
def test_clients_see_only_what_passed_the_check_and_never_a_failed_request(
        passes: bool, tmp_path: Path, shared_serving: tuple[LocalTritonServer, Path]) -> None:
    server, repo = shared_serving
    name, reg = f"checked-{passes}".lower(), f"reg-checked-{passes}".lower()
    onnx_path = models.dynamic_batch(tmp_path / "tiny.onnx")
    client = mlflow.MlflowClient()
    v1 = _register(client, tmp_path, reg, V1, onnx_path)
    v2 = _register(client, tmp_path, reg, V2, onnx_path if passes
                   else models.negated(onnx_path, tmp_path / "altered.onnx"))
    _with_reference(client, reg, v2, onnx_path)
    service.deploy(resolve_settings(), name, f"models:/{reg}/{v1}", pointers=Pointers())
    order = Order()
    inputs = {"INPUT0": np.ones((1, 8), dtype=np.float32)}
    with RequestLoop(server.endpoints.grpc, name, inputs, order) as loop:
        loop.wait_for(20)
        child = _deploy_in_child(tmp_path, "check", "none", name, f"models:/{reg}/{v2}")
        loop.wait_for(20)
    assert child.returncode == (0 if passes else 1), child.stdout + child.stderr
    assert not loop.failures, loop.failures[:3]
    if passes:
        assert_invariant(server, repo, reg, name, v2)
        first_new = order.seen.index(str(v2))  # M, then N: never M again
        assert set(order.seen[:first_new]) == {str(v1)}
        assert set(order.seen[first_new:]) == {str(v2)}
    else:
        assert "comparing its answers with the study's reference" in child.stdout
        assert_invariant(server, repo, reg, name, v1)
        assert set(order.seen) == {str(v1)}, loop.answers  # the refused version answered none


@pytest.mark.filterwarnings(STAGE_API_WARNING)
def test_two_deployments_at_once_end_with_one_version_named_everywhere(
        tmp_path: Path, shared_serving: tuple[LocalTritonServer, Path]) -> None:
    server, repo = shared_serving
    name, reg = "raced", "reg-raced"
    onnx_path = models.dynamic_batch(tmp_path / "tiny.onnx")
    client = mlflow.MlflowClient()
    v1 = _register(client, tmp_path, reg, V1, onnx_path)
    v2 = _register(client, tmp_path, reg, V2, onnx_path)
    v3 = _register(client, tmp_path, reg, {**V1, "max_batch_size": 4}, onnx_path)
    service.deploy(resolve_settings(), name, f"models:/{reg}/{v1}", pointers=Pointers())
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    children = [subprocess.Popen(
        [sys.executable, "-m", "tests.support.deploy_faults", "check", "none", name,
         f"models:/{reg}/{v}"], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True) for v in (v2, v3)]
    try:
        outputs = [c.communicate(timeout=240)[0] for c in children]
    finally:
        for c in children:
            c.kill()
    assert [c.returncode for c in children] == [0, 0], outputs
    serving = registry.serving_version(client, reg)
    assert serving is not None and int(serving.version) in (v2, v3)
    assert_invariant(server, repo, reg, name, int(serving.version))
    assert server.client().model_config(name).max_batch_size == \
        (16 if int(serving.version) == v2 else 4)
