"""Server processes that never outlive the tuner, and clean-up of any that did.

Three layers keep a local ``tritonserver`` (and the Python backend stubs it forks) from being
orphaned:

1. Each server runs in its own session/process group (``start_new_session``), so one
   ``killpg`` reaches the stubs too.
2. The server gets ``PR_SET_PDEATHSIG=SIGKILL``: the kernel kills it when its parent goes,
   even after ``SIGKILL`` of the tuner. The signal follows the *thread* that forked, so every
   server is spawned from one long-lived daemon thread of this module (never from a worker
   thread that may end first). The stubs watch their parent and exit on their own.
3. A record per server (owner pid + start time, server pid, process group, shared-memory
   prefix) in a private state directory (:func:`state_dir`), and ``TRACKER_OWNER_PID`` and
   ``TRACKER_SERVER_ID`` in the server's environment. The next start calls
   :func:`reap_leftovers`, which kills what a dead owner left, once each process is
   confirmed to be that server's, and removes its ``/dev/shm`` regions.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import glob
import logging
import os
import queue
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import IO

import psutil

from tracker.triton.server.records import ServerRecord, read_record, shm_prefix, state_dir

OWNER_ENV = "TRACKER_OWNER_PID"
SERVER_ENV = "TRACKER_SERVER_ID"
_PR_SET_PDEATHSIG = 1
_PROCESS_NAMES = ("tritonserver", "triton_python_backend_stub")
_SHM_PREFIX = re.compile(r"tracker_[0-9a-f]{12}_")
_log = logging.getLogger(__name__)


def _set_pdeathsig() -> Callable[[], None]:
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    prctl = libc.prctl

    def preexec() -> None:  # runs in the child between fork and exec: keep it tiny
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)

    return preexec


class _Spawner:
    """One daemon thread that runs every Popen, so PDEATHSIG is tied to it (it lives as long
    as the process) rather than to whichever thread asked for a server."""

    def __init__(self) -> None:
        self._jobs: queue.Queue[tuple[Callable[[], subprocess.Popen[bytes]],
                                      Future[subprocess.Popen[bytes]]]] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def _run(self) -> None:
        while True:
            job, fut = self._jobs.get()
            try:
                fut.set_result(job())
            except BaseException as exc:
                fut.set_exception(exc)

    def submit(self, job: Callable[[], subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="tracker-spawner",
                                                daemon=True)
                self._thread.start()
        fut: Future[subprocess.Popen[bytes]] = Future()
        self._jobs.put((job, fut))
        return fut.result()


_SPAWNER = _Spawner()


def spawn(argv: Sequence[str], env: dict[str, str], log: IO[bytes],
          cwd: str | None = None) -> subprocess.Popen[bytes]:
    """Start ``argv`` in a new session with PDEATHSIG=SIGKILL, stdout+stderr to ``log``."""
    preexec = _set_pdeathsig()

    def job() -> subprocess.Popen[bytes]:
        return subprocess.Popen(list(argv), env=env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, cwd=cwd, start_new_session=True,
                                preexec_fn=preexec)

    return _SPAWNER.submit(job)


def _alive(pid: int, start: float | None) -> bool:
    try:
        proc = psutil.Process(pid)
        return start is None or abs(proc.create_time() - start) < 0.5
    except psutil.NoSuchProcess:
        return False


def is_server_process(proc: psutil.Process, server_id: str) -> bool:
    """Whether ``proc`` is server ``server_id`` or one of its stubs: a process of this user
    named tritonserver or triton_python_backend_stub that carries the id in its environment
    (``TRACKER_SERVER_ID``) or on its command line."""
    try:
        if proc.name() not in _PROCESS_NAMES or proc.uids().real != os.getuid():
            return False
        return (proc.environ().get(SERVER_ENV) == server_id
                or any(server_id in arg for arg in proc.cmdline()))
    except psutil.Error:
        return False


def exit_words(program: str, code: int) -> str:
    """How a process ended, from its ``Popen.returncode``: "tritonserver exited with status 1",
    or "tritonserver was killed by signal 11 (SIGSEGV)" for a negative code."""
    if code >= 0:
        return f"{program} exited with status {code}"
    try:
        name = f" ({signal.Signals(-code).name})"
    except ValueError:
        name = ""
    return f"{program} was killed by signal {-code}{name}"


def kill_group(pgid: int, timeout_s: float = 5.0) -> None:
    """SIGKILL process group ``pgid`` and wait until its members are gone. Only for a group
    this process knows it started (its own child); a recorded one goes through
    :func:`reap_leftovers`, which confirms every member first."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and _group_members(pgid):
        time.sleep(0.02)


def _group_members(pgid: int) -> list[psutil.Process]:
    members = []
    for proc in psutil.process_iter(["pid", "name"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                members.append(proc)
        except (ProcessLookupError, psutil.NoSuchProcess, PermissionError):
            continue
    return members


def remove_shm(prefix: str) -> None:
    """Remove the Python backend's shared-memory regions named ``prefix*`` in /dev/shm; a
    prefix that is not one :func:`shm_prefix` makes (``tracker_<12 hex digits>_``) removes
    nothing."""
    shm = Path("/dev/shm")
    if not _SHM_PREFIX.fullmatch(prefix) or not shm.is_dir():
        return
    for path in shm.glob(prefix + "*"):
        with contextlib.suppress(OSError):
            path.unlink()


PYTHON_ENV_GLOB = "/tmp/python_env_*"  # the Python backend's, a fixed path in Triton's source


def python_envs() -> set[Path]:
    """The Python backend's ``/tmp/python_env_XXXXXX`` folders that exist now. The backend
    makes one per server start and removes it only when the server exits cleanly after
    unloading, which a stop past ``--exit-timeout-secs`` or a kill never does."""
    return {Path(p) for p in glob.glob(PYTHON_ENV_GLOB)}


class PythonEnvs:
    """The ``/tmp/python_env_*`` folders one server made. The backend makes its folder when
    it first loads a Python model (at the start, or at a load in explicit mode), in a fixed
    path that names no server; so a folder is claimed as this server's when it appears
    while this server starts or loads a model (:meth:`open` .. :meth:`close`), never by
    age, which would take the folder of another process's server that started later.
    :meth:`remove` removes the claimed ones that are empty (``rmdir``: the backend uses one
    only to unpack an ``EXECUTION_ENV_PATH`` archive)."""

    def __init__(self) -> None:
        self._mine: set[Path] = set()
        self._since: set[Path] | None = None

    def open(self) -> None:
        """A start or a load begins: what appears from now on is this server's."""
        self._since = python_envs()

    def close(self) -> None:
        """The start or load has ended: claim what appeared since :meth:`open`."""
        if self._since is not None:
            self._mine |= python_envs() - self._since
            self._since = None

    def remove(self) -> None:
        """The server is gone: remove the empty folders it made."""
        self.close()
        for path in self._mine:
            with contextlib.suppress(OSError):
                path.rmdir()
        self._mine = set()


def reap_leftovers() -> list[int]:
    """Kill servers (and stubs) whose owning process is dead, remove their records and shared
    memory; return the pids killed. Safe at any time; never touches a live owner's servers.
    Only processes :func:`is_server_process` confirms as the record's server are killed; the
    rest of its process group (a reused pid, a stranger) is left running and reported. A
    record :func:`read_record` refuses is reported in one line and removed. Reports go to
    this module's logger (warnings reach stderr unless logging is set up otherwise)."""
    killed: list[int] = []
    for path in state_dir().glob("*.json"):
        try:
            rec = read_record(path)
        except (OSError, ValueError) as exc:
            reason = str(exc) if not isinstance(exc, OSError) else (
                "it is a symbolic link" if exc.errno == errno.ELOOP else exc.strerror)
            _log.warning("removed the malformed server record %s: %s", path, reason)
            _remove(path)
            continue
        if _alive(rec.owner_pid, rec.owner_start):
            continue
        killed.extend(_kill_confirmed(rec, path))
        remove_shm(shm_prefix(rec.server_id))
        _remove(path)
    killed.extend(_reap_marked())
    return killed


def _kill_confirmed(rec: ServerRecord, path: Path, timeout_s: float = 5.0) -> list[int]:
    """SIGKILL the members of the record's process group that are its server's (the server
    first: it forks no stubs once gone); report the others and leave them alone."""
    killed: list[int] = []
    deadline = time.monotonic() + timeout_s
    while True:
        members = _group_members(rec.server_pid)
        ours = [p for p in members if is_server_process(p, rec.server_id)]
        if not ours or time.monotonic() > deadline:
            break
        for proc in sorted(ours, key=lambda p: p.pid != rec.server_pid):
            with contextlib.suppress(psutil.Error):
                proc.kill()
                killed.extend([proc.pid] if proc.pid not in killed else [])
        time.sleep(0.02)
    strangers = [f"{p.pid} ({p.info['name']})" for p in members if p not in ours]
    if strangers:
        _log.warning("server record %s names process group %d, whose processes %s are not "
                     "server %s's (no %s=%s): left them running, removed the record", path,
                     rec.server_pid, ", ".join(strangers), rec.server_id, SERVER_ENV,
                     rec.server_id)
    return killed


def _remove(path: Path) -> None:
    with contextlib.suppress(OSError):  # e.g. a directory by a record's name: left alone
        path.unlink()


def _reap_marked() -> list[int]:
    """Servers/stubs of this user marked with ``TRACKER_OWNER_PID`` whose owner is gone
    (records lost)."""
    killed = []
    for proc in psutil.process_iter(["name", "pid"]):
        try:
            if proc.info["name"] not in _PROCESS_NAMES or proc.uids().real != os.getuid():
                continue
            owner = proc.environ().get(OWNER_ENV)
        except psutil.Error:
            continue
        if owner and owner.isdigit() and not psutil.pid_exists(int(owner)):
            with contextlib.suppress(psutil.Error):
                proc.kill()
                killed.append(proc.pid)
    return killed
