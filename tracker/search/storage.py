"""The Optuna storage that several workers share, and who a worker is.

One study can be worked on by many ``tracker tune`` processes at once (several GPUs of a host,
several hosts). They meet in an Optuna RDB storage (PostgreSQL for more than one host; sqlite or
MySQL also work) with heartbeats: each worker's running trial records a heartbeat every
``heartbeat_interval`` seconds; a trial whose heartbeat is older than ``grace_period`` belongs to
a dead worker, and the next worker that looks (before asking for a trial) marks it FAIL and
re-queues its parameters as a WAITING trial (Optuna's ``RetryHeartbeatStaleTrialCallback``,
formerly ``RetryFailedTrialCallback``), up to ``max_retry`` times.

``storage_lock`` is a short critical section shared by all workers of a storage (a PostgreSQL
advisory lock, MySQL ``GET_LOCK``, a file lock beside a sqlite file). The budget check and the
creation of the study's parent run use it so that two workers never both take the last trial.

Passwords in storage URLs never appear in messages: :func:`safe_url` hides them.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import inspect
import os
import signal
import socket
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.storages import RDBStorage, RetryHeartbeatStaleTrialCallback
from optuna.trial import FrozenTrial

from tracker.errors import StudyError

DEFAULT_HEARTBEAT_INTERVAL = 10
DEFAULT_MAX_RETRY = 3
SUPPORTED_DIALECTS = ("postgresql", "mysql", "sqlite")

StaleTrialHook = Callable[[optuna.Study, FrozenTrial], None]


def safe_url(url: str) -> str:
    """``url`` with its password replaced by ``***`` (SQLAlchemy's own rendering)."""
    import sqlalchemy

    try:
        parsed = sqlalchemy.engine.make_url(url)
    except Exception:  # not a database URL at all: hide anything after "user:" up to "@"
        head, sep, rest = url.partition("://")
        if sep and "@" in rest:
            userinfo, _, host = rest.rpartition("@")
            return f"{head}://{userinfo.split(':', 1)[0]}:***@{host}"
        return url
    return str(parsed.render_as_string(hide_password=True))


def _scrub(text: str, url: str) -> str:
    """``text`` (an error message) with the URL's password removed wherever it appears."""
    import sqlalchemy

    with contextlib.suppress(Exception):
        password = sqlalchemy.engine.make_url(url).password
        if password:
            text = text.replace(str(password), "***")
    return text.replace(url, safe_url(url))


def dialect(url: str) -> str:
    """The database family of a storage URL (``postgresql+psycopg2://`` -> ``postgresql``)."""
    import sqlalchemy

    try:
        name = sqlalchemy.engine.make_url(url).get_backend_name()
    except Exception as exc:
        raise StudyError(
            f"the storage must be a database URL such as postgresql://user:password@host/db "
            f"or sqlite:///optuna.db, but got {safe_url(url)!r}") from exc
    if name not in SUPPORTED_DIALECTS:
        raise StudyError(f"the storage database must be one of {', '.join(SUPPORTED_DIALECTS)}, "
                         f"but got {name!r} in {safe_url(url)!r}")
    return str(name)


class _OnStaleThenRetry:
    """Heartbeat-stale callback: tell the caller (e.g. mark the dead worker's MLflow run
    FAILED), then re-queue the trial's parameters as a WAITING trial."""

    def __init__(self, max_retry: int | None, on_stale: StaleTrialHook | None) -> None:
        with warnings.catch_warnings():
            # experimental since Optuna 2.8 and the documented way to retry; not a user concern
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            self._retry = RetryHeartbeatStaleTrialCallback(max_retry=max_retry)
        self._on_stale = on_stale

    def __call__(self, study: optuna.Study, trial: FrozenTrial) -> None:
        if self._on_stale is not None:
            try:
                self._on_stale(study, trial)
            except Exception as exc:  # a tracking failure must not stop the retry
                optuna.logging.get_logger("tracker").warning(
                    "stale trial %d: hook failed: %s", trial.number, exc)
        self._retry(study, trial)


def with_driver(url: str) -> str:
    """``url`` with an installed driver named when it names none: SQLAlchemy 2.1 reads
    ``postgresql://`` as psycopg 3; where only psycopg2 is installed, use that."""
    import importlib.util

    import sqlalchemy

    parsed = sqlalchemy.engine.make_url(url)
    if parsed.drivername != "postgresql" or importlib.util.find_spec("psycopg") is not None:
        return url
    if importlib.util.find_spec("psycopg2") is None:
        return url
    return str(parsed.set(drivername="postgresql+psycopg2").render_as_string(hide_password=False))


_holding = [False]  # whether the main thread is inside a held call (the outermost holds)


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """On the main thread: SIGINT and SIGTERM that arrive inside the block are held until it
    ends, then delivered to the handlers that were in place (Ctrl-C's KeyboardInterrupt, the
    sweep's handler, or nothing where they are ignored), even when the block raises. A
    KeyboardInterrupt inside SQLAlchemy's commit can leave the thread's session unusable, so
    every later write of the study (the interrupted trial, the parent run's end) fails with
    Optuna's "An exception is raised during the commit"."""
    if threading.current_thread() is not threading.main_thread() or _holding[0]:
        yield
        return
    held: list[int] = []

    def hold(signum: int, _frame: object) -> None:
        held.append(signum)

    old = {s: signal.signal(s, hold) for s in (signal.SIGINT, signal.SIGTERM)}
    _holding[0] = True
    try:
        yield
    finally:
        _holding[0] = False
        for sig, handler in old.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        if held:
            signal.raise_signal(held[0])


class WholeCallStorage(RDBStorage):
    """Optuna's RDB storage whose every call on the main thread runs to its end before a
    signal is delivered (:func:`signals_held`): a Ctrl-C lands between two storage writes,
    never inside one."""


def _held(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def call(self: RDBStorage, *args: Any, **kwargs: Any) -> Any:
        with signals_held():
            return method(self, *args, **kwargs)

    return call


for _name in dir(RDBStorage):  # every method, private ones too: Optuna's cache calls them
    if not _name.startswith("__") and inspect.isfunction(inspect.getattr_static(RDBStorage,
                                                                              _name)):
        setattr(WholeCallStorage, _name, _held(getattr(RDBStorage, _name)))


def make_storage(url: str, *, heartbeat_interval: int | None = DEFAULT_HEARTBEAT_INTERVAL,
                 grace_period: int | None = None, max_retry: int | None = DEFAULT_MAX_RETRY,
                 on_stale: StaleTrialHook | None = None) -> RDBStorage:
    """An RDB storage with heartbeats for ``url`` (postgresql, mysql or sqlite).

    ``heartbeat_interval``: seconds between heartbeats of a running trial (None: no heartbeats,
    a dead worker's trial then stays RUNNING). ``grace_period``: seconds without a heartbeat
    after which the trial is failed by another worker (default 2 x interval; must exceed the
    interval). ``max_retry``: how often a stale trial's parameters are re-queued (None: always).
    ``on_stale(study, trial)`` runs in the worker that found the stale trial, before the retry.
    Raises StudyError (password hidden) for a bad URL or a database that cannot be reached.
    """
    kind = dialect(url)
    if heartbeat_interval is not None and heartbeat_interval <= 0:
        raise StudyError(f"heartbeat_interval must be a positive number of seconds, but got "
                         f"{heartbeat_interval}")
    if grace_period is not None and (heartbeat_interval is None or
                                     grace_period <= heartbeat_interval):
        raise StudyError(f"grace_period must be longer than heartbeat_interval, but got "
                         f"grace_period={grace_period}, heartbeat_interval={heartbeat_interval}")
    if max_retry is not None and max_retry < 0:
        raise StudyError(f"max_retry must be >= 0 or None, but got {max_retry}")
    engine_kwargs: dict[str, object] = {"pool_pre_ping": True}
    if kind == "postgresql" and "connect_timeout" not in url:
        engine_kwargs["connect_args"] = {"connect_timeout": 10}
    callback = _OnStaleThenRetry(max_retry, on_stale) if heartbeat_interval else None
    import sqlalchemy

    try:
        # workers starting together on a new database would race to create Optuna's tables
        # (duplicate key errors, two version rows): one at a time, under the storage's lock
        engine = sqlalchemy.create_engine(with_driver(url), **engine_kwargs)
        try:
            with _engine_lock(engine, "tracker-optuna-schema", 120), warnings.catch_warnings():
                # heartbeat_interval is flagged experimental by Optuna; it is the feature we need
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                return WholeCallStorage(with_driver(url), engine_kwargs=engine_kwargs,
                                        heartbeat_interval=heartbeat_interval,
                                        grace_period=grace_period,
                                        heartbeat_stale_trial_callback=callback)
        finally:
            engine.dispose()
    except StudyError:
        raise
    except ImportError as exc:
        raise StudyError(f"no database driver for {safe_url(url)!r}: install it "
                         f"(PostgreSQL: pip install 'triton-tracker[postgres]')") from exc
    except Exception as exc:
        reason = _scrub(str(getattr(exc, "orig", None) or exc).strip(), url)
        raise StudyError(f"cannot open the study storage {safe_url(url)!r}: "
                         f"{reason.splitlines()[0] if reason else type(exc).__name__}") from exc


def _lock_key(name: str) -> int:
    digest = hashlib.blake2b(name.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


_local_locks: dict[str, threading.Lock] = {}


@contextlib.contextmanager
def storage_lock(storage: RDBStorage, name: str, timeout_s: float = 300) -> Iterator[None]:
    """Hold a lock named ``name`` shared by every process using ``storage``.

    PostgreSQL: ``pg_advisory_xact_lock``; MySQL: ``GET_LOCK``; sqlite: ``flock`` on
    ``<database>.lock``. A worker that dies loses its connection or file, so the lock is
    released by the database or the kernel; it never outlives its holder.
    """
    with _engine_lock(storage.engine, name, timeout_s):
        yield


@contextlib.contextmanager
def _engine_lock(engine: Any, name: str, timeout_s: float) -> Iterator[None]:
    import sqlalchemy

    kind = engine.dialect.name
    if kind == "sqlite":
        database = engine.url.database
        if not database or database == ":memory:":
            lock = _local_locks.setdefault(name, threading.Lock())
            with lock:
                yield
            return
        path = Path(f"{database}.lock")
        with open(path, "a") as handle:
            deadline = time.monotonic() + timeout_s
            while True:
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise StudyError(
                            f"waited {timeout_s:.0f}s for the study lock {path}") from None
                    time.sleep(0.05)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
        return
    with engine.connect() as conn:
        try:
            if kind == "postgresql":
                # a transaction-level lock: released by the rollback below, or by the server
                # when the connection dies; it can never stay behind on a pooled connection
                conn.execute(sqlalchemy.text(f"SET LOCAL lock_timeout = {int(timeout_s * 1000)}"))
                conn.execute(sqlalchemy.text("SELECT pg_advisory_xact_lock(:k)"),
                             {"k": _lock_key(name)})
            else:
                got = conn.execute(sqlalchemy.text("SELECT GET_LOCK(:k, :t)"),
                                   {"k": name[:64], "t": int(timeout_s)}).scalar()
                if got != 1:
                    raise StudyError(f"could not take the study lock {name!r} within "
                                     f"{timeout_s:.0f}s")
        except sqlalchemy.exc.DBAPIError as exc:
            raise StudyError(f"could not take the study lock {name!r} within "
                             f"{timeout_s:.0f}s: {exc.orig}") from exc
        try:
            yield
        finally:
            if kind != "postgresql":
                conn.execute(sqlalchemy.text("SELECT RELEASE_LOCK(:k)"), {"k": name[:64]})
            conn.rollback()


@dataclass(frozen=True)
class Worker:
    """Who runs a trial: host name, the GPUs it drives (``"0"``, ``"0,1"``, ``"all"`` or
    ``"none"``) and its process id. ``tags()`` are the MLflow tags of its child runs."""

    host: str
    gpus: str
    pid: int

    @property
    def id(self) -> str:
        return f"{self.host}:{self.pid}"

    def tags(self) -> dict[str, str]:
        return {"worker.host": self.host, "worker.gpu": self.gpus, "worker.pid": str(self.pid),
                "worker.id": self.id}


def worker_identity(gpus: Sequence[int] | str | None = None,
                    environ: dict[str, str] | None = None) -> Worker:
    """This process as a worker. ``gpus`` (the spec's ``server.gpus`` or ``--gpus``) wins;
    else ``CUDA_VISIBLE_DEVICES``; else ``"none"``. ``TRACKER_WORKER_HOST`` overrides the host
    name (a Kubernetes pod name is more useful than a container id)."""
    env = os.environ if environ is None else environ
    if isinstance(gpus, str):
        label = gpus
    elif gpus is not None:
        label = ",".join(str(g) for g in gpus) if len(gpus) else "none"
    else:
        label = env.get("CUDA_VISIBLE_DEVICES", "").strip() or "none"
    host = env.get("TRACKER_WORKER_HOST") or socket.gethostname()
    return Worker(host=host, gpus=label, pid=os.getpid())
