"""The records of local servers: where they live (a private state directory, checked on
every use), what one holds (owner pid and start time, server pid, process group,
shared-memory prefix), and reading one back with every field checked, so that a planted,
stale or malformed record can make no clean-up kill or delete what is not its server's
(:func:`tracker.triton.server.processes.reap_leftovers`)."""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import stat
import subprocess
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from tracker.errors import ServerError

_ID = re.compile(r"[0-9a-f]{12}")
_MAX_RECORD = 4096  # bytes: a record is about 200


def state_dir() -> Path:
    """Where server records live: ``$XDG_RUNTIME_DIR/tracker-servers``, or
    ``<tmp>/tracker-servers-<uid>`` when ``XDG_RUNTIME_DIR`` is unset or no directory.

    It is made with mode 0700 and checked on every call: a directory (not a link) of this
    user that no one else can write, in one that no other user can rename it in (this user's
    or root's, sticky if others can write it, as /tmp); one that others can only read (0755)
    is tightened to 0700. Anything else raises :class:`ServerError` naming the path and the
    fix, and no record is read or written: records decide what a start kills and removes, so
    none that someone else could have placed is trusted, and a private directory per process
    instead would hide the records of earlier runs from their clean-up.
    """
    base = os.environ.get("XDG_RUNTIME_DIR")
    path = Path(base) / "tracker-servers" if base and os.path.isdir(base) else (
        Path(tempfile.gettempdir()) / f"tracker-servers-{os.getuid()}")

    def refuse(why: str, fix: str = "") -> ServerError:
        return ServerError(f"the server records directory {path} {why}: {fix}set "
                           "XDG_RUNTIME_DIR to a directory only you can write (its "
                           "tracker-servers folder is then used)")

    try:
        os.mkdir(path, 0o700)
        os.chmod(path, 0o700)  # whatever the umask
    except FileExistsError:
        pass
    except OSError as exc:
        raise refuse(f"cannot be made ({exc.strerror})") from exc
    up = os.stat(path.parent)  # others who may write it could swap the directory itself
    if up.st_uid not in (0, os.getuid()) or (up.st_mode & 0o022 and
                                             not up.st_mode & stat.S_ISVTX):
        raise refuse(f"lies in {path.parent}, which another user may rename things in")
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise refuse("is not a directory (a link or a file)", "remove it, or ")
    if st.st_uid != os.getuid():
        raise refuse(f"belongs to uid {st.st_uid}, not to this user (uid {os.getuid()})",
                     "have it removed, or ")
    if st.st_mode & 0o022:
        raise refuse(f"is writable by others (mode {stat.S_IMODE(st.st_mode):04o})",
                     f"check its records and `chmod 700 {path}` (or remove it), or ")
    if st.st_mode & 0o077:
        os.chmod(path, 0o700)
    return path


def new_server_id() -> str:
    """A fresh server id: 12 hex digits, as records and shm prefixes carry it."""
    return uuid.uuid4().hex[:12]


def shm_prefix(server_id: str) -> str:
    """The shared-memory prefix of server ``server_id`` (``tracker_<id>_``)."""
    return f"tracker_{server_id}_"


def owner_identity() -> dict[str, Any]:
    me = psutil.Process()
    return {"owner_pid": me.pid, "owner_start": me.create_time()}


def write_record(server_id: str, proc: subprocess.Popen[bytes]) -> Path:
    """Record server ``server_id`` (process ``proc``, a group leader) for :func:`reap_leftovers`."""
    record = {**owner_identity(), "server_pid": proc.pid, "pgid": proc.pid,
              "server_start": psutil.Process(proc.pid).create_time(),
              "shm_prefix": shm_prefix(server_id)}
    path = state_dir() / f"{server_id}.json"
    tmp = path.with_suffix(".tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(json.dumps(record))
    tmp.replace(path)
    return path


@dataclass(frozen=True)
class ServerRecord:
    """A server record as :func:`write_record` writes it, read back and checked."""

    server_id: str
    owner_pid: int
    owner_start: float
    server_pid: int  # also its process group: each server leads its own session
    server_start: float


def read_record(path: Path) -> ServerRecord:
    """The record in ``path``; ValueError saying what is wrong when it is not one that
    :func:`write_record` could have written (or not a file of this user)."""
    server_id = path.stem
    if not _ID.fullmatch(server_id):
        raise ValueError("its name is not <12 hex digits>.json")
    with os.fdopen(os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK), "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
            raise ValueError("it is not a regular file of this user")
        rec = json.loads(f.read(_MAX_RECORD))
    if not isinstance(rec, dict):
        raise ValueError("it holds no JSON object")
    for key in ("owner_pid", "server_pid", "pgid"):
        if type(rec.get(key)) is not int or rec[key] <= 1:
            raise ValueError(f"{key} must be a pid (an int > 1), but got {rec.get(key)!r}")
    for key in ("owner_start", "server_start"):
        if type(rec.get(key)) not in (int, float) or not math.isfinite(rec[key]):
            raise ValueError(f"{key} must be a time stamp, but got {rec.get(key)!r}")
    if rec["pgid"] != rec["server_pid"]:
        raise ValueError(f"pgid must be server_pid {rec['server_pid']}, but got {rec['pgid']}")
    if rec.get("shm_prefix") != shm_prefix(server_id):
        raise ValueError(f"shm_prefix must be {shm_prefix(server_id)!r}, but got "
                         f"{rec.get('shm_prefix')!r}")
    return ServerRecord(server_id, rec["owner_pid"], float(rec["owner_start"]), rec["server_pid"],
                  float(rec["server_start"]))
