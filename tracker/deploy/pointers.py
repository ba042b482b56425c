"""The registry's two production pointers, the stage (``Production``) and the alias
(``production``), and the watcher's record of them.

Both say "this version is in production": the legacy MLflow UI moves the stage (its button
archives the version that was there), MLflow 3's registry UI edits the alias, and
``models:/<name>@production`` (what ``mlflow.pyfunc.load_model`` and
``mlflow deployments update -m`` read) follows the alias. So after every deployment of a
registry version the version that serves holds both (:func:`align`: the stage, with the
previous one archived, and the alias), and the registered model's tag ``tracker.watch.seen``
(``{"stage": "3", "alias": "3"}``) records where they are (:func:`record_seen`), so the next
change a person makes to either one is a change the watcher sees.

**The conflict rule** (:func:`winner`): when both pointers moved, to different versions,
between two looks at the registry, **the alias wins**: its version is deployed and the stage
is moved to it (the stage's version is archived), with a log line. The alias is the pointer
MLflow keeps (stages are deprecated since MLflow 2.9, and MLflow 3's registry UI offers only
aliases), it is what ``models:/<name>@production`` loads, and it is the only pointer where a
registry has no stages.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from mlflow import MlflowClient
from mlflow.entities.model_registry import ModelVersion
from mlflow.exceptions import MlflowException

from tracker import tags
from tracker.errors import DeployError
from tracker.tracking import registry

SEEN_TAG = tags.WATCH_SEEN


@dataclass(frozen=True)
class Pointers:
    """The stage and the alias that mean "serving"."""

    stage: str = registry.PRODUCTION
    alias: str = registry.PRODUCTION_ALIAS

    def __post_init__(self) -> None:
        object.__setattr__(self, "stage", registry.validate_stage(self.stage))
        registry.validate_alias(self.alias)


@dataclass(frozen=True)
class Decision:
    """Which version a change of the pointers asks for, and why."""

    version: int
    trigger: str  #: "stage" | "alias" | "stage+alias"
    conflict: str = ""  #: the log line's text when the pointers moved apart


def winner(pointers: Pointers, stage_moved_to: int | None,
           alias_moved_to: int | None) -> Decision | None:
    """The version to serve after the stage and/or the alias moved (None: neither moved).
    When both moved, to different versions, the alias wins (the module docstring)."""
    if alias_moved_to is None:
        return None if stage_moved_to is None else Decision(stage_moved_to, "stage")
    if stage_moved_to is None:
        return Decision(alias_moved_to, "alias")
    if stage_moved_to == alias_moved_to:
        return Decision(alias_moved_to, "stage+alias")
    return Decision(alias_moved_to, "alias", conflict=(
        f"conflict: stage {pointers.stage} moved to v{stage_moved_to} and alias "
        f"{pointers.alias!r} to v{alias_moved_to} since the last look; the alias wins "
        f"(docs/deploy.md), so v{alias_moved_to} is deployed and stage {pointers.stage} moves "
        f"to it (v{stage_moved_to} archived)"))


def current(client: MlflowClient, registered: str,
            pointers: Pointers) -> tuple[ModelVersion | None, ModelVersion | None]:
    """(newest version in the stage, version the alias points at); None where unset."""
    in_stage = registry.versions_in_stage(client, registered, pointers.stage)
    return (in_stage[-1] if in_stage else None,
            registry.version_for_alias(client, registered, pointers.alias))


def number(version: ModelVersion | None) -> int | None:
    return None if version is None else int(version.version)


def read_seen(client: MlflowClient, registered: str) -> dict[str, str | None]:
    """Where the stage and the alias were when a deployment or the watcher last handled them
    (``{"stage": None, "alias": None}`` when never)."""
    try:
        raw = client.get_registered_model(registered).tags.get(SEEN_TAG)
        seen = json.loads(raw) if raw else {}
    except (MlflowException, ValueError):
        seen = {}
    if not isinstance(seen, dict):
        seen = {}
    return {"stage": seen.get("stage"), "alias": seen.get("alias")}


def write_seen(client: MlflowClient, registered: str, *, stage: int | None,
               alias: int | None) -> None:
    value = json.dumps({"stage": None if stage is None else str(stage),
                        "alias": None if alias is None else str(alias)})
    try:
        client.set_registered_model_tag(registered, SEEN_TAG, value)
    except MlflowException as exc:
        raise DeployError(f"cannot tag registered model {registered!r}: {exc.message}") from exc


def record_seen(client: MlflowClient, registered: str, pointers: Pointers | None = None) -> None:
    """Mark where the stage and the alias are now as handled."""
    in_stage, aliased = current(client, registered, pointers or Pointers())
    write_seen(client, registered, stage=number(in_stage), alias=number(aliased))


def align(client: MlflowClient, registered: str, version: int, pointers: Pointers, *,
          stage: bool = True, alias: bool = True) -> list[str]:
    """Put the stage (archiving every other version in it) and the alias on ``version``;
    ``stage=False`` / ``alias=False`` leave that pointer alone. Returns one phrase per pointer
    moved (``stage Production v1 -> v2``), and a note when the registry refuses stages (then
    the alias alone says what serves, as ``tracker promote`` does)."""
    moved: list[str] = []
    in_stage = registry.versions_in_stage(client, registered, pointers.stage)
    if stage and [int(v.version) for v in in_stage] != [version]:
        before = ", ".join(f"v{v.version}" for v in in_stage) or "none"
        try:
            registry.transition_stage(client, registered, version, pointers.stage,
                                      archive_existing=True)
            moved.append(f"stage {pointers.stage} {before} -> v{version}")
        except DeployError as exc:
            moved.append(f"the registry refused the stage transition ({exc}); the alias alone "
                         "marks the serving version")
    aliased = registry.version_for_alias(client, registered, pointers.alias)
    if alias and number(aliased) != version:
        registry.set_alias(client, registered, pointers.alias, version)
        was = "unset" if aliased is None else f"v{aliased.version}"
        moved.append(f"alias {pointers.alias!r} {was} -> v{version}")
    return moved
