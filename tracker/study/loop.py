"""The study loop: spec -> study -> trials -> report (one trial: trial.py, pipeline.py).

``tune(spec_path, options)`` runs (or resumes) a study until one of: ``n_trials`` COMPLETE
trials in the study (across every run and worker), the timeout, ``patience`` trials without
improvement, every configuration of a finite space tried, or as many failed trials as
``n_trials``. Then it writes the report on the parent run and ends it.

Ctrl-C / SIGTERM: the server is stopped, the current trial is FAIL in Optuna (its parameters
queued again) and its child run KILLED, the parent run KILLED, and :class:`Interrupted` is
raised (the CLI exits 130 / 143). The same command resumes: finished trials are kept.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import mlflow
import optuna

from tracker.errors import TrackerError
from tracker.measure.host import machine_tags
from tracker.search import study as st
from tracker.search.baseline import fit_baseline
from tracker.search.space import check_space, distributions, resolve_space
from tracker.search.storage import make_storage, storage_lock, worker_identity
from tracker.search.workers import ask_within_budget, budget, heartbeat
from tracker.spec import StudySpec, ensure_model, load_spec, parse_spec
from tracker.study import confirm_rounds
from tracker.study.conclude import finish_study
from tracker.study.measured import check_servable, resolve_serving
from tracker.study.progress import Progress
from tracker.study.trial import Context, abandon_trial, run_trial
from tracker.tracking import runs
from tracker.tracking.machine import record_machine
from tracker.tracking.redact import redact_url
from tracker.tracking.scaleout import (
    PARENT_RUN_ATTR,
    attach_study_run,
    fail_dead_trial_run,
    mark_worker_run,
)
from tracker.trial_attrs import TrialRecord, write_worker
from tracker.triton.formats import model_info
from tracker.triton.server.live import stop_all
from tracker.triton.server.modes import make_server

EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class Interrupted(BaseException):
    """Ctrl-C or SIGTERM stopped the study after cleaning up; ``exit_code`` 130 or 143."""

    def __init__(self, signum: int, message: str) -> None:
        super().__init__(message)
        self.signum = signum
        self.exit_code = EXIT_CODES.get(signal.Signals(signum), 128 + signum)


@dataclass
class TuneOptions:
    """Command-line overrides of the spec (None: the spec's value)."""

    n_trials: int | None = None
    timeout_s: float | None = None
    study_name: str | None = None
    storage: str | None = None
    sampler: str | None = None
    seed: int | None = None
    patience: int | None = None
    server: dict[str, Any] = field(default_factory=dict)  # launch mode overrides
    bar: bool | None = None
    log_models: bool = True
    heartbeat_interval: int | None = None  # seconds; None: search/storage.py's default
    grace_period: int | None = None        # seconds; None: twice the interval


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


def apply_overrides(spec: StudySpec, options: TuneOptions) -> StudySpec:
    """The spec with the command line's values, validated again (so ``--mode remote``
    without a URL is the same error as in the file)."""
    search = {k: v for k, v in {"n_trials": options.n_trials, "timeout_s": options.timeout_s,
                                "study_name": options.study_name, "storage": options.storage,
                                "sampler": options.sampler, "seed": options.seed,
                                "patience": options.patience}.items() if v is not None}
    server = {k: v for k, v in options.server.items() if v is not None}
    if not search and not server:
        return spec
    data = spec.model_dump(mode="json", exclude_unset=True)
    data.setdefault("search", {}).update(search)
    data.setdefault("server", {}).update(server)
    return parse_spec(data, base_dir=spec.base_dir, source=spec.source)


def expand_env(url: str) -> str:
    """``${VAR}`` in a URL replaced from the environment (keeps a password out of command
    lines and MLflow params: ``postgresql://tuner:${PGPASSWORD}@db/optuna``)."""
    return _ENV_REF.sub(lambda m: os.environ.get(m.group(1), m.group(0)), url)


def tracking_uri(spec: StudySpec) -> str:
    """Under ``mlflow run`` the run's own tracking URI; otherwise the spec's or the default."""
    if os.environ.get("MLFLOW_RUN_ID"):
        return str(mlflow.get_tracking_uri())
    return spec.mlflow.resolved_tracking_uri()


# ---- signals -------------------------------------------------------------------------------

_received: list[int] = []


def received_signal() -> int:
    """The signal that interrupted the last ``signals()`` block (SIGINT when unknown)."""
    return _received[-1] if _received else int(signal.SIGINT)


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    """SIGTERM takes the SIGINT path (asyncio's handler when a sweep runs, else
    KeyboardInterrupt); the exit code remembers which signal it was."""
    _received.append(signum)
    handler = signal.getsignal(signal.SIGINT)
    if callable(handler):
        handler(signal.SIGINT, frame)  # raises, or cancels the running sweep
        return
    raise KeyboardInterrupt


@contextlib.contextmanager
def signals() -> Iterator[None]:
    """SIGINT and SIGTERM raise KeyboardInterrupt in the block (``_received`` says which)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _received.clear()
    old_term = signal.signal(signal.SIGTERM, _on_sigterm)
    old_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old_term)
        signal.signal(signal.SIGINT, old_int)


@contextlib.contextmanager
def shielded() -> Iterator[None]:
    """Cleanup that a second Ctrl-C (or MLflow's SIGTERM after it) must not cut short."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


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
        parent = runs.open_study_run(tracking_uri=uri, experiment=spec.experiment_name,
                                     study_name=name, storage=storage_url,
                                     run_name=name, params=params)
        if known and known != parent.run_id:
            runs.mark_unfinished(parent.client, [str(known)], "KILLED")
        study.set_user_attr(PARENT_RUN_ATTR, parent.run_id)
        return parent, True


def _last_worker(study: optuna.Study) -> bool:
    """No other worker has a trial running: this one ends the shared parent run. (With
    several workers the parent is ended by whichever finishes last, not by its creator.)"""
    try:
        return budget(study).running == 0
    except Exception:  # the storage is gone: end the parent rather than leave it RUNNING
        return True


def _stop_reason(study: optuna.Study, spec: StudySpec, started: float,
                 space_size: int | None) -> str:
    search = spec.search
    if search.timeout_s is not None and time.monotonic() - started >= search.timeout_s:
        return f"timeout of {search.timeout_s:g} s reached"
    if search.patience is not None:
        since = st.trials_without_improvement(study, spec.objectives)
        if since >= search.patience:
            return f"no improvement in the last {since} trials (patience {search.patience})"
    failed = len(st.failed(study))
    if failed >= search.n_trials:
        return f"{failed} trials failed (as many as n_trials): see the failed runs' notes"
    if space_size is not None:
        tried = {tuple(sorted(t.params.items())) for t in st.finished(study)
                 if not TrialRecord.of(t).exact}  # an approximated baseline
        if len(tried) >= space_size:
            return f"all {space_size} configurations of the search space tried"
    return ""


def _best_text(study: optuna.Study, spec: StudySpec) -> str:
    best = st.best_trials(study)
    if not best:
        return "none feasible yet"
    metric = next(iter(spec.objectives))
    value = TrialRecord.of(best[0]).metrics.get(metric)
    shown = f"{value:,.1f}" if isinstance(value, float) else "?"
    return f"trial {best[0].number} ({metric} {shown})" + (
        f" +{len(best) - 1} on the front" if len(best) > 1 else "")


def tune(spec_path: str | Path, options: TuneOptions | None = None) -> TuneResult:
    """Run or resume the study of ``spec_path``. Raises TrackerError for user-facing
    failures and :class:`Interrupted` after Ctrl-C / SIGTERM (everything cleaned up)."""
    options = options or TuneOptions()
    started = time.monotonic()
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # the progress lines say it better
    spec = apply_overrides(load_spec(spec_path), options)
    ensure_model(spec)
    info = model_info(spec.model)
    space = resolve_space(spec.search.space, info)
    check_space(space, info, batch_size=spec.load.batch_size)
    dists, base = fit_baseline(distributions(space), info.config)
    grid_size = _size(dists)
    uri = tracking_uri(spec)
    if redact_url(uri) != uri:  # MLflow prints "View run ... at: <uri>" on each run's end
        os.environ["MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"] = "true"
    storage_url = expand_env(spec.search.storage or st.default_storage(uri))
    worker = worker_identity(spec.server.gpus)

    def on_stale(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        record = TrialRecord.of(trial)
        fail_dead_trial_run(mlflow.MlflowClient(uri), record.run_id,
                            trial_number=trial.number, worker=record.worker)

    beats = {k: v for k, v in (("heartbeat_interval", options.heartbeat_interval),
                               ("grace_period", options.grace_period)) if v is not None}
    storage = make_storage(storage_url, on_stale=on_stale, **beats)
    sampler = st.make_sampler(spec.search.sampler, seed=spec.search.seed,
                              n_objectives=len(spec.objectives), distributions=dists)
    study = st.open_study(storage, spec.study_name, objectives=spec.objectives, sampler=sampler)
    # "study." keeps them apart from MLproject parameters (logged as given, '' included) and
    # from the best trial's field-path params
    params: dict[str, object] = {f"study.{k}": v for k, v in {
        "spec": str(spec.source or ""), "model": spec.model.name, "name": spec.study_name,
        "sampler": spec.search.sampler, "n_trials": spec.search.n_trials,
        "objectives": dict(spec.objectives),
        "constraints": {k: v.model_dump(exclude_none=True) for k, v in spec.constraints.items()},
        "storage": redact_url(storage_url), "server_mode": spec.server.mode,
        "server_strategy": spec.server.strategy, "space_size": grid_size or "continuous",
        "concurrency": spec.load.concurrency_levels()}.items()}
    parent, _created = _open_parent(study, storage, spec, uri, storage_url, worker.tags(), params)
    server: Any = None
    progress: Progress | None = None
    ctx: Context | None = None
    status, stop = "FAILED", ""
    try:
        with signals():
            try:
                st.enqueue_baseline(study, base.params, base.exact)
                server = make_server(spec.server)
                machine = machine_tags(server.gpu_set())  # also on every trial's run
                record_machine(parent.client, parent.run_id, machine)
                check_servable(spec, info, server)  # before trial 1, never a late failure
                serving = resolve_serving(spec, server, info)
                work = Path(".tracker") / "work"
                work.mkdir(parents=True, exist_ok=True)
                progress = Progress(spec.search.n_trials, budget(study).complete,
                                    bar=options.bar)
                progress.line(f"study {spec.study_name}: {spec.search.n_trials} trials, sampler "
                              f"{spec.search.sampler}, {grid_size or 'continuous'} "
                              f"configurations, storage {redact_url(storage_url)}, MLflow run "
                              f"{parent.run_id}")
                ctx = Context(spec, info, dists, study, parent, server, serving,
                              Path(tempfile.mkdtemp(prefix=f"{spec.study_name}-",
                                                    dir=work)).resolve(),
                              progress, worker_tags={**worker.tags(), **machine},
                              log_models=options.log_models)
                stop = _loop(ctx, storage, worker.id, started, grid_size)
                if _last_worker(study):  # the confirmation round (study/confirm_rounds.py)
                    confirm_rounds.after_search(ctx)
                status = "FINISHED"
            except KeyboardInterrupt as exc:
                signum = received_signal()
                status, stop = "KILLED", f"interrupted by {signal.Signals(signum).name}"
                raise Interrupted(signum, stop) from exc
    finally:
        with shielded():
            if server is not None:
                with contextlib.suppress(Exception):
                    server.stop()
            if progress is not None:
                progress.close()
            if ctx is None:  # setup failed: the parent run must not stay RUNNING
                with contextlib.suppress(Exception):
                    if _last_worker(study):
                        runs.finish_run(parent.client, parent.run_id, status)
            else:
                shutil.rmtree(ctx.workdir, ignore_errors=True)
                result = finish_study(ctx, status=status, owner=_last_worker(study),
                                      stop_reason=stop,
                                      wall_s=time.monotonic() - started)
    if progress is None:  # unreachable: the loop ran, so setup did
        raise RuntimeError("internal: study finished without progress output")
    progress.line(result.summary)
    progress.line(f"stopped: {stop}; MLflow parent run {parent.run_id} "
                  f"(experiment {parent.experiment_id}, {redact_url(uri)})")
    if result.link:
        progress.line(result.link)
    return TuneResult(spec.study_name, redact_url(storage_url), parent.run_id,
                      parent.experiment_id, result.summary, stop, budget(study).complete,
                      result.best_trial, result.best_run_id, time.monotonic() - started)


def _loop(ctx: Context, storage: optuna.storages.RDBStorage, worker_id: str, started: float,
          grid_size: int | None) -> str:
    spec, study = ctx.spec, ctx.study
    reason = ""

    def should_stop() -> bool:
        nonlocal reason
        reason = _stop_reason(study, spec, started, grid_size)
        return bool(reason)

    while True:
        trial = ask_within_budget(study, storage, spec.search.n_trials, should_stop=should_stop)
        if trial is None:
            return reason or f"{spec.search.n_trials} complete trials"
        try:
            write_worker(trial, worker_id)
            with heartbeat(storage, trial):
                outcome = run_trial(ctx, trial)
        except BaseException as exc:
            interrupted = isinstance(exc, KeyboardInterrupt)
            with shielded():
                stop_all()
                why = ("interrupted" if interrupted
                       else f"{type(exc).__name__}: {exc}")
                with contextlib.suppress(Exception):
                    abandon_trial(study, trial, interrupted=interrupted, reason=why,
                                  client=ctx.parent.client)
            raise
        ctx.progress.trial(outcome.number, outcome.params, state=outcome.state,
                           metrics=outcome.metrics, feasible=outcome.feasible,
                           best=_best_text(study, spec), note=outcome.note,
                           complete=budget(study).complete)


def _size(dists: dict[str, Any]) -> int | None:
    try:
        grid = st.grid_of(dists)
    except TrackerError:
        return None
    size = 1
    for values in grid.values():
        size *= len(values)
    return size

