"""The MLflow model registry: register a trial's model, move it to a stage, set an alias, and
record on each version what happened when it was deployed.

What the registry holds for this project (names users and scripts may rely on):

- registered model tag ``tracker.flavor = triton``: the watcher looks after these models;
- version tags ``tracker.study``, ``tracker.trial``, ``tracker.run_id``, ``perf_throughput``,
  ``perf_latency_p99``, ``tracker.constraint`` (the constraint the trial met), set by
  ``tracker promote``; the version's description is the study's summary sentence;
- version tags ``tracker.deploy.status`` (``serving`` | ``replaced`` | ``failed`` |
  ``removed``), ``tracker.deploy.message``, ``tracker.deploy.target``, ``tracker.deploy.at``:
  what the last deployment of that version did. Exactly the version Triton serves carries
  ``serving``. When a deployment fails, :func:`restore_serving` moves the stage and the alias
  back to the version that still serves, so the registry keeps saying what serves.
"""

from __future__ import annotations

import re
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass

from mlflow import MlflowClient
from mlflow.entities.model_registry import ModelVersion
from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import RESOURCE_ALREADY_EXISTS, ErrorCode

from tracker import tags
from tracker.errors import DeployError

PRODUCTION = "Production"
PRODUCTION_ALIAS = "production"
STAGES = ("None", "Staging", "Production", "Archived")

# tag names: tracker/tags.py
MODEL_TAG_FLAVOR = tags.MODEL_FLAVOR
TAG_STUDY, TAG_TRIAL, TAG_RUN_ID = tags.STUDY, tags.TRIAL, tags.MODEL_RUN_ID
TAG_CONSTRAINT = tags.MODEL_CONSTRAINT
TAG_DEPLOY_STATUS, TAG_DEPLOY_MESSAGE = tags.DEPLOY_STATUS, tags.DEPLOY_MESSAGE
TAG_DEPLOY_TARGET, TAG_DEPLOY_AT = tags.DEPLOY_TARGET, tags.DEPLOY_AT

SERVING, REPLACED, FAILED, REMOVED = "serving", "replaced", "failed", "removed"
DEPLOY_STATUSES = (SERVING, REPLACED, FAILED, REMOVED)

# MLflow tag values are limited (5000 chars on most stores); Triton messages can be long.
_MAX_TAG = 4000
_REGISTERED_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+\-/ ]{0,255}$")
_ALIAS_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,254}$")


def validate_registered_name(name: str) -> str:
    """A registered model name we can put in a registry filter string safely."""
    if not _REGISTERED_NAME_RE.match(name or ""):
        raise DeployError("a registered model name must match [A-Za-z0-9_][A-Za-z0-9_.+-/ ]* "
                          f"(no quotes), but got {name!r}")
    return name


def validate_alias(alias: str) -> str:
    if not _ALIAS_RE.match(alias or "") or re.fullmatch(r"[vV]\d+|latest", alias):
        raise DeployError("an alias must match [A-Za-z_][A-Za-z0-9_-]* and must not be "
                          f"'latest' or look like a version ('v3'), but got {alias!r}")
    return alias


def validate_stage(stage: str) -> str:
    for known in STAGES:
        if stage.lower() == known.lower():
            return known
    raise DeployError(f"a stage must be one of {list(STAGES)}, but got {stage!r}")


@dataclass(frozen=True)
class VersionRequest:
    """What to register: ``source`` is the model's URI (``models:/<model_id>`` or
    ``runs:/<run>/model``); ``tags`` and ``description`` go on the new version."""

    source: str
    run_id: str | None = None
    model_id: str | None = None
    tags: Mapping[str, str] | None = None
    description: str | None = None


def _fail(what: str, exc: MlflowException) -> DeployError:
    return DeployError(f"{what}: {exc.message}")


def ensure_registered_model(client: MlflowClient, name: str) -> None:
    """Create the registered model (tagged ``tracker.flavor=triton``) when it is missing."""
    validate_registered_name(name)
    try:
        client.create_registered_model(name, tags={MODEL_TAG_FLAVOR: "triton"})
    except MlflowException as exc:
        if exc.error_code != ErrorCode.Name(RESOURCE_ALREADY_EXISTS):
            raise _fail(f"cannot create the registered model {name!r}", exc) from exc
        try:
            client.set_registered_model_tag(name, MODEL_TAG_FLAVOR, "triton")
        except MlflowException as exc2:
            raise _fail(f"cannot tag the registered model {name!r}", exc2) from exc2


def register_version(client: MlflowClient, name: str, request: VersionRequest) -> ModelVersion:
    """Register ``request.source`` as a new version of ``name`` (created when missing).

    The logged model ``request.model_id``'s tag ``tracker.artifact_sha256`` (the digest of its
    files, :func:`tracker.tracking.flavor.artifact_digest`) goes on the version too, unless
    ``request.tags`` sets it: a deployment checks its download against it."""
    ensure_registered_model(client, name)
    version_tags = {k: str(v)[:_MAX_TAG] for k, v in (request.tags or {}).items()}
    if request.model_id and tags.ARTIFACT_SHA256 not in version_tags:
        try:
            logged = client.get_logged_model(request.model_id)
        except MlflowException as exc:
            raise _fail(f"cannot read the logged model {request.model_id!r} to register it as "
                        f"a version of {name!r}", exc) from exc
        if digest := (logged.tags or {}).get(tags.ARTIFACT_SHA256):
            version_tags[tags.ARTIFACT_SHA256] = digest
    try:
        return client.create_model_version(
            name,
            request.source,
            run_id=request.run_id,
            tags=version_tags,
            description=request.description,
            model_id=request.model_id,
        )
    except MlflowException as exc:
        raise _fail(f"cannot register {request.source!r} as a version of {name!r}", exc) from exc


def transition_stage(client: MlflowClient, name: str, version: str | int, stage: str,
                     *, archive_existing: bool = True) -> ModelVersion:
    """Move a version to ``stage``; with ``archive_existing`` the versions that were in that
    stage go to Archived (so exactly one version is in Production)."""
    stage = validate_stage(stage)
    try:
        # Registry stages are deprecated since MLflow 2.9 (a FutureWarning on every call), but
        # users asked for stage transitions (the UI still shows them), so we keep calling the
        # API and set an alias as well. Silenced here only, for this one call, not globally.
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=FutureWarning,
                                    message=r".*transition_model_version_stage.*")
            moved: ModelVersion = client.transition_model_version_stage(
                name, str(version), stage,
                archive_existing_versions=archive_existing and stage in ("Staging", "Production"))
            return moved
    except MlflowException as exc:
        raise _fail(f"cannot move version {version} of {name!r} to stage {stage}", exc) from exc


def set_alias(client: MlflowClient, name: str, alias: str, version: str | int) -> None:
    validate_alias(alias)
    try:
        client.set_registered_model_alias(name, alias, str(version))
    except MlflowException as exc:
        raise _fail(f"cannot point alias {alias!r} of {name!r} at version {version}",
                    exc) from exc


def version_for_alias(client: MlflowClient, name: str, alias: str) -> ModelVersion | None:
    """The version the alias points at, or None when the alias is not set."""
    try:
        return client.get_model_version_by_alias(name, alias)
    except MlflowException as exc:
        if exc.error_code in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"):
            return None
        raise _fail(f"cannot read alias {alias!r} of {name!r}", exc) from exc


def get_version(client: MlflowClient, name: str, version: str | int) -> ModelVersion:
    try:
        return client.get_model_version(name, str(version))
    except MlflowException as exc:
        raise _fail(f"cannot read version {version} of {name!r}", exc) from exc


def all_versions(client: MlflowClient, name: str) -> list[ModelVersion]:
    """Every version of ``name``, oldest first."""
    validate_registered_name(name)
    found: list[ModelVersion] = []
    token: str | None = None
    try:
        while True:
            page = client.search_model_versions(f"name = '{name}'", page_token=token)
            found.extend(page)
            token = page.token
            if not token:
                break
    except MlflowException as exc:
        raise _fail(f"cannot list the versions of {name!r}", exc) from exc
    return sorted(found, key=lambda v: int(v.version))


def versions_in_stage(client: MlflowClient, name: str, stage: str) -> list[ModelVersion]:
    stage = validate_stage(stage)
    return [v for v in all_versions(client, name) if v.current_stage == stage]


def triton_models(client: MlflowClient) -> list[str]:
    """Names of the registered models tagged ``tracker.flavor=triton``."""
    try:
        models = client.search_registered_models(f"tags.`{MODEL_TAG_FLAVOR}` = 'triton'")
    except MlflowException as exc:
        raise _fail("cannot search the registered models", exc) from exc
    return sorted(m.name for m in models)


def mark_deployment(client: MlflowClient, name: str, version: str | int, status: str,
                    *, message: str = "", target: str = "") -> None:
    """Record on the version what its deployment did (see the module docstring)."""
    if status not in DEPLOY_STATUSES:
        raise DeployError(f"a deployment status must be one of {list(DEPLOY_STATUSES)}, "
                          f"but got {status!r}")
    tags = {
        TAG_DEPLOY_STATUS: status,
        TAG_DEPLOY_MESSAGE: message[:_MAX_TAG],
        TAG_DEPLOY_TARGET: target,
        TAG_DEPLOY_AT: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    try:
        for key, value in tags.items():
            client.set_model_version_tag(name, str(version), key, value)
    except MlflowException as exc:
        raise _fail(f"cannot tag version {version} of {name!r}", exc) from exc


def mark_served(client: MlflowClient, name: str, version: str | int, *, target: str,
                message: str = "") -> None:
    """``version`` now serves: tag it ``serving`` and every other ``serving`` one ``replaced``."""
    for other in all_versions(client, name):
        if str(other.version) != str(version) and other.tags.get(TAG_DEPLOY_STATUS) == SERVING:
            mark_deployment(client, name, other.version, REPLACED,
                            message=f"replaced by version {version}", target=target)
    mark_deployment(client, name, version, SERVING, message=message, target=target)


def deploy_status(version: ModelVersion) -> str | None:
    return version.tags.get(TAG_DEPLOY_STATUS)


def serving_version(client: MlflowClient, name: str) -> ModelVersion | None:
    """The version tagged ``tracker.deploy.status=serving`` (None when none is)."""
    serving = [v for v in all_versions(client, name) if deploy_status(v) == SERVING]
    return serving[-1] if serving else None


def restore_serving(client: MlflowClient, name: str, *, stage: str = PRODUCTION,
                    alias: str = PRODUCTION_ALIAS) -> ModelVersion | None:
    """After a failed deployment: put ``stage`` and ``alias`` back on the version that still
    serves (the failed one is archived), so the registry says what serves. Returns that
    version, or None (and changes nothing) when no version serves."""
    serving = serving_version(client, name)
    if serving is None:
        return None
    if serving.current_stage != validate_stage(stage):
        transition_stage(client, name, serving.version, stage, archive_existing=True)
    set_alias(client, name, alias, serving.version)
    return serving
