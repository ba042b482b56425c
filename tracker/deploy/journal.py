"""The journal of a deployment in progress: what each step changed, so that it can be undone
after an exception, a signal, or a ``kill -9`` of the process that was deploying.

``<repository>/.tracker-deploy-journal-<name>.json`` is written before the first change to
the repository and again after each one (atomically: a reader sees the last complete
version). Its ``phase`` is the commit point:

- ``switching``: the new version is being staged, checked under its shadow names or
  switched in; undoing restores every model as it was (:func:`tracker.deploy.switch.undo`);
- ``committed``: every model serves the new version; what is left is to remove the old
  version folders, write each model's record and update the registry, all repeatable.

The next deployment, delete or watcher poll on the repository (under the repository lock)
finds a journal left behind and completes it: a ``switching`` one is rolled back, a
``committed`` one is finished (:func:`tracker.deploy.service.recover`).
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tracker.deploy import steps
from tracker.errors import DeployError

PREFIX = ".tracker-deploy-journal-"
SWITCHING, COMMITTED = "switching", "committed"


@dataclass
class Undo:
    """One model of the switch and what undoing it takes."""

    name: str                     #: the name it serves as
    existed: bool                 #: its folder existed before
    old_text: str | None          #: its config.pbtxt before (None: there was none)
    serving_before: list[int]     #: the versions READY before (they must serve again)
    created: bool = False         #: the new version's folder did not exist before
    touched: bool = False         #: its config.pbtxt was rewritten and loaded
    aside: str | None = None      #: the folder the new version replaced (same number)
    shadow: str | None = None     #: the shadow model it was checked as, while it exists
    staging: list[str] = field(default_factory=list)


@dataclass
class Journal:
    """A deployment in progress (the module docstring)."""

    deployment: str
    version: int
    phase: str
    models: list[Undo]
    records: dict[str, dict[str, Any]] = field(default_factory=dict)  #: deployment.json each
    registry: dict[str, Any] | None = None  #: the registry update still to make
    path: Path | None = None

    def save(self, repository: Path) -> None:
        self.path = path_for(repository, self.deployment)
        data = {k: v for k, v in asdict(self).items() if k != "path"}
        steps.write_atomic(self.path, json.dumps(data, indent=1, sort_keys=True) + "\n")

    def clear(self) -> None:
        if self.path is not None:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()


def path_for(repository: Path, deployment: str) -> Path:
    return repository / f"{PREFIX}{deployment}.json"


def load(path: Path) -> Journal:
    """The journal in ``path``; :class:`DeployError` naming it when it cannot be read."""
    try:
        data = json.loads(path.read_text())
        models = [Undo(**m) for m in data.pop("models")]
        journal = Journal(models=models, **data)
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
        raise DeployError(f"the deployment journal {path} cannot be read ({exc}); an "
                          "interrupted deployment left it: check what the repository serves, "
                          "then remove the file") from exc
    if journal.phase not in (SWITCHING, COMMITTED):
        raise DeployError(f"the deployment journal {path} has phase {journal.phase!r}, which "
                          f"must be {SWITCHING!r} or {COMMITTED!r}")
    journal.path = path
    return journal


def left_behind(repository: Path) -> list[Path]:
    """The journals of deployments that did not finish, oldest name first."""
    return sorted(p for p in repository.glob(f"{PREFIX}*.json") if p.is_file())
