"""The registry's side of a deployment that switched: the version that now serves is tagged
``serving`` (the one before ``replaced``), the stage and the alias move to it, and the
watcher's record says so. It runs under the repository lock, right after the switch, and is
repeatable.

A registry that fails here does not undo a good switch: the update is tried again
(:data:`TRIES` times, :data:`WAIT_S` apart), and if it still fails the deployment reports
"serving N; registry update pending", keeps the update in its journal, and the next
deployment, delete or watcher poll on the repository makes it (:func:`pending_line`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import mlflow
from mlflow.exceptions import MlflowException

from tracker.deploy.pointers import Pointers, align, record_seen
from tracker.errors import TrackerError
from tracker.tracking import registry

TRIES = 3
WAIT_S = 2.0
#: run under the lock once the version serves: (registry client, registered name, version)
AfterServing = Callable[[mlflow.MlflowClient, str, int], list[str]]


def job(name: str, version: int, *, target: str, message: str,
        pointers: Pointers | None) -> dict[str, Any]:
    """The update a deployment of ``name`` version ``version`` needs, as the journal keeps
    it."""
    return {"name": name, "version": version, "target": target, "message": message,
            "pointers": None if pointers is None else
            {"stage": pointers.stage, "alias": pointers.alias}}


def apply(update: Mapping[str, Any], log: Callable[[str], None],
          after: AfterServing | None = None, *, tries: int = TRIES,
          wait_s: float = WAIT_S) -> str | None:
    """Make ``update``; None when done, else the reason it is still pending."""
    last = ""
    for attempt in range(tries):
        try:
            _apply_once(update, log, after)
            return None
        except (TrackerError, MlflowException, OSError) as exc:
            last = str(exc)
            if attempt + 1 < tries:
                time.sleep(wait_s)
    return last


def _apply_once(update: Mapping[str, Any], log: Callable[[str], None],
                after: AfterServing | None) -> None:
    client = mlflow.MlflowClient()
    name, version = str(update["name"]), int(update["version"])
    registry.mark_served(client, name, version, target=str(update["target"]),
                         message=str(update["message"]))
    if after is not None:
        for line in after(client, name, version):
            log(f"{name}: {line}")
        return
    raw = update.get("pointers")
    if raw:
        pointers = Pointers(str(raw["stage"]), str(raw["alias"]))
        for moved in align(client, name, version, pointers):
            log(f"{name}: {moved} (the version that serves)")
        record_seen(client, name, pointers)


def pending_line(update: Mapping[str, Any], reason: str) -> str:
    return (f"{update['name']} version {update['version']} serves; registry update pending "
            f"(the next deployment or watcher poll makes it): {reason}")
