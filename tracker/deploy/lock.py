"""The repository lock: one deployment at a time per model repository.

An exclusive ``flock`` on ``<repository>/.tracker-deploy.lock`` is held for the whole of a
deployment (reading what serves, choosing the version, staging, loading, checking, switching
and updating the registry), so two ``tracker promote``, ``tracker watch`` or ``mlflow
deployments`` processes on one repository run one after the other. The lock is re-entrant
within a thread (the watcher holds it around a poll that deploys), and a lock file that
cannot be opened (a read-only repository, a missing permission) is a :class:`DeployError`
naming the path.
"""

from __future__ import annotations

import contextlib
import fcntl
import threading
from collections.abc import Iterator
from pathlib import Path

from tracker.errors import DeployError

LOCK_FILE = ".tracker-deploy.lock"
_held = threading.local()


@contextlib.contextmanager
def held(repository: Path) -> Iterator[None]:
    """Hold the lock of ``repository`` (waiting for another holder to finish)."""
    key = str(repository.resolve())
    depth: dict[str, int] = getattr(_held, "depth", None) or {}
    _held.depth = depth
    if depth.get(key):
        depth[key] += 1
        try:
            yield
        finally:
            depth[key] -= 1
        return
    path = repository / LOCK_FILE
    try:
        fh = open(path, "a")  # noqa: SIM115 - closed below, after the unlock
    except OSError as exc:
        raise DeployError(f"cannot open the deployment lock {path}: {exc.strerror}; the model "
                          "repository must be writable by this user (deploying writes its "
                          "version folders and config.pbtxt)") from exc
    with fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        depth[key] = 1
        try:
            yield
        finally:
            depth[key] = 0
            fcntl.flock(fh, fcntl.LOCK_UN)
