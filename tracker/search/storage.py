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

A database that goes away (a PostgreSQL restart or failover) is waited for: a storage call
that loses its connection waits until the database answers again, for at most
``TRACKER_STORAGE_WAIT_S`` seconds (default :data:`DEFAULT_WAIT_S`), then runs again
(:func:`_waiting`); past that wait it raises :class:`StudyError` naming the database.

Passwords in storage URLs never appear in messages: :func:`safe_url` hides them.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import inspect
import os
import socket
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.storages import RDBStorage, RetryHeartbeatStaleTrialCallback
from optuna.trial import FrozenTrial

from tracker.errors import StudyError
from tracker.lifecycle import held, seconds_from_env

DEFAULT_HEARTBEAT_INTERVAL = 10
DEFAULT_MAX_RETRY = 3
DEFAULT_WAIT_S = 300.0  #: how long a storage call waits for a database that went away
WAIT_ENV = "TRACKER_STORAGE_WAIT_S"
SUPPORTED_DIALECTS = ("postgresql", "mysql", "sqlite")

StaleTrialHook = Callable[[optuna.Study, FrozenTrial], None]
_log = optuna.logging.get_logger("tracker")


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


class WholeCallStorage(RDBStorage):
    """Optuna's RDB storage whose every call on the main thread runs to its end before a
    signal is delivered (:func:`tracker.lifecycle.held`): a Ctrl-C lands between two storage
    writes, never inside one. A KeyboardInterrupt inside SQLAlchemy's commit would leave the
    thread's session unusable: every later write of the study (the interrupted trial, the
    parent run's end) would fail with Optuna's "An exception is raised during the commit".
    A call that loses the database's connection waits for it and runs again
    (:func:`_waiting`), once :attr:`wait_s` is set (after the storage is made)."""

    wait_s = 0.0  #: 0 while the storage is made: a database that is down then fails at once


def wait_s_from_env(environ: Mapping[str, str] | None = None) -> float:
    """``TRACKER_STORAGE_WAIT_S`` (seconds, >= 0), else :data:`DEFAULT_WAIT_S`."""
    return seconds_from_env(WAIT_ENV, DEFAULT_WAIT_S, environ, StudyError)


def _lost_connection(exc: BaseException) -> bool:
    """Whether ``exc`` or what caused it is SQLAlchemy's OperationalError or a connection it
    invalidated: the database went away (Optuna wraps a failed commit in its own
    StorageInternalError)."""
    import sqlalchemy

    seen: BaseException | None = exc
    for _ in range(10):
        if seen is None:
            return False
        if isinstance(seen, sqlalchemy.exc.DBAPIError) and seen.connection_invalidated:
            return True
        if isinstance(seen, sqlalchemy.exc.OperationalError):
            # no SQLSTATE (refused, reset), class 08 (connection) or 57P (shutting down,
            # starting up); a lock or statement timeout is no lost connection
            code = getattr(seen.orig, "pgcode", None) or getattr(seen.orig, "sqlstate", None)
            return code is None or str(code).startswith(("08", "57P"))
        seen = seen.__cause__ or seen.__context__
    return False


def _answers(engine: Any) -> bool:
    import sqlalchemy

    try:
        with engine.connect() as conn:
            conn.execute(sqlalchemy.text("SELECT 1"))
        return True
    except sqlalchemy.exc.SQLAlchemyError:
        return False


def wait_for_database(engine: Any, wait_s: float, why: BaseException) -> float:
    """Wait until the database of ``engine`` answers, at most ``wait_s`` seconds, and return
    the seconds waited; :class:`StudyError` naming it, the wait and ``why`` when it does not
    answer in time. Of the threads that wait at once (a trial's heartbeat and the loop), the
    first says so, and says when it answers again."""
    url = engine.url.render_as_string(hide_password=True)
    started = time.monotonic()
    says: bool | None = None
    try:
        while not _answers(engine):
            waited = time.monotonic() - started
            if waited >= wait_s:
                reason = _scrub(str(getattr(why, "orig", None) or why).strip(), str(engine.url))
                first = reason.splitlines()[0] if reason else type(why).__name__
                raise StudyError(f"the study storage {url} did not answer for {wait_s:g} s "
                                 f"({WAIT_ENV}): {first}") from why
            if says is None:
                with _waited_lock:
                    says = url not in _waited
                    _waited.add(url)
                if says:
                    _log.warning("the study storage %s does not answer; waiting up to %g s "
                                 "(%s)", url, wait_s, WAIT_ENV)
            time.sleep(min(1.0, max(wait_s - waited, 0.01)))
    finally:
        if says:
            with _waited_lock:
                _waited.discard(url)
    waited = time.monotonic() - started
    if says:
        _log.warning("the study storage %s answers again after %.0f s", url, waited)
    return waited


_waited: set[str] = set()  # the databases a thread of this process says it waits for
_waited_lock = threading.Lock()


_depth = threading.local()  # storage calls in progress on this thread (the outermost waits)


def _waiting(engine: Any, wait_s: float, call: Callable[[], Any]) -> Any:
    """``call()``; when the outermost storage call of this thread loses the database, the
    database is waited for (:func:`wait_for_database`) and the call runs again. A call that
    fails so twice while the database answers at once raises the second failure."""
    depth = getattr(_depth, "n", 0)
    if depth or not wait_s:
        return call()
    quick = 0
    while True:
        _depth.n = depth + 1
        try:
            return call()
        except Exception as exc:
            if not _lost_connection(exc):
                raise
            failure = exc
        finally:
            _depth.n = depth
        if wait_for_database(engine, wait_s, failure) < 0.5:
            quick += 1
            if quick > 1:
                raise failure


def _held(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def call(self: WholeCallStorage, *args: Any, **kwargs: Any) -> Any:
        def once() -> Any:
            with held():
                return method(self, *args, **kwargs)

        return _waiting(self.engine, self.wait_s, once)

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
    wait_s = wait_s_from_env()
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
                made = WholeCallStorage(with_driver(url), engine_kwargs=engine_kwargs,
                                        heartbeat_interval=heartbeat_interval,
                                        grace_period=grace_period,
                                        heartbeat_stale_trial_callback=callback)
                made.wait_s = wait_s
                return made
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
    with _engine_lock(storage.engine, name, timeout_s, getattr(storage, "wait_s", 0.0)):
        yield


@contextlib.contextmanager
def _engine_lock(engine: Any, name: str, timeout_s: float,
                 wait_s: float = 0.0) -> Iterator[None]:
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
    conn = _waiting(engine, wait_s, lambda: _take_lock(engine, name, timeout_s))
    try:
        yield
    finally:
        try:
            if kind != "postgresql":
                conn.execute(sqlalchemy.text("SELECT RELEASE_LOCK(:k)"), {"k": name[:64]})
            conn.rollback()
        except sqlalchemy.exc.DBAPIError as exc:
            if not _lost_connection(exc):  # lost: the database released it with the connection
                raise
        finally:
            with contextlib.suppress(sqlalchemy.exc.SQLAlchemyError):
                conn.close()


def _take_lock(engine: Any, name: str, timeout_s: float) -> Any:
    """A new connection of ``engine`` that holds the lock ``name`` (PostgreSQL: for its
    transaction; MySQL: until released); closed again when the lock cannot be taken
    (:class:`StudyError`; a lost connection raises SQLAlchemy's error, as connecting does)."""
    import sqlalchemy

    conn = engine.connect()
    try:
        if engine.dialect.name == "postgresql":
            # a transaction-level lock: released by the rollback at the end, or by the server
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
    except BaseException as exc:
        with contextlib.suppress(sqlalchemy.exc.SQLAlchemyError):
            conn.close()
        if isinstance(exc, sqlalchemy.exc.DBAPIError) and not _lost_connection(exc):
            raise StudyError(f"could not take the study lock {name!r} within "
                             f"{timeout_s:.0f}s: {exc.orig}") from exc
        raise
    return conn


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
