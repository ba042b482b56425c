"""A Ctrl-C or SIGTERM never lands inside a write of the study storage (real Optuna storage on
sqlite): the signal is held until the storage call ends, then delivered as it would have been,
so the interrupted study can still record what it was doing."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import optuna
import pytest
import sqlalchemy
from optuna.trial import TrialState

from tracker.lifecycle import held
from tracker.search.storage import make_storage


def _interrupt_inside_the_first_insert(storage: optuna.storages.RDBStorage) -> list[str]:
    """SIGINT to this process while SQLAlchemy executes the first INSERT (inside a commit's
    transaction, where a KeyboardInterrupt would leave the session unusable)."""
    seen: list[str] = []

    @sqlalchemy.event.listens_for(storage.engine, "before_cursor_execute")
    def interrupt(conn: object, cursor: object, statement: str, *args: object) -> None:
        if statement.lstrip().upper().startswith("INSERT") and not seen:
            seen.append(statement)
            os.kill(os.getpid(), signal.SIGINT)
            seen.append("still inside the insert")

    return seen


def test_a_ctrl_c_inside_a_storage_write_waits_for_its_end(tmp_path: Path) -> None:
    storage = make_storage(f"sqlite:///{tmp_path / 'optuna.db'}", heartbeat_interval=None)
    study = optuna.create_study(study_name="s", storage=storage)
    seen = _interrupt_inside_the_first_insert(storage)
    with pytest.raises(KeyboardInterrupt):
        study.ask()
    assert seen[1:] == ["still inside the insert"], "the signal cut the write short"
    assert [t.state for t in study.get_trials()] == [TrialState.RUNNING], \
        "the trial the write created is recorded"
    trial = study.ask()  # the storage still works: the interrupted study can end its trials
    study.tell(trial, state=TrialState.FAIL)
    assert len(study.get_trials()) == 2


def test_held_signals_reach_the_handlers_in_place_even_when_the_block_raises() -> None:
    got: list[int] = []
    old = signal.signal(signal.SIGTERM, lambda signum, _frame: got.append(signum))
    try:
        with pytest.raises(ValueError), held():
            os.kill(os.getpid(), signal.SIGTERM)
            assert got == [], "delivered inside the block"
            raise ValueError("the block's own error")
        assert got == [signal.SIGTERM]
        with held(), held():  # nested: the outer block delivers, once
            os.kill(os.getpid(), signal.SIGTERM)
        assert got == [signal.SIGTERM, signal.SIGTERM]
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        with held():  # ignored before: still ignored after
            os.kill(os.getpid(), signal.SIGTERM)
    finally:
        signal.signal(signal.SIGTERM, old)
