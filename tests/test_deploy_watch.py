"""`tracker watch`: a stage transition or an alias set in the registry (as the MLflow UI does)
deploys the version; idempotent, restart-safe, one log line per action. Real Triton (explicit
mode) and real sqlite registry."""

from __future__ import annotations

from pathlib import Path

import mlflow
import models
import pytest
from click.testing import CliRunner
from deploy_support import NAME, V1, V2, trial_model_dir
from deploy_support import serving as serving  # the fixture, re-exported

from tracker.cli import cli
from tracker.deploy.settings import resolve_settings
from tracker.deploy.watch import NAME_TAG, Watcher
from tracker.tracking import flavor, registry
from tracker.triton.server.local import LocalTritonServer

pytestmark = pytest.mark.triton
REG = "watched"


def register(client: mlflow.MlflowClient, tmp: Path, onnx: Path, values: dict[str, object],
             *, broken: bool = False) -> str:
    exp = client.get_experiment_by_name("w")
    exp_id = exp.experiment_id if exp else client.create_experiment("w")
    run = client.create_run(exp_id).info.run_id
    n = len(list(tmp.glob("trial*")))
    logged = flavor.log_triton_model(
        trial_model_dir(tmp / f"trial{n}", onnx, values, broken=broken), run)
    mv = registry.register_version(client, REG, registry.VersionRequest(
        source=logged.model_uri, run_id=run, model_id=logged.model_id))
    client.set_registered_model_tag(REG, NAME_TAG, NAME)
    return str(mv.version)


def served(server: LocalTritonServer) -> list[str]:
    return [m["version"] for m in server.client().repository_index()
            if m["name"] == NAME and m.get("state") == "READY"]


def test_watch_deploys_stage_and_alias_changes_once(
        tmp_path: Path, mlflow_uri: str, serving: tuple[LocalTritonServer, Path]) -> None:
    server, _ = serving
    onnx = models.dynamic_batch(tmp_path / "tiny.onnx")
    client = mlflow.MlflowClient(mlflow_uri)
    v1 = register(client, tmp_path, onnx, V1)
    v2 = register(client, tmp_path, onnx, V2)
    lines: list[str] = []
    watcher = Watcher(resolve_settings(), log=lines.append)
    assert watcher.poll_once() == []  # nothing in Production yet

    registry.transition_stage(client, REG, v1, "Production")  # what the UI's button does
    [action] = watcher.poll_once()
    assert (action.version, action.trigger, action.ok) == (1, "stage", True)
    assert served(server) == ["1"] and len(lines) == 1 and "v1 (stage): ok" in lines[0]

    # idempotent, and a restarted watcher redoes nothing
    assert watcher.poll_once() == []
    assert Watcher(resolve_settings(), log=lines.append).poll_once() == []
    assert len(lines) == 1

    client.set_registered_model_alias(REG, "production", v2)
    [action] = watcher.poll_once()
    assert (action.version, action.trigger, action.ok) == (2, "alias", True)
    assert served(server) == ["2"]
    registry.transition_stage(client, REG, v2, "Production")  # the stage catches up: no action
    assert watcher.poll_once() == []
    assert len(lines) == 2

    v3 = register(client, tmp_path, onnx, V2, broken=True)
    registry.transition_stage(client, REG, v3, "Production")
    [action] = watcher.poll_once()
    assert not action.ok and "version 2 still serves" in action.message
    assert served(server) == ["2"]
    versions = {str(v.version): v for v in registry.all_versions(client, REG)}
    assert versions[v3].tags[registry.TAG_DEPLOY_STATUS] == "failed"
    assert versions[v3].current_stage == "Archived"  # the registry says what serves
    assert versions[v2].current_stage == "Production"
    assert watcher.poll_once() == []  # a failed version is not retried in a loop
    assert len(lines) == 3 and "FAILED" in lines[2]

    # the command: one poll, nothing new to do, exit 0
    result = CliRunner().invoke(cli, ["watch", "--once", "--interval", "1"])
    assert result.exit_code == 0, result.output
    assert "watching" in result.output and "ok," not in result.output
