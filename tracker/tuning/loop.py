"""The study loop: spec -> study -> trials -> report (one trial: trial.py and
candidate/measurement.py).

``run_study(spec_path, options, after_search=...)`` runs (or resumes) a study until one of:
``n_trials`` COMPLETE trials in the study (across every run and worker), the timeout,
``patience`` trials without improvement, every configuration of a finite space tried, or as
many failed trials as ``n_trials``. Then the last worker runs ``after_search`` (the
confirmation, which :mod:`tracker.tuning.tune` passes in), writes the report on the parent
run and ends it.

Ctrl-C / SIGTERM: the server is stopped, the current trial is FAIL in Optuna (its parameters
queued again) and its child run KILLED, the parent run KILLED, and
:class:`~tracker.lifecycle.Interrupted` is raised (the CLI exits 130 / 143). The same
command resumes: finished trials are kept.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.distributions import BaseDistribution

from tracker.candidate.measurement import Bench, resolve_serving
from tracker.conclusion.finish import Conclusion, finish_study, spec_argument
from tracker.errors import TrackerError
from tracker.invocation import remembered
from tracker.invocation.progress import Progress
from tracker.invocation.session import Session, StudyContext, TuneOptions
from tracker.lifecycle import held, received_signal
from tracker.measure.host import gpu_tags, machine_tags
from tracker.metrics import fmt
from tracker.redact import redact_url
from tracker.search import optuna_study
from tracker.search.baseline import Baseline
from tracker.search.storage import make_storage, storage_lock, worker_identity
from tracker.search.warm_start import WarmPlan
from tracker.search.workers import ask_within_budget, budget, heartbeat
from tracker.spec import StudySpec
from tracker.tracking import mlflow_run, outbox, patience, runs
from tracker.tracking.machine import record_machine
from tracker.tracking.scaleout import (
    PARENT_RUN_ATTR,
    attach_study_run,
    fail_dead_trial_run,
    mark_worker_run,
)
from tracker.trial_record import TrialRecord, write_worker
from tracker.triton.server.base import TritonServer
from tracker.triton.server.live import stop_all
from tracker.tuning.preflight import check_study
from tracker.tuning.trial import abandon_trial, run_trial


@dataclass
class TuneResult:
    study_name: str
    storage: str                      # redacted
    parent_run_id: str
    experiment_id: str
    summary: str
    stop_reason: str
    complete: int
    best_trial: int | None
    best_run_id: str | None
    wall_s: float


# ---- the loop ------------------------------------------------------------------------------

def _open_parent(study: optuna.Study, storage: optuna.storages.RDBStorage, spec: StudySpec,
                 uri: str, storage_url: str, worker_tags: dict[str, str],
                 params: dict[str, object]) -> tuple[runs.StudyRun, bool]:
    """(the parent run, whether this invocation owns it). A worker joins the parent of the
    study's other live workers; otherwise it opens a new one that adopts earlier trials."""
    name = study.study_name
    with storage_lock(storage, f"tracker-parent-{name}"):
        known = study.user_attrs.get(PARENT_RUN_ATTR)
        # join while it is RUNNING: a worker that started a moment earlier may not have a
        # running trial yet, and a parent left RUNNING by killed workers is still the study's
        if known:
            joined = attach_study_run(uri, str(known), name)
            if joined is not None:
                own = os.environ.get("MLFLOW_RUN_ID")
                if own and own != joined.run_id:
                    mark_worker_run(joined, own, worker_tags)
                return joined, False
        placed = mlflow_run.place(patience.client(uri), spec.experiment_name)
        parent = runs.open_study_run(tracking_uri=uri, experiment=spec.experiment_name,
                                     study_name=name, storage=storage_url,
                                     run_name=name, params=params, run_id=placed.run_id)
        mlflow_run.settle(parent.client, placed, parent.run_id, study=name)
        if known and known != parent.run_id:
            runs.mark_unfinished(parent.client, [str(known)], "KILLED")
        study.set_user_attr(PARENT_RUN_ATTR, parent.run_id)
        return parent, True


#: repeated configurations a study asks past before it stops (at least; else n_trials)
MIN_REPEATS = 10


def _last_worker(study: optuna.Study) -> bool:
    """No other worker has a trial running: this one ends the shared parent run. (With
    several workers the parent is ended by whichever finishes last, not by its creator.)"""
    try:
        return budget(study).running == 0
    except Exception:  # the storage is gone: end the parent rather than leave it RUNNING
        return True


def stop_reason(study: optuna.Study, spec: StudySpec, started: float,
                 space_size: int | None) -> str:
    search = spec.search
    if search.timeout_s is not None and time.monotonic() - started >= search.timeout_s:
        return f"timeout of {search.timeout_s:g} s reached"
    if search.patience is not None:
        since = optuna_study.trials_without_improvement(study, spec.objectives)
        if since >= search.patience:
            return f"no improvement in the last {since} trials (patience {search.patience})"
    failed = len(optuna_study.failed(study))
    if failed >= search.n_trials:
        return f"{failed} trials failed (as many as n_trials): see the failed runs' notes"
    repeats = budget(study).repeats
    if repeats >= max(MIN_REPEATS, search.n_trials):
        return (f"the sampler proposed {repeats} configurations already measured (as many "
                f"as n_trials, at least {MIN_REPEATS}): the space is exhausted or the "
                "sampler keeps returning to the same configurations")
    if space_size is not None:
        tried = {tuple(sorted(t.params.items())) for t in optuna_study.finished(study)
                 if not TrialRecord.of(t).exact}  # an approximated baseline
        if len(tried) >= space_size:
            return f"all {space_size} configurations of the search space tried"
    return ""


def best_text(study: optuna.Study, objectives: Mapping[str, str]) -> str:
    """The progress line's best: the front's point best on the first objective, as
    ``tracker promote`` picks without a confirmation, and how many more are on the front."""
    best = optuna_study.best_trials(study)
    if not best:
        return "none feasible yet"
    metric, direction = next(iter(objectives.items()))
    sign = 1.0 if direction == "maximize" else -1.0

    def first(trial: optuna.trial.FrozenTrial) -> float:
        value = TrialRecord.of(trial).metrics.get(metric)
        return sign * value if isinstance(value, float) else float("-inf")

    top = max(best, key=first)
    value = TrialRecord.of(top).metrics.get(metric)
    shown = fmt(metric, value) if isinstance(value, float) else "?"
    return f"trial {top.number} ({metric} {shown})" + (
        f" +{len(best) - 1} on the front" if len(best) > 1 else "")


def run_study(spec_path: str | Path, options: TuneOptions | None = None, *,
              after_search: Callable[[StudyContext], None] | None = None) -> TuneResult:
    """Run or resume the study of ``spec_path``: the search, then ``after_search`` (the
    confirmation, :func:`tracker.tuning.tune.tune`) on the last worker, then the
    conclusion. Raises TrackerError for user-facing failures and :class:`Interrupted` after
    Ctrl-C / SIGTERM (everything cleaned up). Records an earlier invocation kept for MLflow
    are written first; a tracking server that does not answer is waited for
    (tracking/patience.py) and, past the wait, stops the study with TrackingUnavailable
    naming what is kept and how to resume."""
    options = options or TuneOptions()
    started = time.monotonic()
    session = Session.open(spec_path, options)
    where = outbox.folder(session.spec.study_name)
    try:
        wait_s = patience.wait_seconds(session.spec.mlflow.wait_s)
    except TrackerError:
        session.close()
        raise
    with patience.waiting(wait_s, _say, lambda: outbox.kept_text(where)) as wait:
        try:
            try:
                outbox.replay(session.client, where, _say)
            except TrackerError:
                session.close()
                raise
            return _run(session, options, started, after_search, wait)
        except patience.TrackingUnavailable as exc:
            command = f"tracker tune {spec_argument(session.spec.source)}"
            raise patience.TrackingUnavailable(outbox.stop_line(exc, where, command)) from exc


def _say(text: str) -> None:
    print(text, flush=True)


def _run(session: Session, options: TuneOptions, started: float,
         after_search: Callable[[StudyContext], None] | None, wait: patience.Wait) -> TuneResult:
    spec, uri, storage_url = session.spec, session.tracking_uri, session.storage_url
    _check(session)
    dists, base, grid_size = _search_space(session)
    warm = _warm_start(session, dists, base)
    if redact_url(uri) != uri:  # MLflow prints "View run ... at: <uri>" on each run's end
        os.environ["MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"] = "true"
    worker = worker_identity(spec.server.gpus)
    storage, study = _open_study(session, options, dists, base)
    try:
        parent, _created = _open_parent(study, storage, spec, uri, storage_url, worker.tags(),
                                        _study_params(spec, storage_url, grid_size))
    except TrackerError:
        session.close()
        raise
    progress: Progress | None = None
    ctx: StudyContext | None = None
    status, stop, away = "FAILED", "", False
    try:
        with session.guarded():
            try:
                server, machine = _start(session, storage, study, base, parent)
                progress = _progress(spec, study, options, grid_size, storage_url, parent)
                remembered.begin(study, storage, parent, session, warm, progress.line)
                wait.report = progress.line
                ctx = StudyContext(session, dists, study, parent, Bench(
                    spec, session.configuration, server, resolve_serving(
                        spec, server, session.configuration), options.load_client), progress,
                    worker_tags={**worker.tags(), **machine}, store_model=options.store_model)
                stop = _loop(ctx, storage, worker.id, started, grid_size, warm.plan)
                if after_search is not None and _last_worker(study):
                    after_search(ctx)
                status = "FINISHED"
            except KeyboardInterrupt:
                status, stop = "KILLED", f"interrupted by {signal.Signals(received_signal()).name}"
                raise
            except patience.TrackingUnavailable:
                away = True
                raise
    finally:
        with held():
            session.close()
            if progress is not None:
                progress.close()
            if away:  # the parent's end waits in the outbox with the trials' records
                if _last_worker(study):
                    outbox.keep(outbox.folder(study.study_name), outbox.STUDY_RUN,
                                [outbox.RunWrites(parent.run_id, end=status)])
            elif ctx is None:  # setup failed: the parent run must not stay RUNNING
                with contextlib.suppress(Exception):
                    if _last_worker(study):
                        runs.finish_run(parent.client, parent.run_id, status)
            else:
                result = finish_study(ctx, status=status, owner=_last_worker(study),
                                      stop_reason=stop,
                                      wall_s=time.monotonic() - started)
    if progress is None:  # unreachable: the loop ran, so setup did
        raise RuntimeError("internal: study finished without progress output")
    return _ended(progress, result, session, parent, stop, study, started)


# ---- tune's steps --------------------------------------------------------------------------

def _check(session: Session) -> None:
    """tracker check's checks, before anything is stored or measured (the session closed
    when they fail)."""
    try:
        check_study(session.spec, session.configuration, session.start_server())
    except TrackerError:
        session.close()
        raise


def _warm_start(session: Session, dists: dict[str, BaseDistribution],
                base: Baseline) -> remembered.Resolved:
    """The earlier study ``search.warm_start`` names, read from MLflow (session closed when
    it must be refused)."""
    try:
        return remembered.resolve(session.spec, session.configuration, session.client,
                                  (dists, base.params), session.storage_url,
                                  gpu_tags(session.start_server().gpu_set()))
    except TrackerError:
        session.close()
        raise


def _search_space(session: Session) -> tuple[dict[str, BaseDistribution], Baseline, int | None]:
    """(the space's distributions widened to hold the default configuration, the default's
    parameters, the number of configurations of a finite space)."""
    dists, base = remembered.space_of(session.spec, session.configuration)
    return dists, base, _size(dists)


def _open_study(session: Session, options: TuneOptions, dists: dict[str, BaseDistribution],
                base: Baseline) -> tuple[optuna.storages.RDBStorage, optuna.Study]:
    """The storage (heartbeats; a dead worker's trial fails its MLflow run too) and the
    study in it, with the spec's sampler (a grid starts at the default's point)."""
    spec = session.spec

    def on_stale(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        record = TrialRecord.of(trial)
        fail_dead_trial_run(session.client, record.run_id, trial_number=trial.number,
                            worker=record.worker)

    beats = {k: v for k, v in (("heartbeat_interval", options.heartbeat_interval),
                               ("grace_period", options.grace_period)) if v is not None}
    storage = make_storage(session.storage_url, on_stale=on_stale, **beats)
    sampler = optuna_study.make_sampler(spec.search.sampler, seed=spec.search.seed,
                                        n_objectives=len(spec.objectives), distributions=dists,
                                        default=base.params if base.is_exact else None)
    return storage, optuna_study.open_study(storage, spec.study_name,
                                            objectives=spec.objectives, sampler=sampler)


def _study_params(spec: StudySpec, storage_url: str, grid_size: int | None) -> dict[str, object]:
    """The parent run's parameters: "study." keeps them apart from MLproject parameters
    (logged as given, '' included) and from the best trial's field-path params."""
    return {f"study.{k}": v for k, v in {
        "spec": str(spec.source or ""), "model": spec.model.label, "name": spec.study_name,
        "sampler": spec.search.sampler, "n_trials": spec.search.n_trials,
        "objectives": dict(spec.objectives),
        "constraints": {k: v.model_dump(exclude_none=True) for k, v in spec.constraints.items()},
        "storage": redact_url(storage_url), "server_mode": spec.server.mode,
        "server_strategy": spec.server.strategy, "space_size": grid_size or "continuous",
        "concurrency": spec.load.concurrency_levels()}.items()}


def _start(session: Session, storage: optuna.storages.RDBStorage, study: optuna.Study,
           base: Baseline, parent: runs.StudyRun) -> tuple[TritonServer, dict[str, str]]:
    """The default configuration queued (once however many workers start at once:
    check-then-enqueue under a lock), the server started, the machine's tags recorded on the
    parent run: (the server, those tags, for every trial's run too)."""
    with storage_lock(storage, f"tracker-baseline-{session.spec.study_name}"):
        optuna_study.enqueue_baseline(study, base.params, base.exact)
    server = session.start_server()
    machine = machine_tags(server.gpu_set())
    record_machine(parent.client, parent.run_id, machine)
    return server, machine


def _progress(spec: StudySpec, study: optuna.Study, options: TuneOptions,
              grid_size: int | None, storage_url: str, parent: runs.StudyRun) -> Progress:
    """The progress output, opened with the study's line."""
    progress = Progress(spec.search.n_trials, budget(study).complete, bar=options.bar)
    progress.line(f"study {spec.study_name}: {spec.search.n_trials} trials, sampler "
                  f"{spec.search.sampler}, {grid_size or 'continuous'} configurations, "
                  f"storage {redact_url(storage_url)}, MLflow run {parent.run_id}")
    return progress


def _ended(progress: Progress, result: Conclusion, session: Session, parent: runs.StudyRun,
           stop: str, study: optuna.Study, started: float) -> TuneResult:
    """The study's closing lines, and what ``tune`` returns."""
    uri, storage_url = session.tracking_uri, redact_url(session.storage_url)
    progress.line(result.summary)
    progress.line(f"stopped: {stop}; MLflow parent run {parent.run_id} "
                  f"(experiment {parent.experiment_id}, {redact_url(uri)})")
    if result.link:
        progress.line(result.link)
    return TuneResult(session.spec.study_name, storage_url, parent.run_id,
                      parent.experiment_id, result.summary, stop, budget(study).complete,
                      result.best_trial, result.best_run_id, time.monotonic() - started)


def _loop(ctx: StudyContext, storage: optuna.storages.RDBStorage, worker_id: str, started: float,
          grid_size: int | None, warm: WarmPlan | None = None) -> str:
    spec, study = ctx.spec, ctx.study
    reason = ""

    def should_stop() -> bool:
        nonlocal reason
        reason = stop_reason(study, spec, started, grid_size)
        return bool(reason)

    while True:
        trial = ask_within_budget(study, storage, spec.search.n_trials, should_stop=should_stop)
        if trial is None:
            return reason or f"{spec.search.n_trials} distinct configurations measured"
        try:
            write_worker(trial, worker_id)
            with heartbeat(storage, trial):
                outcome = run_trial(ctx, trial)
        except BaseException as exc:
            # a tracking server away past the wait: the trial is measured again on resume
            interrupted = isinstance(exc, KeyboardInterrupt | patience.TrackingUnavailable)
            with held():
                stop_all()
                why = ("interrupted" if isinstance(exc, KeyboardInterrupt) else str(exc)
                       if interrupted else f"{type(exc).__name__}: {exc}")
                with contextlib.suppress(Exception):
                    abandon_trial(study, trial, interrupted=interrupted, reason=why,
                                  client=ctx.parent.client)
            raise
        ctx.progress.trial(outcome.number, outcome.params, state=outcome.state,
                           metrics=outcome.metrics, feasible=outcome.feasible,
                           best=best_text(study, spec.objectives), note=outcome.note,
                           complete=budget(study).complete)
        remembered.follow(study, storage, warm, spec)  # the earlier study's next, if it holds


def _size(dists: dict[str, Any]) -> int | None:
    try:
        grid = optuna_study.grid_of(dists)
    except TrackerError:
        return None
    size = 1
    for values in grid.values():
        size *= len(values)
    return size

