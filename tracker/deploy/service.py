"""Deployments of registry versions to Triton: what the `triton` target, ``tracker promote`` and
``tracker watch`` all call.

A model URI of the registry (``models:/NAME/VERSION`` or ``models:/NAME@ALIAS``) is deployed as
that version number and leaves its result on the version's tags (``tracker.deploy.status``
serving/failed/..., see :mod:`tracker.tracking.registry`). One registered model is served by
one deployment: when a version serves, the version that served before is tagged ``replaced``;
given the :class:`~tracker.deploy.pointers.Pointers`, the stage and the alias then move to the
version that serves and the watcher's record says so (:mod:`tracker.deploy.pointers`).
"""

from __future__ import annotations

import contextlib
import re
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlflow

from tracker import lifecycle
from tracker.deploy import integrity, journal, nvidia, registry_sync, switch, verify
from tracker.deploy.inference import infer_version, to_arrays, to_lists
from tracker.deploy.pointers import Pointers
from tracker.deploy.publish import META_FILE, DeploymentState, Publisher, PublishResult
from tracker.deploy.settings import TargetSettings
from tracker.deploy.steps import StepFailed
from tracker.deploy.transport import make_client
from tracker.errors import DeployError, ServerError
from tracker.tracking import flavor, foreign, registry
from tracker.triton.infer import ControlClient

FLAVOR = flavor.FLAVOR_NAME
_REGISTRY_URI = re.compile(r"^models:/(?P<name>[^/@]+)(?:/(?P<version>\d+)|@(?P<alias>[^/]+))/?$")


@dataclass(frozen=True)
class RegistryRef:
    """A registry version a model URI points at."""

    name: str
    version: int
    run_id: str | None


def resolve_registry_uri(model_uri: str) -> RegistryRef | None:
    """``models:/NAME/VERSION`` or ``models:/NAME@ALIAS`` -> the version; None for other URIs."""
    match = _REGISTRY_URI.match(model_uri)
    if not match:
        return None
    client = mlflow.MlflowClient()
    name = match["name"]
    if match["alias"]:
        mv = registry.version_for_alias(client, name, match["alias"])
        if mv is None:
            raise DeployError(f"alias {match['alias']!r} of registered model {name!r} is not "
                              f"set (model URI {model_uri!r})")
    else:
        mv = registry.get_version(client, name, match["version"])
    return RegistryRef(name=name, version=int(mv.version), run_id=mv.run_id)


def make_publisher(settings: TargetSettings, client: ControlClient,
                   log: Callable[[str], None] | None = None) -> Publisher:
    return Publisher(settings.repository, client, serving=settings.serving,
                     ready_timeout_s=settings.timeout_s, server_log=settings.log, log=log)


def describe(state: DeploymentState, settings: TargetSettings) -> dict[str, Any]:
    """A deployment as ``mlflow deployments get|list`` show it (with the keys of NVIDIA's
    plugin: :func:`tracker.deploy.nvidia.entry_keys`)."""
    meta = dict(state.meta)
    theirs = nvidia.entry_keys(settings.repository / state.name, state.state, meta, FLAVOR)
    return {
        "name": state.name,
        "flavor": theirs["flavor"],
        "state": state.state,
        "status": theirs["status"],
        "version": state.version,
        "model_uri": theirs["mlflow_model_uri"],
        "mlflow_model_uri": theirs["mlflow_model_uri"],
        "triton_model_path": theirs["triton_model_path"],
        "registered_model": meta.get("registered_model"),
        "registry_version": meta.get("registry_version"),
        "serving": meta.get("serving"),
        "deployed_at": meta.get("deployed_at"),
        "url": settings.endpoint,
        "repository": str(settings.repository),
        **({"reason": state.reason} if state.reason and not state.ready_versions else {}),
        **({"models": list(meta[switch.MODELS])} if meta.get(switch.MODELS) else {}),
        **({"entries": list(meta[switch.ENTRIES])} if meta.get(switch.ENTRIES) else {}),
    }


def deploy(settings: TargetSettings, name: str, model_uri: str, *,
           exists: bool | None = None, log: Callable[[str], None] | None = None,
           model_flavor: str | None = None, pointers: Pointers | None = None,
           after_serving: registry_sync.AfterServing | None = None) -> dict[str, Any]:
    """Publish ``model_uri`` as deployment ``name`` and record the outcome in the registry,
    as one transaction under the repository lock (:mod:`tracker.deploy.switch`).

    ``exists``: True = update (the deployment must exist), False = create (it must not),
    None = either. ``model_flavor``: ``triton`` or ``onnx`` (None: the model's, see
    :func:`tracker.tracking.foreign.load_deployable`). ``pointers``: for a registry version,
    move that stage and alias to it once it serves and record them as seen (None: leave the
    registry's pointers to ``after_serving``, as the watcher does). Raises
    :class:`DeployError` with Triton's message; the previous version keeps serving and a
    registry version is tagged ``failed``. A registry that fails after a good switch leaves
    ``registry_pending`` (the reason) in the result: the version serves.
    """
    flavor.validate_model_name(name)
    ref = resolve_registry_uri(model_uri)
    say = log or (lambda _line: None)
    with tempfile.TemporaryDirectory(prefix="triton-deploy-") as tmp:
        loaded = foreign.load_deployable(model_uri, Path(tmp), name=name, flavor=model_flavor)
        if ref is not None:
            integrity.check_download(mlflow.MlflowClient(), ref.name, ref.version, loaded.source)
        with transaction(settings, log) as publisher:
            version = _version(publisher.state(name), name, ref, settings, exists)
            meta = _meta(model_uri, ref, loaded.flavor)
            update = None if ref is None else registry_sync.job(
                ref.name, ref.version, target=settings.describe(), message="",
                pointers=pointers)
            pending: list[str] = []

            def after_commit(result: PublishResult) -> None:
                nvidia.write_meta(settings.repository / name, name, loaded.flavor, model_uri)
                if update is not None:
                    update["message"] = _summary(result)
                    reason = registry_sync.apply(update, say, after_serving)
                    if reason is not None:
                        pending.append(reason)
                        say(registry_sync.pending_line(update, reason))
                        return
                _clear_journal(publisher, name)

            try:
                check = None if ref is None else verify.for_version(
                    mlflow.MlflowClient(), ref.name, ref.version)
                switch.publish(publisher, name, version, loaded.source, meta=meta,
                               check=check, registry=update, after_commit=after_commit)
            except DeployError as exc:
                if ref is not None:
                    verify.mark_failed(ref.name, ref.version, exc, target=settings.describe())
                raise
            state = _state_after(publisher, name, say)
    found = describe(state, settings) if state is not None else {}
    if found.get("version") is None:  # Triton stopped answering: the files' version
        found["version"] = version
    if pending:
        found["registry_pending"] = pending[0]
    return found


def _state_after(publisher: Publisher, name: str,
                 say: Callable[[str], None]) -> DeploymentState | None:
    """What serves once a deployment committed; where Triton stopped answering since, what
    the files hold (loaded again by the next transaction once it answers,
    :func:`reload_lost`)."""
    try:
        return publisher.state(name)
    except DeployError as exc:
        say(f"{name}: {exc}; the deployed version serves once Triton answers again")
        return publisher.state(name, [])


def _meta(model_uri: str, ref: RegistryRef | None, model_flavor: str) -> dict[str, Any]:
    """What deployment.json records of where the model came from."""
    return {"model_uri": model_uri, "registered_model": ref.name if ref else None,
            "registry_version": str(ref.version) if ref else None,
            "run_id": ref.run_id if ref else None, "flavor": model_flavor}


def _version(current: DeploymentState | None, name: str, ref: RegistryRef | None,
             settings: TargetSettings, exists: bool | None) -> int:
    """The Triton version to deploy as: the registry's number, the ``version`` setting, or
    one above every version folder; ``exists`` checked against what the repository has."""
    if exists is False and current is not None:
        raise DeployError(f"deployment {name!r} already exists (version {current.version}); "
                          "use update")
    if exists is True and current is None:
        raise DeployError(f"deployment {name!r} does not exist; use create")
    if ref is not None:
        return ref.version
    if settings.version is not None:
        return settings.version
    return max([0, *(current.files_versions if current else ())]) + 1


def recover(publisher: Publisher, log: Callable[[str], None]) -> None:
    """Complete what an interrupted deployment of this repository left (the caller holds the
    lock): a switch that did not commit is rolled back, one that did is finished, and a
    registry update still pending is made (left pending, said once, if the registry still
    fails). Then every deployment Triton has not loaded since it started is loaded again
    (:func:`reload_lost`). :class:`DeployError` when Triton does not answer (a rollback is
    then kept for the next time)."""
    for path in journal.left_behind(publisher.repository):
        found = journal.load(path)
        if found.phase == journal.SWITCHING:
            undone = switch.answers(publisher)
            if undone:
                with lifecycle.held():
                    undone = switch.undo(publisher, found)
            if not undone:
                raise DeployError(f"cannot reach Triton at {publisher.client.address}: the "
                                  f"interrupted deployment of version {found.version} of "
                                  f"{found.deployment!r} is rolled back when it answers")
            state = publisher.state(found.deployment)
            serving = state.version if state is not None else None
            log(f"{found.deployment}: an interrupted deployment of version {found.version} "
                "was rolled back; " + (f"version {serving} serves" if serving
                                       else "nothing serves"))
            continue
        switch.finish(publisher, found)
        if found.registry is not None:
            reason = registry_sync.apply(found.registry, log, tries=1)
            if reason is not None:
                log(registry_sync.pending_line(found.registry, reason))
                continue
            log(f"{found.deployment}: the registry update of version {found.version} "
                "that was pending is made")
        found.clear()
    reload_lost(publisher, log)


def reload_lost(publisher: Publisher, log: Callable[[str], None]) -> None:
    """Load again every deployment of the repository whose models Triton has not tried to
    load since it started: a Triton in explicit model control mode that restarts (a pod
    rescheduled, a ``kill -9``) loads nothing, so the version each model's record names
    (the only one its config.pbtxt lists) serves again. A model that failed to load or was
    unloaded (Triton knows its state) is left as it is. :class:`DeployError` when Triton
    does not answer."""
    index = publisher.index()
    known = {e.get("name") for e in index if e.get("state")}
    for state in publisher.states(index):
        if state.meta.get(switch.PART_OF) or "version" not in state.meta:
            continue  # loaded with the deployment it is part of; or no record of ours
        names = [str(m) for m in state.meta.get(switch.MODELS) or [state.name]]
        lost = [m for m in names if m not in known]
        if not lost:
            continue
        try:
            for name in lost:
                publisher.load(name, f"loading {name!r} again after Triton started")
        except StepFailed as exc:  # Triton now knows its state: not tried again
            log(f"{state.name}: Triton had not loaded it since it started; loading it again "
                f"failed: {exc}")
            continue
        found = publisher.state(state.name)
        log(f"{state.name}: Triton had not loaded it since it started; loaded again: "
            + (f"version {found.version} serves" if found and found.version
               else "nothing is READY"))


@contextlib.contextmanager
def transaction(settings: TargetSettings,
                log: Callable[[str], None] | None = None) -> Iterator[Publisher]:
    """The repository's publisher with its lock held around a block (re-entrant: a deployment
    inside takes it again), signals raising :class:`~tracker.lifecycle.Interrupted`, and
    what an interrupted deployment left completed first (:func:`recover`)."""
    with make_client(settings) as client, lifecycle.interruptible():
        publisher = make_publisher(settings, client, log)
        with publisher.locked():
            recover(publisher, log or (lambda _line: None))
            yield publisher


def _clear_journal(publisher: Publisher, name: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        journal.path_for(publisher.repository, name).unlink()


def _summary(result: PublishResult) -> str:
    before = f"; replaced version(s) {list(result.previous)}" if result.previous else ""
    return f"serving as Triton version {result.version} ({result.serving}){before}"


def list_deployments(settings: TargetSettings) -> list[dict[str, Any]]:
    """The deployments of the repository: models with our record or NVIDIA's plugin's."""
    with make_client(settings) as client:
        states = make_publisher(settings, client).states()
    return [describe(s, settings) for s in states
            if nvidia.has_record(settings.repository / s.name, META_FILE)
            and not s.meta.get(switch.PART_OF)]  # a model of a deployment: listed with it


def get_deployment(settings: TargetSettings, name: str) -> dict[str, Any]:
    flavor.validate_model_name(name)
    with make_client(settings) as client:
        state = make_publisher(settings, client).state(name)
    if state is None:
        raise DeployError(f"no deployment named {name!r} in {settings.repository}")
    return describe(state, settings)


def delete_deployment(settings: TargetSettings, name: str,
                      log: Callable[[str], None] | None = None) -> None:
    """Unload and remove ``name`` (nothing to do when it does not exist)."""
    flavor.validate_model_name(name)
    with transaction(settings, log) as publisher:
        state = publisher.state(name)
        switch.remove(publisher, name)
    meta = state.meta if state else {}
    reg, ver = meta.get("registered_model"), meta.get("registry_version")
    if reg and ver:
        # the registry may be elsewhere now; the deployment is gone either way
        with contextlib.suppress(DeployError):
            registry.mark_deployment(mlflow.MlflowClient(), str(reg), str(ver), registry.REMOVED,
                                     message=f"deployment {name!r} deleted",
                                     target=settings.describe())


def predict(settings: TargetSettings, name: str, inputs: Any) -> dict[str, Any]:
    """Outputs of deployment ``name`` for a DataFrame or a dict of arrays: {output: list}."""
    flavor.validate_model_name(name)
    with make_client(settings) as client:
        try:
            config = client.model_config(name)
        except ServerError as exc:
            raise DeployError(f"deployment {name!r} cannot be asked: {exc.reason}") from exc
        arrays = to_arrays(config, inputs)
        try:
            outputs = infer_version(client, name, config, arrays)
        except ServerError as exc:
            raise DeployError(exc.reason) from exc
    return to_lists(outputs)

