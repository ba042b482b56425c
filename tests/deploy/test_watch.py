"""`tracker watch`: a stage transition or an alias set in the registry (as the MLflow UI does)
deploys the version, and afterwards both pointers name the version that serves; idempotent,
restart-safe, one log line per action. Real Triton (explicit mode, one server for the module,
each test under its own deployment name) and a real sqlite registry, driven through MLflow's
own client."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import mlflow
import pytest
from click.testing import CliRunner
from mlflow.deployments import get_deploy_client

from tests.support import models
from tests.support.deploy import NAME, V1, V2, Study, spec_file, trial_model_dir
from tests.support.deploy import module_server as module_server  # the fixtures, re-exported
from tests.support.deploy import shared_serving as shared_serving
from tracker.cli import cli
from tracker.deploy.settings import resolve_settings
from tracker.deploy.watch import NAME_TAG, SEEN_TAG, Watcher
from tracker.tracking import flavor, registry
from tracker.triton import model_config
from tracker.triton.server.local import LocalTritonServer

pytestmark = pytest.mark.triton
REG = "watched"
V3 = {"max_batch_size": 4, "instance_group.count": 1}
#: MLflow's own stage API warns (deprecated since 2.9); the legacy UI's button still calls it
STAGE_API_WARNING = "ignore:.*transition_model_version_stage.*:FutureWarning"


def register(client: mlflow.MlflowClient, tmp: Path, onnx: Path, values: dict[str, Any],
             *, broken: bool = False, reg: str = REG, name: str = NAME) -> str:
    """A new version of ``reg`` made with MLflow's own client (deployed as ``name``)."""
    exp = client.get_experiment_by_name("w")
    exp_id = exp.experiment_id if exp else client.create_experiment("w")
    run = client.create_run(exp_id).info.run_id
    n = len(list(tmp.glob("trial*")))
    logged = flavor.log_triton_model(
        trial_model_dir(tmp / f"trial{n}", onnx, values, broken=broken), run)
    if reg == REG:
        mv = registry.register_version(client, reg, registry.VersionRequest(
            source=logged.model_uri, run_id=run, model_id=logged.model_id))
        client.set_registered_model_tag(reg, NAME_TAG, name)
    else:
        mv = client.create_model_version(reg, logged.model_uri, run_id=run,
                                         model_id=logged.model_id)
    return str(mv.version)


def served(server: LocalTritonServer, name: str = NAME) -> list[str]:
    return [m["version"] for m in server.client().repository_index()
            if m["name"] == name and m.get("state") == "READY"]


def actions(lines: list[str]) -> list[str]:
    return [line for line in lines if "): ok, " in line or "): FAILED, " in line]


def watch_once() -> str:
    result = CliRunner().invoke(cli, ["watch", "--once", "--interval", "1"])
    assert result.exit_code == 0, result.output
    return result.output


def assert_registry_tells_what_serves(client: mlflow.MlflowClient, server: LocalTritonServer,
                                      reg: str, name: str, version: str,
                                      max_batch_size: int, tmp: Path) -> None:
    """Triton serves ``version`` (its config), the alias and the stage name it, nothing else
    is in Production, ``models:/<reg>@production`` is that version's model, and the watcher's
    record says both pointers are handled."""
    assert served(server, name) == [version]
    assert server.client().model_config(name).max_batch_size == max_batch_size
    assert str(client.get_model_version_by_alias(reg, "production").version) == version
    in_production = [str(v.version) for v in client.search_model_versions(f"name = '{reg}'")
                     if v.current_stage == "Production"]
    assert in_production == [version]
    dl = flavor.load_model(f"models:/{reg}@production", tmp / f"dl-{name}-{version}")
    logged = model_config.parse(dl.entry.config_text)
    assert logged.max_batch_size == max_batch_size
    seen = json.loads(client.get_registered_model(reg).tags[SEEN_TAG])
    assert seen == {"stage": version, "alias": version}
    assert registry.get_version(client, reg, version).tags[registry.TAG_DEPLOY_STATUS] == \
        "serving"


def test_watch_deploys_stage_and_alias_changes_once(
        tmp_path: Path, mlflow_uri: str,
        shared_serving: tuple[LocalTritonServer, Path]) -> None:
    server, _ = shared_serving
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
    assert "alias 'production' unset -> v1" in action.message
    assert served(server) == ["1"] and len(actions(lines)) == 1
    assert "v1 (stage): ok" in actions(lines)[0]
    assert "watched: Triton 'tiny' serves v1" in lines[-1] and "(agree)" in lines[-1]

    # idempotent, and a restarted watcher redoes nothing
    assert watcher.poll_once() == []
    assert Watcher(resolve_settings(), log=lines.append).poll_once() == []
    assert len(actions(lines)) == 1

    client.set_registered_model_alias(REG, "production", v2)
    [action] = watcher.poll_once()
    assert (action.version, action.trigger, action.ok) == (2, "alias", True)
    assert "stage Production v1 -> v2" in action.message
    assert served(server) == ["2"]
    assert registry.get_version(client, REG, v1).current_stage == "Archived"
    registry.transition_stage(client, REG, v2, "Production")  # the stage is there already
    assert watcher.poll_once() == []
    assert len(actions(lines)) == 2

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
    assert len(actions(lines)) == 3 and "FAILED" in actions(lines)[2]

    # the command: one poll, nothing new to do, exit 0; at start it says what serves
    output = watch_once()
    assert "watching" in output and "ok," not in output
    assert "watched: Triton 'tiny' serves v2; registry: stage Production v2, alias " \
        "'production' v2" in output and "(agree)" in output


@pytest.mark.filterwarnings(STAGE_API_WARNING)
def test_legacy_stage_button_then_new_ui_alias_rollback(
        tmp_path: Path, mlflow_uri: str,
        shared_serving: tuple[LocalTritonServer, Path]) -> None:
    """Issue 25's sequence: promote --no-deploy, the stage moved by MLflow's own client (the
    legacy UI's button), then a rollback by the alias (MLflow 3's registry UI), each followed
    by `tracker watch --once`; at every step the registry names the version that serves."""
    server, _ = shared_serving
    reg, name = "ui-reg", "tiny-ui"
    onnx = models.dynamic_batch(tmp_path / "tiny.onnx")
    study = Study(tmp_path, onnx, mlflow_uri)
    spec = spec_file(tmp_path, onnx, study.storage, mlflow_uri, registered=reg)
    client = mlflow.MlflowClient(mlflow_uri)

    # 1. promote without deploying, then the watcher deploys v1
    study.add(V1, 100.0)
    promoted = CliRunner().invoke(cli, ["promote", str(spec), "--no-deploy", "--name", name])
    assert promoted.exit_code == 0, promoted.output
    assert served(server, name) == []
    output = watch_once()
    assert f"{reg} v1 (stage+alias): ok, deployed models:/{reg}/1" in output, output
    assert_registry_tells_what_serves(client, server, reg, name, "1", 8, tmp_path)

    # 2. a new version 2 moved to Production the way the legacy UI's stage button does it
    v2 = register(client, tmp_path, onnx, V2, reg=reg)
    client.transition_model_version_stage(reg, v2, "Production", archive_existing_versions=True)
    output = watch_once()
    assert f"{reg} v2 (stage): ok" in output and "alias 'production' v1 -> v2" in output, output
    assert_registry_tells_what_serves(client, server, reg, name, "2", 16, tmp_path)
    assert registry.get_version(client, reg, 1).current_stage == "Archived"

    # 3. the rollback MLflow 3's registry UI offers: the alias back on version 1
    client.set_registered_model_alias(reg, "production", "1")
    output = watch_once()
    assert f"{reg} v1 (alias): ok" in output and "stage Production v2 -> v1" in output, output
    assert_registry_tells_what_serves(client, server, reg, name, "1", 8, tmp_path)
    assert registry.get_version(client, reg, 2).current_stage == "Archived"
    assert "ok," not in watch_once()  # handled: a second look does nothing

    # `tracker status` shows the same on demand
    shown = CliRunner().invoke(cli, ["status", "--model", reg])
    assert shown.exit_code == 0, shown.output
    head, _, v2_row, v1_row = shown.output.splitlines()
    assert head == (f"{reg}: Triton {name!r} serves v1; registry: stage Production v1, alias "
                    "'production' v1, tracker.deploy.status=serving v1 (agree)")
    assert v2_row.split()[:3] == ["2", "Archived", "-"] and v2_row.split()[3] == "replaced"
    assert v1_row.split()[:4] == ["1", "Production", "production", "serving"]


@pytest.mark.filterwarnings(STAGE_API_WARNING)
def test_conflicting_stage_and_alias_changes_the_alias_wins(
        tmp_path: Path, mlflow_uri: str,
        shared_serving: tuple[LocalTritonServer, Path]) -> None:
    """Between two polls the stage goes to v3 and the alias to v2: v2 is deployed and the
    stage follows it (docs/deploy.md: the alias wins, whichever version is newer).
    `mlflow deployments update` moves both pointers too; a pointer moved while a deployment
    runs is left for the next poll."""
    server, _ = shared_serving
    reg, name = "conflict-reg", "tiny-conflict"
    onnx = models.dynamic_batch(tmp_path / "tiny.onnx")
    study = Study(tmp_path, onnx, mlflow_uri)
    spec = spec_file(tmp_path, onnx, study.storage, mlflow_uri, registered=reg)
    client = mlflow.MlflowClient(mlflow_uri)
    study.add(V1, 100.0)
    promoted = CliRunner().invoke(cli, ["promote", str(spec), "--name", name])
    assert promoted.exit_code == 0, promoted.output
    assert_registry_tells_what_serves(client, server, reg, name, "1", 8, tmp_path)
    v2 = register(client, tmp_path, onnx, V2, reg=reg)
    v3 = register(client, tmp_path, onnx, V3, reg=reg)

    # the stage goes to the newer v3, the alias to v2: the alias wins, though older
    client.transition_model_version_stage(reg, v3, "Production", archive_existing_versions=True)
    client.set_registered_model_alias(reg, "production", v2)
    output = watch_once()
    assert (f"{reg}: conflict: stage Production moved to v3 and alias 'production' to v2 since "
            "the last look; the alias wins") in output, output
    assert f"{reg} v2 (alias): ok" in output and "stage Production v3 -> v2" in output
    assert_registry_tells_what_serves(client, server, reg, name, "2", 16, tmp_path)
    assert registry.get_version(client, reg, v3).current_stage == "Archived"

    # `mlflow deployments update` of version 3: both pointers follow, the watcher has nothing
    target: Any = get_deploy_client("triton")  # type: ignore[no-untyped-call]
    got = target.update_deployment(name, f"models:/{reg}/{v3}")
    assert got["version"] == 3
    assert_registry_tells_what_serves(client, server, reg, name, "3", 4, tmp_path)
    assert "ok," not in watch_once()

    # the stage moves to v2; while v2 is being deployed someone sets the alias to v1
    client.transition_model_version_stage(reg, v2, "Production", archive_existing_versions=True)
    lines: list[str] = []

    def log(line: str) -> None:
        lines.append(line)
        if "version 2 serves" in line:  # the publisher's line: the switch is done
            client.set_registered_model_alias(reg, "production", "1")

    watcher = Watcher(resolve_settings(), models=[reg], log=log)
    [action] = watcher.poll_once()
    assert action.version == 2 and action.ok
    assert "alias 'production' moved to v1 meanwhile: left for the next poll" in action.message
    assert served(server, name) == ["2"]
    [action] = watcher.poll_once()  # the person's alias change is seen, not overwritten
    assert (action.version, action.trigger, action.ok) == (1, "alias", True)
    assert_registry_tells_what_serves(client, server, reg, name, "1", 8, tmp_path)
