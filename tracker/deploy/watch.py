"""``tracker watch``: poll the registry and deploy what enters Production.

Every ``interval`` seconds, for each watched registered model (default: every model tagged
``tracker.flavor=triton``), the watcher reads the version in the ``Production`` stage (the
newest, if several) and the version the ``production`` alias points at. When either moved
since it was last handled, that version is deployed (unless it already serves), so a stage
transition in the legacy MLflow UI or an alias edit in MLflow 3's registry UI deploys it. Then
the other pointer is moved to the version that serves (the stage archives the version that was
there), so both always name what serves. When both moved, to different versions, the alias
wins (:mod:`tracker.deploy.pointers`), with a log line.

Restart-safe and idempotent: what the watcher has handled is kept on the registered model (tag
``tracker.watch.seen``, JSON ``{"stage": "3", "alias": "3"}``) and what was deployed on the
versions (``tracker.deploy.status``); a restarted watcher redoes nothing. Every deployment of a
registry version (``tracker promote``, ``mlflow deployments create|update``) updates the seen
tag too, so the watcher does not repeat it. A version whose deployment failed is tried again
only when it enters the stage or gets the alias again; after a failure the stage and alias go
back to the version that still serves. A pointer a person moves while a deployment runs is
left where they put it, and handled at the next poll.
Each action is one log line, followed by what serves and what the registry says.

Each poll runs in a transaction on the repository (:func:`tracker.deploy.service.transaction`),
which first completes what an interrupted deployment left and loads again what a restarted
Triton lost; a Triton that does not answer fails the poll, which is retried.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import mlflow
from mlflow.exceptions import MlflowException

from tracker import tags
from tracker.deploy import pointers, service, status
from tracker.deploy.settings import TargetSettings
from tracker.errors import DeployError, TrackerError
from tracker.tracking import flavor, registry
from tracker.tracking.runs import unreachable

SEEN_TAG = pointers.SEEN_TAG
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


def record_seen(client: mlflow.MlflowClient, registered: str, *, stage: str = registry.PRODUCTION,
                alias: str = registry.PRODUCTION_ALIAS) -> None:
    """Mark the registry's current stage/alias versions as handled."""
    pointers.record_seen(client, registered, pointers.Pointers(stage, alias))


class Watcher:
    """Polls the registry and deploys (see the module docstring)."""

    def __init__(self, settings: TargetSettings, *, models: Sequence[str] = (),
                 stage: str = registry.PRODUCTION, alias: str = registry.PRODUCTION_ALIAS,
                 log: Callable[[str], None] = print) -> None:
        self.settings = settings
        self.models = list(models)
        self.pointers = pointers.Pointers(stage, alias)
        self.stage, self.alias = self.pointers.stage, self.pointers.alias
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
                self.log_status(client, registered)
        return actions

    def log_status(self, client: mlflow.MlflowClient, registered: str) -> None:
        """One line: what Triton serves and what the registry says."""
        found = status.model_status(client, self.settings, registered, self.pointers)
        self.log(f"{_now()} {found.line()}")

    def _poll_model(self, client: mlflow.MlflowClient, registered: str) -> Action | None:
        """Under the repository lock, after completing what an interrupted deployment left:
        the pointers read, the version deployed and the pointers moved, as one transaction."""
        with service.transaction(self.settings, lambda line: self.log(f"{_now()} {line}")):
            return self._handle(client, registered)

    def _handle(self, client: mlflow.MlflowClient, registered: str) -> Action | None:
        seen = pointers.read_seen(client, registered)
        in_stage, aliased = (pointers.number(v) for v in
                             pointers.current(client, registered, self.pointers))
        decision = pointers.winner(
            self.pointers,
            in_stage if in_stage is not None and str(in_stage) != seen["stage"] else None,
            aliased if aliased is not None and str(aliased) != seen["alias"] else None)
        if decision is None:
            return None
        version, trigger = decision.version, decision.trigger
        head = f"{registered} v{version} ({trigger}): "
        if decision.conflict:
            self.log(f"{_now()} {registered}: {decision.conflict}")
        target = registry.get_version(client, registered, version)
        message = ""
        moved: list[str] = []
        if registry.deploy_status(target) != registry.SERVING:
            name = deployment_name(client, registered)
            uri = f"models:/{registered}/{version}"

            def after(reg: mlflow.MlflowClient, model: str, served: int) -> list[str]:
                moved[:] = self._align(reg, model, served, in_stage, aliased)
                return []

            try:
                info = service.deploy(self.settings, name, uri,
                                      log=lambda line: self.log(f"{_now()} {line}"),
                                      after_serving=after)
            except TrackerError as exc:
                back = registry.restore_serving(client, registered, stage=self.stage,
                                                alias=self.alias)
                undo = "" if back is None else f" (stage/alias back on v{back.version})"
                pointers.record_seen(client, registered, self.pointers)
                self.log(f"{_now()} {head}FAILED, {exc}{undo}")
                return Action(registered, version, trigger, False, str(exc) + undo)
            message = f"deployed {uri} as {name!r} version {info['version']}"
            if info.get("registry_pending"):
                moved.append(f"registry update pending: {info['registry_pending']}")
        else:
            moved = self._align(client, registered, version, in_stage, aliased)
        if not message and not moved:
            return None  # it serves and the registry already says so
        message = "; ".join([message or f"v{version} already serves", *moved])
        self.log(f"{_now()} {head}ok, {message}")
        return Action(registered, version, trigger, True, message)

    def _align(self, client: mlflow.MlflowClient, registered: str, version: int,
               stage_was: int | None, alias_was: int | None) -> list[str]:
        """Move both pointers to the version that serves and record them as seen; a pointer
        that moved while the deployment ran is left where it is (the next poll sees it)."""
        stage_now, alias_now = (pointers.number(v) for v in
                                pointers.current(client, registered, self.pointers))
        keep_stage = stage_now not in (stage_was, version)
        keep_alias = alias_now not in (alias_was, version)
        moved = pointers.align(client, registered, version, self.pointers,
                               stage=not keep_stage, alias=not keep_alias)
        moved += [f"{what} moved to {'no version' if now is None else f'v{now}'} meanwhile: "
                  "left for the next poll"
                  for what, now, keep in ((f"stage {self.stage}", stage_now, keep_stage),
                                          (f"alias {self.alias!r}", alias_now, keep_alias))
                  if keep]
        stage_after, alias_after = (pointers.number(v) for v in
                                    pointers.current(client, registered, self.pointers))
        pointers.write_seen(client, registered,
                            stage=stage_was if keep_stage else stage_after,
                            alias=alias_was if keep_alias else alias_after)
        return moved

    def _begin(self, every: str) -> None:
        """The first lines: what is watched, then what serves (raises when the registry or
        the server cannot be read)."""
        self.log(f"{_now()} watching {self.models or 'models tagged tracker.flavor=triton'} "
                 f"(stage {self.stage}, alias {self.alias!r}) -> triton:/{self.settings.url} "
                 f"{self.settings.repository}, {every}")
        client = mlflow.MlflowClient()
        for registered in self._watched(client):
            self.log_status(client, registered)

    def run(self, interval_s: float, *, stop: threading.Event | None = None,
            max_polls: int | None = None) -> None:
        """Poll until ``stop`` is set (or ``max_polls`` polls). A failed poll (registry or server
        unreachable) is logged once per distinct error, in one line, and retried at the next
        interval. A KeyboardInterrupt (``tracker watch`` raises one on SIGINT and SIGTERM, also
        in the middle of an MLflow call that is being retried) ends it with one line; a
        deployment in progress is rolled back first (:mod:`tracker.lifecycle`)."""
        if interval_s <= 0:
            raise DeployError(f"interval must be > 0 seconds, but got {interval_s:g}")
        stop = stop or threading.Event()
        polls = 0
        try:
            try:
                self._begin(f"every {interval_s:g} s")
            except _FAILURES as exc:
                self.log(f"{_now()} cannot read the registry yet: {reason(exc)}")
            while not stop.is_set():
                try:
                    self.poll_once()
                    if self._last_error:
                        self._recovered()
                    self._last_error = ""
                except _FAILURES as exc:
                    why = reason(exc)
                    if why != self._last_error:
                        self.log(f"{_now()} poll failed (retrying every {interval_s:g} s): {why}")
                        self._last_error = why
                polls += 1
                if max_polls is not None and polls >= max_polls:
                    return
                stop.wait(interval_s)
        except KeyboardInterrupt as stopped:
            stop.set()
            self.log(f"{_now()} {stopped or 'stopped by SIGINT'}")

    def _recovered(self) -> None:
        """After failed polls, one that worked: said, then what serves (a Triton that
        restarted has had the deployments loaded again by then)."""
        self.log(f"{_now()} the poll works again")
        client = mlflow.MlflowClient()
        for registered in self._watched(client):
            self.log_status(client, registered)

    def once(self) -> list[Action]:
        """``tracker watch --once``: the first lines, then one poll. A poll that fails
        (registry or server unreachable) raises DeployError with the reason in one line, and
        so does a deployment it made that failed (rolled back: what served still serves)."""
        try:
            self._begin("once")
            actions = self.poll_once()
        except _FAILURES as exc:
            raise DeployError(f"the poll failed: {reason(exc)}") from exc
        failed = [f"{a.model} v{a.version} ({a.trigger})" for a in actions if not a.ok]
        if failed:
            raise DeployError(f"not deployed: {', '.join(failed)} (the FAILED line above says "
                              "why; what served before still serves)")
        return actions


_FAILURES = (TrackerError, MlflowException, OSError)


def reason(exc: BaseException) -> str:
    """A failed poll's reason in one line (an MLflow server that does not answer said as
    :func:`tracker.tracking.runs.unreachable` says it)."""
    return unreachable(" ".join(str(exc).split()))


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S")
