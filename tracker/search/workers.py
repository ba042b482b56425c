"""What a worker does so that many of them can share one study (Optuna's ask/tell loop).

Optuna's ``study.optimize`` runs heartbeats and stale-trial checks itself, but the tuner drives
its own ask/tell loop (it measures a trial, then tells), so the same three steps are done here:

- :func:`ask_within_budget`: fail stale trials of dead workers (and re-queue them), then ask for
  a trial only while ``COMPLETE + RUNNING < n_trials`` across all workers, under the storage's
  lock so that two workers never both take the last trial. ``n_trials`` is the study's budget,
  not each worker's. Returns None when the study has its ``n_trials`` complete trials.
- :func:`heartbeat`: record the trial's heartbeat every ``heartbeat_interval`` seconds while it
  runs, so that other workers can tell it from a dead one.
- :func:`wait_for_duplicate`: a configuration proposed to two workers at once is measured once.
  The trial with the lower number measures; the other waits for its result and reuses it. If
  the measuring worker dies, its trial is failed by heartbeat and the waiter measures instead.
"""

from __future__ import annotations

import contextlib
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

import optuna
from optuna.storages import RDBStorage
from optuna.trial import FrozenTrial, TrialState

from tracker.errors import StudyError
from tracker.search.optuna_study import same_params
from tracker.search.storage import storage_lock
from tracker.trial_record import Attr

_log = optuna.logging.get_logger("tracker")
SUGGEST_WAIT_S = 30.0  # longest wait for an earlier trial that is still being suggested


@dataclass(frozen=True)
class Budget:
    """The study's trial counts across all workers. ``complete`` counts distinct
    configurations: a COMPLETE trial that repeats an earlier one (``duplicate_of``: its result
    reused) is in ``repeats`` instead, and does not use up ``n_trials``."""

    complete: int
    running: int
    waiting: int
    failed: int
    repeats: int = 0

    def done(self, n_trials: int) -> bool:
        return self.complete >= n_trials


def budget(study: optuna.Study) -> Budget:
    trials = study.get_trials(deepcopy=False)
    count = {state: 0 for state in TrialState}
    repeats = 0
    for trial in trials:
        count[trial.state] += 1
        if trial.state == TrialState.COMPLETE and Attr.DUPLICATE_OF in trial.user_attrs:
            repeats += 1
    return Budget(complete=count[TrialState.COMPLETE] - repeats,
                  running=count[TrialState.RUNNING], waiting=count[TrialState.WAITING],
                  failed=count[TrialState.FAIL], repeats=repeats)


def fail_stale_trials(study: optuna.Study) -> None:
    """Mark RUNNING trials without a recent heartbeat FAIL and run the storage's stale-trial
    callback for each (retry, MLflow run FAILED). No-op for storages without heartbeats."""
    with warnings.catch_warnings():
        # experimental in Optuna; it is the documented way to reclaim a dead worker's trial
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)


def _ask(study: optuna.Study) -> optuna.Trial:
    with warnings.catch_warnings():
        # Optuna warns that heartbeats are meant for optimize(); this loop keeps them itself
        warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed")
        return study.ask()


def ask_within_budget(study: optuna.Study, storage: RDBStorage, n_trials: int, *,
                      poll_s: float = 1.0,
                      should_stop: Callable[[], bool] | None = None) -> optuna.Trial | None:
    """A new RUNNING trial (its first heartbeat recorded), or None when the study already has
    ``n_trials`` complete trials or ``should_stop()`` says so.

    While the other workers' running trials could fill the budget, this waits (``poll_s``): one
    of them may still fail, and its retry or a replacement is then this worker's to run.
    """
    if n_trials < 1:
        raise StudyError(f"n_trials must be >= 1, but got {n_trials}")
    lock_name = f"tracker-study-{study.study_name}"
    while True:
        if should_stop is not None and should_stop():
            return None
        fail_stale_trials(study)
        with storage_lock(storage, lock_name):
            now = budget(study)
            if now.done(n_trials):
                return None
            if now.complete + now.running < n_trials:
                trial = _ask(study)
                if storage.get_heartbeat_interval() is not None:
                    storage.record_heartbeat(trial._trial_id)
                return trial
        time.sleep(poll_s)


@contextlib.contextmanager
def heartbeat(storage: RDBStorage, trial: optuna.Trial) -> Iterator[None]:
    """Record ``trial``'s heartbeat every ``heartbeat_interval`` seconds until the block ends.
    A failed write (a database blip) is logged and retried at the next beat."""
    interval = storage.get_heartbeat_interval()
    if interval is None:
        yield
        return
    stop = threading.Event()
    trial_id = trial._trial_id

    def beat() -> None:
        while not stop.wait(interval):
            try:
                storage.record_heartbeat(trial_id)
            except Exception as exc:
                _log.warning("trial %d: heartbeat not recorded: %s", trial.number, exc)

    thread = threading.Thread(target=beat, name=f"heartbeat-{trial.number}", daemon=True)
    storage.record_heartbeat(trial_id)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def wait_for_duplicate(study: optuna.Study, trial_number: int, params: Mapping[str, object], *,
                       poll_s: float = 1.0, timeout_s: float | None = None) -> FrozenTrial | None:
    """The COMPLETE trial whose parameters equal ``params`` (reuse its values instead of
    measuring), or None when this trial must be measured.

    If an earlier trial (lower number) with the same parameters is RUNNING in another worker,
    wait for it: COMPLETE -> returned; failed (also by heartbeat: stale trials are checked while
    waiting) -> None, this trial measures. An earlier RUNNING trial that has fewer parameters
    than ``params`` is still being suggested and may turn out the same: wait until it has them
    all (at most ``SUGGEST_WAIT_S``), or two workers could each miss the other and both measure.
    Keep :func:`heartbeat` running while waiting.
    """
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    suggesting_since: dict[int, float] = {}
    while True:
        wait = False
        for other in study.get_trials(deepcopy=False,
                                      states=(TrialState.COMPLETE, TrialState.RUNNING)):
            if other.number == trial_number:
                continue
            earlier_running = other.state == TrialState.RUNNING and other.number < trial_number
            if earlier_running and len(other.params) < len(params):
                since = suggesting_since.setdefault(other.number, time.monotonic())
                wait = wait or time.monotonic() - since < SUGGEST_WAIT_S
                continue
            if not same_params(params, other.params):
                continue
            if other.state == TrialState.COMPLETE:
                return other
            wait = wait or earlier_running
        if not wait:
            return None
        if deadline is not None and time.monotonic() > deadline:
            return None
        time.sleep(poll_s)
        fail_stale_trials(study)
