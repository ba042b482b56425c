"""The study's reference answers, stored once: the default configuration's answers to the
output check's probes (outputs/trials.py), as ``check/reference.npz`` on the parent run,
named by the study's user attribute ``tracker.check_reference_run``, so a resumed study or
another worker compares against the same answers."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from optuna.storages import fail_stale_trials
from optuna.trial import TrialState

from tracker import tags
from tracker.outputs import probes
from tracker.outputs.probes import ProbeSet, Tolerance
from tracker.tracking import runs
from tracker.trial_record import TrialRecord

if TYPE_CHECKING:
    import optuna
    from mlflow import MlflowClient

REFERENCE_ATTR = tags.CHECK_REFERENCE
ARTIFACT = probes.ARTIFACT
WAIT_S = 900.0  # how long a worker waits for another's default configuration to answer


_CACHE: dict[str, ProbeSet] = {}


def store_reference(study: optuna.Study, client: MlflowClient, run_id: str,
                    reference: ProbeSet, tol: Tolerance) -> None:
    """The reference on the parent run; the run and the tolerances named on the study (what
    ``tracker promote`` copies onto the registered version, for the deploy check)."""
    runs.log_files(client, run_id, {ARTIFACT: probes.dumps(reference)})
    ignored = f"; outputs ignored: {', '.join(sorted(tol.ignore))}" if tol.ignore else ""
    runs.set_tags(client, run_id, {tags.CHECK: (
        f"{len(reference.inputs)} probes, outputs {reference.outputs} within rtol "
        f"{tol.rtol:g}, atol {tol.atol:g}{ignored}")})
    study.set_user_attr(tags.CHECK_TOLERANCE, {"rtol": tol.rtol, "atol": tol.atol,
                                               "ignore": sorted(tol.ignore)})
    study.set_user_attr(REFERENCE_ATTR, run_id)
    _CACHE[run_id] = reference


def load_reference(client: MlflowClient, run_id: str) -> ProbeSet:
    if run_id not in _CACHE:
        _CACHE[run_id] = probes.loads(runs.read_file(client, run_id, ARTIFACT))
    return _CACHE[run_id]


def _baseline_running(study: optuna.Study) -> bool:
    """Whether another worker is running the default configuration now. A waiting default
    does not count: this worker may be the one to run it, after the trial that waits."""
    return any(TrialRecord.of(t).baseline for t in study.get_trials(
        deepcopy=False, states=(TrialState.RUNNING,)))


def find_reference(study: optuna.Study, client: MlflowClient,
                   wait_s: float = WAIT_S) -> ProbeSet | None:
    """The study's reference answers, waiting (up to ``wait_s``) while another worker's
    default configuration is still answering; None when the study has none (yet)."""
    deadline = time.monotonic() + wait_s
    while True:
        run_id = study.user_attrs.get(REFERENCE_ATTR)
        if run_id:
            return load_reference(client, str(run_id))
        if not _baseline_running(study) or time.monotonic() > deadline:
            return None
        time.sleep(1.0)
        # a killed worker's default stops holding us up once its heartbeat is stale
        fail_stale_trials(study)
