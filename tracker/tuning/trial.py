"""One trial of a study: params -> config -> repository -> server -> sweep -> tell -> MLflow.

The loop (loop.py) asks Optuna for a trial and calls :func:`run_trial`; this module does
the rest and always leaves the trial finished in Optuna and its child run ended in MLflow,
except when interrupted (the runner's cleanup handles that, see :func:`abandon_trial`).

A trial whose parameters equal an earlier trial's with a result reuses that result without
measuring (``duplicate_of``). A config that the tracker or Triton refuses, a server that does
not start and a failed measurement make the trial FAIL (Optuna) / FAILED (MLflow) with the
message and the server log; the study goes on.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.trial import FrozenTrial, TrialState

from tracker import tags, trial_record
from tracker.candidate import entries as joint
from tracker.candidate.measurement import (
    ConfigFailed,
    Procedure,
    clip_log,
    measure,
    model_files,
)
from tracker.candidate.values import candidate, configs, configuration_tags, production_texts
from tracker.errors import StudyError, TrackerError
from tracker.feasibility import constraint_keys
from tracker.metrics import load_levels_from
from tracker.outputs.trials import OutputCheck, changed_knobs
from tracker.redact import redact_text
from tracker.search import sweep_plan
from tracker.search.optuna_study import find_duplicate
from tracker.search.workers import wait_for_duplicate
from tracker.tracking import outbox, runs
from tracker.trial_record import TrialRecord, shown_params
from tracker.triton import model_config

if TYPE_CHECKING:
    from mlflow.entities import Metric

    from tracker.invocation.session import StudyContext
    from tracker.measure.types import Measurement


@dataclass
class Outcome:
    """What the progress line and the stopping rules need from a finished trial."""

    number: int
    state: str                       # COMPLETE or FAIL
    params: dict[str, Any]           # what the progress line shows
    metrics: dict[str, float]
    feasible: bool | None
    note: str = ""


class TrialFailed(Exception):
    """The trial has a result, and it is a failure (refused config, no measurement)."""

    def __init__(self, reason: str, log: str = "", *, duplicate_of: int | None = None,
                 metrics: dict[str, float] | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.log = log
        self.duplicate_of = duplicate_of  # the failed trial this one repeats
        self.metrics = metrics or {}      # what it has despite failing (the output check's)


def suggest(trial: optuna.Trial, name: str, dist: BaseDistribution) -> Any:
    if isinstance(dist, CategoricalDistribution):
        return trial.suggest_categorical(name, dist.choices)
    if isinstance(dist, IntDistribution):
        return trial.suggest_int(name, dist.low, dist.high, step=dist.step, log=dist.log)
    if isinstance(dist, FloatDistribution):
        return trial.suggest_float(name, dist.low, dist.high, step=dist.step, log=dist.log)
    raise StudyError(f"unsupported distribution for {name!r}: {dist}")


def run_trial(ctx: StudyContext, trial: optuna.Trial) -> Outcome:
    """Measure (or reuse) one trial and record it in Optuna and MLflow."""
    params = {name: suggest(trial, name, dist) for name, dist in ctx.distributions.items()}
    record = TrialRecord.of(trial)
    baseline = record.baseline
    run_tags = {**ctx.worker_tags, tags.BASELINE: str(baseline).lower()}
    exact = record.exact_params if baseline else None
    if exact:  # the default config leaves these unset; its params only approximate it
        run_tags[tags.DEFAULT_UNSET] = ", ".join(sorted(exact))
    if record.warm_start:  # remembered from an earlier study (search.warm_start), measured here
        run_tags[tags.WARM_START] = record.warm_start
    shown = shown_params(params, exact)  # `unset`, not the space's nearest value
    run_id = runs.start_trial_run(ctx.parent, trial.number, shown, tags=run_tags)
    trial_record.write_started(trial, run_id)
    dup = find_duplicate(ctx.study, params, number=trial.number)
    if dup is None and not baseline:  # another worker may be measuring the same config now
        dup = wait_for_duplicate(ctx.study, trial.number, params)
        if dup is not None and TrialRecord.of(dup).exact:
            dup = None  # a baseline the space only approximates is not this config
    try:
        if dup is not None and not baseline:
            result = _reuse(ctx, trial, params, dup)
        else:
            result = _measure(ctx, trial, run_id, params, baseline)
            if baseline:
                result.outcome.params = shown
                result.outcome.note = "the default config"
            elif record.warm_start:
                result.outcome.note = ("the earlier study's "
                                       f"{record.warm_start.rsplit('/', 1)[-1]}, measured here")
    except TrialFailed as failed:
        result = _fail(trial, shown, failed)
    return record_result(ctx, trial, run_id, result)


@dataclass
class TrialResult:
    """A finished trial, as :func:`record_result` writes it: the trial record (``attrs``,
    Optuna user attributes), the values told to Optuna (None: FAIL), and the child run's
    metrics, files, tags, status and note."""

    outcome: Outcome
    attrs: Callable[[optuna.Trial], None]
    values: Sequence[float] | None
    status: str = "FINISHED"                      # the run's MLflow status
    metrics: dict[str, float] = field(default_factory=dict)
    step: int = 0                                 # the concurrency the metrics belong to
    sweep: list[Metric] = field(default_factory=list)
    files: dict[str, str | bytes | Path] = field(default_factory=dict)
    tags: dict[str, object] = field(default_factory=dict)
    note: str | None = None
    machine: dict[str, str] = field(default_factory=dict)  # merged into the parent's tags


def record_result(ctx: StudyContext, trial: optuna.Trial, run_id: str,
                  result: TrialResult) -> Outcome:
    """The one writer of a trial's result, in one order: Optuna first (the trial record, then
    ``tell``: the trial is finished whatever MLflow does), then MLflow through the study's
    outbox (tracking/outbox.py): metrics, files, tags, and last the run's end, so a run that
    is ended carries everything. A tracking server that stays away past the wait leaves the
    record kept and raises TrackingUnavailable."""
    result.attrs(trial)
    if result.values is None:
        ctx.study.tell(trial, state=TrialState.FAIL)
    else:
        ctx.study.tell(trial, result.values)
    end = {tags.STATE: result.outcome.state, **({tags.NOTE: result.note} if result.note else {})}
    metrics = runs.metric_batch(result.metrics, result.step, result.sweep)
    outbox.write(ctx.parent.client, outbox.folder(ctx.study.study_name), f"trial {trial.number}",
                 [outbox.RunWrites(ctx.parent.run_id, merged=result.machine),
                  outbox.RunWrites(run_id, metrics=metrics, files=result.files,
                                   tags={**result.tags, **end}, end=result.status)])
    return result.outcome


def _reuse(ctx: StudyContext, trial: optuna.Trial, params: dict[str, Any],
           dup: FrozenTrial) -> TrialResult:
    source = TrialRecord.of(dup)
    if dup.state != TrialState.COMPLETE:
        reason = f"same configuration as trial {dup.number}, which failed: " + str(
            source.fail_reason or "unknown reason")
        raise TrialFailed(reason, duplicate_of=dup.number)
    feasible = bool(source.feasible)
    cfgs, served = configs(ctx.bench, params, source.baseline)
    return TrialResult(
        Outcome(trial.number, "COMPLETE", params, dict(source.metrics), feasible,
                note=f"duplicate of trial {dup.number}"),
        attrs=lambda t: trial_record.write_reused(t, dup.number, dup, dup.constraints),
        values=dup.values, metrics=dict(source.metrics), step=int(source.concurrency or 0),
        files={"config.pbtxt": served, **model_files(production_texts(ctx.bench, cfgs))},
        tags={tags.FEASIBLE: str(feasible).lower(), tags.DUPLICATE_OF: dup.number,
              **configuration_tags(ctx.bench)},
        note=f"same configuration as trial {dup.number}: result reused, not measured again")


def _measure(ctx: StudyContext, trial: optuna.Trial, run_id: str, params: dict[str, Any],
             baseline: bool) -> TrialResult:
    spec = ctx.spec
    try:
        what = candidate(ctx.bench, params, baseline)
    except TrackerError as err:
        raise TrialFailed(f"configuration refused before starting Triton: {err}") from err
    for old in ctx.workdir.glob("trial-*"):  # the server has moved on from earlier trials
        shutil.rmtree(old, ignore_errors=True)
    repo_root = ctx.workdir / f"trial-{trial.number}"
    _, load = model_config.split_params(params)

    def on_level(m: Measurement) -> None:
        ctx.progress.measuring(trial.number, f"{m.level}: {m.throughput:,.1f} infer/s")

    check = OutputCheck(spec, ctx.study, ctx.parent.client, ctx.parent.run_id, baseline,
                        {} if baseline else changed_knobs(ctx.study, params))

    try:
        levels = load_levels_from(load)  # the trial's own load knobs; None: the spec's
        # the guided sweep (search.sweep): from the best trial's level (Model Analyzer's
        # first guess before any is feasible), then a walk
        plan = None if levels is not None else sweep_plan.for_trial(
            spec, params, sweep_plan.defaults_of(ctx.info.config), ctx.study,
            remembered=TrialRecord.of(trial).warm_level)
        done = measure(ctx.bench, what, Procedure(
            levels=levels, plan=plan, check=check, on_level=on_level,
            reference=None if baseline else default_metrics(ctx.study),
            on_phase=lambda phase: ctx.progress.measuring(trial.number, phase)), repo_root)
    except ConfigFailed as failed:
        raise TrialFailed(failed.reason, failed.log, metrics=check.metrics()) from failed.cause
    choice, result = done.choice, done.result
    checked = {**choice.metrics, **check.metrics()}
    bounds = joint.constraints_of(spec, ctx.configuration)
    violations = {k: choice.violations[k] for k in constraint_keys(bounds)}
    return TrialResult(
        Outcome(trial.number, "COMPLETE", params, choice.metrics, choice.feasible),
        attrs=lambda t: trial_record.write_measured(
            t, violations, feasible=choice.feasible, concurrency=choice.concurrency,
            metrics=checked, measurements=len(result.measurements)),
        values=choice.values, metrics={**done.headline(), **check.metrics()},
        step=choice.concurrency,
        sweep=done.sweep_metrics(), files=dict(done.files()),
        tags={tags.FEASIBLE: str(choice.feasible).lower(), tags.CONCURRENCY: choice.concurrency,
              tags.STABLE: str(choice.stable).lower(), tags.SWEEP_STOP: result.stop_reason,
              **done.tags, **configuration_tags(ctx.bench), **check.run_tags(),
              **(_model_tags(ctx) if ctx.store_model else {})},
        machine={k: v for k, v in done.tags.items() if k == tags.TRITON_VERSION})  # the parent's


def default_metrics(study: optuna.Study) -> dict[str, float] | None:
    """The logged metrics of the default configuration's finished trial (what several entry
    models' ``weighted_gain`` is measured against); None before it has one."""
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        record = TrialRecord.of(t)
        if record.baseline and record.metrics:
            return dict(record.metrics)
    return None


def _model_tags(ctx: StudyContext) -> dict[str, object]:
    """The tags that point a trial's run at the study's stored model file (uploaded once per
    study by the first trial that needs it, candidate/model_store.py): ``tracker promote`` builds
    the registered model from it and the trial's production config. A failure here is
    reported on the run, not fatal to the trial."""
    from tracker.candidate.model_store import CONFIGURATION_DIR, assemble, ensure_stored

    try:
        if ctx.stored_model is None:
            # one directory holding <model>/... for every model (one for a single model)
            ctx.stored_model = ensure_stored(
                ctx.study, ctx.parent,
                assemble(ctx.configuration, ctx.workdir / "stored" / CONFIGURATION_DIR))
        return dict(ctx.stored_model.tags())
    except TrackerError as err:
        return {tags.MODEL_ERROR: str(err)}


def _fail(trial: optuna.Trial, params: dict[str, Any], failed: TrialFailed) -> TrialResult:
    reason = redact_text(failed.reason)
    dup = failed.duplicate_of

    def attrs(t: optuna.Trial) -> None:
        if dup is not None:
            trial_record.write_duplicate_of(t, dup)
        trial_record.write_failed(t, reason, failed.metrics)

    return TrialResult(
        Outcome(trial.number, "FAIL", params, {}, None, note=reason.splitlines()[0][:400]),
        attrs=attrs, values=None, status="FAILED", metrics=failed.metrics,
        files={"server.log": clip_log(failed.log)} if failed.log else {},
        tags={tags.FAIL_REASON: reason[:500]}, note=reason)


def abandon_trial(study: optuna.Study, trial: optuna.Trial, *, interrupted: bool,
                  reason: str, client: Any) -> None:
    """Finish a trial cut short: FAIL in Optuna (interrupted: re-queued so a rerun measures it
    first; the baseline re-queues itself), its child run KILLED (interrupted) or FAILED."""
    frozen = study._storage.get_trial(trial._trial_id)
    record = TrialRecord.of(frozen)
    run_id = record.run_id
    if frozen.state == TrialState.RUNNING:
        trial_record.write_abandoned(trial, interrupted=interrupted, reason=reason)
        study.tell(trial, state=TrialState.FAIL)
        if interrupted and frozen.params and not record.baseline:
            study.enqueue_trial(dict(frozen.params))
        status, state = ("KILLED" if interrupted else "FAILED"), "FAIL"
    else:  # finished in Optuna just before the signal: the run only missed its end
        state = frozen.state.name
        status = "FAILED" if frozen.state == TrialState.FAIL else "FINISHED"
    if run_id:  # through the outbox: a tracking server that is away gets it later
        note = {tags.NOTE: reason} if frozen.state == TrialState.RUNNING else {}
        outbox.write(client, outbox.folder(study.study_name), f"trial {trial.number}",
                     [outbox.RunWrites(str(run_id), tags={tags.STATE: state, **note},
                                       end=status)])
