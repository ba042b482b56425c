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
   prefix) in a state directory, and ``TRACKER_OWNER_PID`` in the server's environment. The
   next start calls :func:`reap_leftovers`, which kills what a dead owner left and removes its
   ``/dev/shm`` regions.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import glob
import json
import os
import queue
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import IO, Any

import psutil

OWNER_ENV = "TRACKER_OWNER_PID"
SERVER_ENV = "TRACKER_SERVER_ID"
_PR_SET_PDEATHSIG = 1
_PROCESS_NAMES = ("tritonserver", "triton_python_backend_stub")


def state_dir() -> Path:
    """Where server records live: ``$XDG_RUNTIME_DIR/tracker-servers`` or
    ``/tmp/tracker-servers-<uid>``."""
    base = os.environ.get("XDG_RUNTIME_DIR")
    path = Path(base) / "tracker-servers" if base else (
        Path(tempfile.gettempdir()) / f"tracker-servers-{os.getuid()}")
    path.mkdir(parents=True, exist_ok=True)
    return path


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


def owner_identity() -> dict[str, Any]:
    me = psutil.Process()
    return {"owner_pid": me.pid, "owner_start": me.create_time()}


def write_record(server_id: str, proc: subprocess.Popen[bytes], shm_prefix: str) -> Path:
    record = {**owner_identity(), "server_pid": proc.pid, "pgid": proc.pid,
              "server_start": psutil.Process(proc.pid).create_time(), "shm_prefix": shm_prefix}
    path = state_dir() / f"{server_id}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record))
    tmp.replace(path)
    return path


def _alive(pid: int, start: float | None) -> bool:
    try:
        proc = psutil.Process(pid)
        return start is None or abs(proc.create_time() - start) < 0.5
    except psutil.NoSuchProcess:
        return False


def kill_group(pgid: int, timeout_s: float = 5.0) -> None:
    """SIGKILL process group ``pgid`` and wait until its members are gone."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and _group_members(pgid):
        time.sleep(0.02)


def _group_members(pgid: int) -> list[int]:
    members = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                members.append(proc.pid)
        except (ProcessLookupError, psutil.NoSuchProcess, PermissionError):
            continue
    return members


def remove_shm(prefix: str) -> None:
    """Remove the Python backend's shared-memory regions named ``prefix*``."""
    shm = Path("/dev/shm")
    if not prefix or not shm.is_dir():
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


def remove_python_envs(before: set[Path]) -> None:
    """Remove the empty ones made since ``before`` (:func:`python_envs`). Only an empty
    folder goes (``rmdir``): the backend uses one only to unpack an ``EXECUTION_ENV_PATH``
    archive, which our repositories never set."""
    for path in python_envs() - before:
        with contextlib.suppress(OSError):
            path.rmdir()


def reap_leftovers() -> list[int]:
    """Kill servers (and stubs) whose owning process is dead, remove their records and shared
    memory. Returns the pids killed. Safe to call at any time; never touches servers whose
    owner is alive."""
    killed: list[int] = []
    for path in state_dir().glob("*.json"):
        try:
            rec = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if _alive(int(rec["owner_pid"]), rec.get("owner_start")):
            continue
        if _alive(int(rec["server_pid"]), rec.get("server_start")):
            killed.append(int(rec["server_pid"]))
            kill_group(int(rec["pgid"]))
        kill_group(int(rec["pgid"]), timeout_s=0.5)
        remove_shm(str(rec.get("shm_prefix", "")))
        with contextlib.suppress(OSError):
            path.unlink()
    killed.extend(_reap_marked())
    return killed


def _reap_marked() -> list[int]:
    """Servers/stubs marked with ``TRACKER_OWNER_PID`` whose owner is gone (records lost)."""
    killed = []
    for proc in psutil.process_iter(["name", "pid"]):
        try:
            if proc.info["name"] not in _PROCESS_NAMES:
                continue
            owner = proc.environ().get(OWNER_ENV)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        if owner and owner.isdigit() and not psutil.pid_exists(int(owner)):
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.kill()
                killed.append(proc.pid)
    return killed
