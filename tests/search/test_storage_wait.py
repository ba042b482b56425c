"""The study storage's wait for a database that went away (tracker/search/storage.py): which
errors are a lost connection, the bounded wait and its message, and a call that runs again.
A real PostgreSQL restarted under two `tracker tune` workers is
tests/tuning/test_scaleout_tune.py; here a closed port and a real sqlite database."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy
from sqlalchemy.exc import OperationalError, ProgrammingError

from tracker.errors import StudyError
from tracker.search import storage
from tracker.search.storage import WAIT_ENV, make_storage, wait_for_database, wait_s_from_env


class _Orig(Exception):
    def __init__(self, pgcode: str | None) -> None:
        super().__init__("boom")
        self.pgcode = pgcode


@pytest.mark.parametrize(("error", "lost"), [
    (OperationalError("SELECT 1", {}, _Orig(None)), True),  # refused, reset: no SQLSTATE
    (OperationalError("SELECT 1", {}, _Orig("57P01")), True),  # admin shutdown
    (OperationalError("SELECT 1", {}, _Orig("08006")), True),  # connection failure
    (OperationalError("SELECT 1", {}, _Orig("55P03")), False),  # lock timeout
    (ProgrammingError("SELECT 1", {}, _Orig("42P01")), False),  # no such table
    (ValueError("not the database"), False),
])
def test_which_errors_are_a_lost_connection(error: Exception, lost: bool) -> None:
    assert storage._lost_connection(error) is lost
    try:  # as Optuna raises it: its own error from the database's
        raise RuntimeError("An exception is raised during the commit.") from error
    except RuntimeError as wrapped:
        assert storage._lost_connection(wrapped) is lost


@pytest.mark.parametrize(("value", "expected"), [("", 300.0), ("0", 0.0), ("2.5", 2.5)])
def test_the_wait_comes_from_the_environment(value: str, expected: float) -> None:
    assert wait_s_from_env({WAIT_ENV: value}) == expected


@pytest.mark.parametrize("value", ["-1", "soon", "nan"])
def test_a_bad_wait_names_the_variable_and_the_value(value: str) -> None:
    with pytest.raises(StudyError, match=f"^{WAIT_ENV} must be a number of seconds >= 0, "
                                         f"but got '{value}'$"):
        wait_s_from_env({WAIT_ENV: value})


def test_a_database_that_stays_away_ends_the_wait_with_one_line(
        caplog: pytest.LogCaptureFixture) -> None:
    engine = sqlalchemy.create_engine("postgresql+psycopg2://u:s3cret@127.0.0.1:1/optuna",
                                      connect_args={"connect_timeout": 2})
    why = OperationalError("SELECT 1", {}, _Orig(None))
    other: list[BaseException] = []

    def also_waits() -> None:  # another thread of the worker (a trial's heartbeat)
        try:
            wait_for_database(engine, 0.5, why)
        except StudyError as exc:
            other.append(exc)

    thread = threading.Thread(target=also_waits)
    started = time.monotonic()
    thread.start()
    with pytest.raises(StudyError) as raised:
        wait_for_database(engine, 0.5, why)
    thread.join(timeout=10)
    assert time.monotonic() - started < 10 and len(other) == 1
    text = str(raised.value)
    assert text.startswith("the study storage postgresql+psycopg2://u:***@127.0.0.1:1/optuna "
                           f"did not answer for 0.5 s ({WAIT_ENV}): ")
    assert "\n" not in text and "s3cret" not in text + caplog.text
    assert caplog.text.count("does not answer; waiting up to 0.5 s") == 1  # said once


def test_a_call_that_lost_the_database_runs_again(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(WAIT_ENV, "5")
    made = make_storage(f"sqlite:///{tmp_path / 'optuna.db'}", heartbeat_interval=None)
    assert isinstance(made, storage.WholeCallStorage) and made.wait_s == 5
    calls: list[int] = []
    real = storage.RDBStorage.get_all_studies

    def drops_once(self: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise OperationalError("SELECT", {}, _Orig(None))
        return real(self)

    wrapped = storage._held(drops_once)
    assert wrapped(made) == [] and len(calls) == 2  # the database answered: run again

    def always(self: Any) -> Any:
        raise OperationalError("SELECT", {}, _Orig(None))

    with pytest.raises(OperationalError):  # it answers, yet the call fails: raised
        storage._held(always)(made)
