"""``tracker watch``: poll the registry and deploy what enters Production.

Every ``interval`` seconds, for each watched registered model (default: every model tagged
``tracker.flavor=triton``), the watcher reads the version in the ``Production`` stage (the
newest, if several) and the version the ``production`` alias points at. When either changed
since the last poll, the newest of the changed ones is deployed (unless it already serves),
so a stage transition or an alias set in the MLflow UI deploys it.

Restart-safe and idempotent: what the watcher has seen is kept on the registered model (tag
``tracker.watch.seen``, JSON ``{"stage": "3", "alias": "3"}``) and what was deployed on the
versions (``tracker.deploy.status``); a restarted watcher redoes nothing. ``tracker promote``
updates the seen tag after its own deployment, so the watcher does not repeat it. A version
whose deployment failed is tried again only when it enters the stage or gets the alias again;
after a failure the stage and alias go back to the version that still serves.
Each action is one log line.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import mlflow
from mlflow.entities.model_registry import ModelVersion
from mlflow.exceptions import MlflowException

from tracker import tags
from tracker.deploy import service
from tracker.deploy.settings import TargetSettings
from tracker.errors import DeployError, TrackerError
from tracker.tracking import flavor, registry

SEEN_TAG = tags.WATCH_SEEN
NAME_TAG = tags.DEPLOY_NAME


@dataclass(frozen=True)
class Action:
    """One thing the watcher did."""

    model: str
    version: int
    trigger: str          # "stage" | "alias" | "stage+alias"
    ok: bool
    message: str


def deployment_name(client: mlflow.MlflowClient, registered: str) -> str:
    """The Triton model name a registered model deploys as: its ``tracker.deploy.name`` tag
    (``tracker promote`` sets it to the spec's model name), else the registered name."""
    try:
        tags = client.get_registered_model(registered).tags
    except MlflowException as exc:
        raise DeployError(f"cannot read registered model {registered!r}: {exc.message}") from exc
    return flavor.validate_model_name(tags.get(NAME_TAG) or registered)


def read_seen(client: mlflow.MlflowClient, registered: str) -> dict[str, str | None]:
    try:
        raw = client.get_registered_model(registered).tags.get(SEEN_TAG)
        seen = json.loads(raw) if raw else {}
    except (MlflowException, ValueError):
        seen = {}
    return {"stage": seen.get("stage"), "alias": seen.get("alias")}


def current(client: mlflow.MlflowClient, registered: str, *, stage: str,
            alias: str) -> tuple[ModelVersion | None, ModelVersion | None]:
    """(newest version in ``stage``, version of ``alias``)."""
    in_stage = registry.versions_in_stage(client, registered, stage)
    return (in_stage[-1] if in_stage else None,
            registry.version_for_alias(client, registered, alias))


def record_seen(client: mlflow.MlflowClient, registered: str, *, stage: str = registry.PRODUCTION,
                alias: str = registry.PRODUCTION_ALIAS) -> None:
    """Mark the registry's current stage/alias versions as handled."""
    in_stage, aliased = current(client, registered, stage=stage, alias=alias)
    value = json.dumps({"stage": None if in_stage is None else str(in_stage.version),
                        "alias": None if aliased is None else str(aliased.version)})
    try:
        client.set_registered_model_tag(registered, SEEN_TAG, value)
    except MlflowException as exc:
        raise DeployError(f"cannot tag registered model {registered!r}: {exc.message}") from exc


class Watcher:
    """Polls the registry and deploys (see the module docstring)."""

    def __init__(self, settings: TargetSettings, *, models: Sequence[str] = (),
                 stage: str = registry.PRODUCTION, alias: str = registry.PRODUCTION_ALIAS,
                 log: Callable[[str], None] = print) -> None:
        self.settings = settings
        self.models = list(models)
        self.stage = registry.validate_stage(stage)
        self.alias = registry.validate_alias(alias)
        self.log = log
        self._last_error = ""

    def _watched(self, client: mlflow.MlflowClient) -> list[str]:
        return self.models or registry.triton_models(client)

    def poll_once(self) -> list[Action]:
        """One look at the registry; deploys at most one version per registered model."""
        client = mlflow.MlflowClient()
        actions: list[Action] = []
        for registered in self._watched(client):
            action = self._poll_model(client, registered)
            if action is not None:
                actions.append(action)
        return actions

    def _poll_model(self, client: mlflow.MlflowClient, registered: str) -> Action | None:
        seen = read_seen(client, registered)
        in_stage, aliased = current(client, registered, stage=self.stage, alias=self.alias)
        changed: dict[int, list[str]] = {}
        if in_stage is not None and str(in_stage.version) != seen["stage"]:
            changed.setdefault(int(in_stage.version), []).append("stage")
        if aliased is not None and str(aliased.version) != seen["alias"]:
            changed.setdefault(int(aliased.version), []).append("alias")
        if not changed:
            return None
        version = max(changed)
        trigger = "+".join(changed[version])
        target = registry.get_version(client, registered, version)
        action: Action | None = None
        if registry.deploy_status(target) != registry.SERVING:
            name = deployment_name(client, registered)
            uri = f"models:/{registered}/{version}"
            try:
                info = service.deploy(self.settings, name, uri)
                action = Action(registered, version, trigger, True,
                                f"deployed {uri} as {name!r} version {info['version']}")
            except TrackerError as exc:
                back = registry.restore_serving(client, registered, stage=self.stage,
                                                alias=self.alias)
                undo = "" if back is None else f" (stage/alias back on v{back.version})"
                action = Action(registered, version, trigger, False, str(exc) + undo)
            self.log(f"{_now()} {registered} v{version} ({trigger}): "
                     + ("ok, " if action.ok else "FAILED, ") + action.message)
        record_seen(client, registered, stage=self.stage, alias=self.alias)
        return action

    def run(self, interval_s: float, *, stop: threading.Event | None = None,
            max_polls: int | None = None) -> None:
        """Poll until ``stop`` is set (or ``max_polls`` polls). A failed poll (registry or server
        unreachable) is logged once per distinct error and retried at the next interval."""
        if interval_s <= 0:
            raise DeployError(f"interval must be > 0 seconds, but got {interval_s:g}")
        stop = stop or threading.Event()
        polls = 0
        self.log(f"{_now()} watching {self.models or 'models tagged tracker.flavor=triton'} "
                 f"(stage {self.stage}, alias {self.alias!r}) -> triton:/{self.settings.url} "
                 f"{self.settings.repository}, every {interval_s:g} s")
        while not stop.is_set():
            try:
                self.poll_once()
                self._last_error = ""
            except (TrackerError, MlflowException, OSError) as exc:
                if str(exc) != self._last_error:
                    self.log(f"{_now()} poll failed (retrying every {interval_s:g} s): {exc}")
                    self._last_error = str(exc)
            polls += 1
            if max_polls is not None and polls >= max_polls:
                return
            stop.wait(interval_s)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S")
