"""One trial of a study: params -> config -> repository -> server -> sweep -> tell -> MLflow.

The runner (runner.py) asks Optuna for a trial and calls :func:`run_trial`; this module does
the rest and always leaves the trial finished in Optuna and its child run ended in MLflow,
except when interrupted (the runner's cleanup handles that, see :func:`abandon_trial`).

A trial whose parameters equal an earlier trial's with a result reuses that result without
measuring (``duplicate_of``). A config that the tracker or Triton refuses, a server that does
not start and a failed measurement make the trial FAIL (Optuna) / FAILED (MLflow) with the
message and the server log; the study goes on.
"""

from __future__ import annotations

import shutil
import tempfile
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

from tracker.errors import StudyError, TrackerError
from tracker.measure import csvio
from tracker.measure.monitors import default_monitors
from tracker.measure.sweep import sweep
from tracker.search import sweep_plan
from tracker.search.objective import constraint_keys, pick_best_level
from tracker.search.study import find_duplicate
from tracker.search.workers import wait_for_duplicate
from tracker.tracking import runs
from tracker.tracking.redact import redact_text
from tracker.trial_attrs import Attr
from tracker.triton import model_config as mc
from tracker.triton.repository import (
    SHIM_HEADER,
    Serving,
    production_config,
    shim_config,
    write_repository,
)

if TYPE_CHECKING:
    from tracker.progress import Progress
    from tracker.spec import StudySpec
    from tracker.triton.model_config import ModelConfig, ModelInfo
    from tracker.triton.server.base import TritonServer


@dataclass
class Context:
    """Everything a trial needs; made once per invocation by the runner."""

    spec: StudySpec
    info: ModelInfo
    distributions: dict[str, BaseDistribution]
    study: optuna.Study
    parent: runs.StudyRun
    server: TritonServer
    serving: Serving
    workdir: Path
    progress: Progress
    worker_tags: dict[str, str] = field(default_factory=dict)
    log_models: bool = True

    @property
    def ort_threads(self) -> tuple[int | None, int | None]:
        return (self.spec.server.ort_intra_op_threads, self.spec.server.ort_inter_op_threads)


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

    def __init__(self, reason: str, log: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.log = log


LOG_HEAD, LOG_TAIL = 200_000, 300_000


def clip_log(text: str) -> str:
    """The server log for an artifact: secrets masked, at most ~0.5 MB (head and tail)."""
    if len(text) > LOG_HEAD + LOG_TAIL:
        cut = len(text) - LOG_HEAD - LOG_TAIL
        text = (text[:LOG_HEAD] + f"\n... [{cut} characters of the log left out] ...\n"
                + text[-LOG_TAIL:])
    return redact_text(text)


def suggest(trial: optuna.Trial, name: str, dist: BaseDistribution) -> Any:
    if isinstance(dist, CategoricalDistribution):
        return trial.suggest_categorical(name, dist.choices)
    if isinstance(dist, IntDistribution):
        return trial.suggest_int(name, dist.low, dist.high, step=dist.step, log=dist.log)
    if isinstance(dist, FloatDistribution):
        return trial.suggest_float(name, dist.low, dist.high, step=dist.step, log=dist.log)
    raise StudyError(f"unsupported distribution for {name!r}: {dist}")


def configs(ctx: Context, params: dict[str, Any], baseline: bool) -> tuple[ModelConfig, str]:
    """(the config the trial stands for, the served config.pbtxt text). The baseline is the
    model's default config exactly; other trials apply their params to it."""
    if baseline:
        cfg = ctx.info.config
    else:
        values, _load = mc.split_params(params)
        cfg = mc.apply(ctx.info, values)
    prod = production_config(cfg, ort_threads=ctx.ort_threads)
    if ctx.serving == "native":
        return cfg, mc.dumps(prod)
    return cfg, SHIM_HEADER + mc.dumps(shim_config(prod))


def run_trial(ctx: Context, trial: optuna.Trial) -> Outcome:
    """Measure (or reuse) one trial and record it in Optuna and MLflow."""
    params = {name: suggest(trial, name, dist) for name, dist in ctx.distributions.items()}
    baseline = bool(trial.user_attrs.get(Attr.BASELINE))
    tags = {**ctx.worker_tags, "tracker.baseline": str(baseline).lower()}
    exact = trial.user_attrs.get(Attr.EXACT_PARAMS) if baseline else None
    if exact:  # the default config leaves these unset; its params only approximate it
        tags["tracker.default_unset"] = ", ".join(sorted(exact))
    run_id = runs.start_trial_run(ctx.parent, trial.number, params, tags=tags)
    trial.set_user_attr(Attr.RUN_ID, run_id)
    dup = find_duplicate(ctx.study, params, number=trial.number)
    if dup is None and not baseline:  # another worker may be measuring the same config now
        dup = wait_for_duplicate(ctx.study, trial.number, params)
        if dup is not None and Attr.EXACT_PARAMS in dup.user_attrs:
            dup = None  # a baseline the space only approximates is not this config
    try:
        if dup is not None and not baseline:
            return _reuse(ctx, trial, run_id, params, dup)
        outcome = _measure(ctx, trial, run_id, params, baseline)
        if baseline:
            outcome.params = {k: ("unset" if exact and k in exact else v)
                              for k, v in params.items()}
            outcome.note = "the default config"
        return outcome
    except TrialFailed as failed:
        return _fail(ctx, trial, run_id, params, failed)


def _reuse(ctx: Context, trial: optuna.Trial, run_id: str, params: dict[str, Any],
           dup: FrozenTrial) -> Outcome:
    client = ctx.parent.client
    if dup.state != TrialState.COMPLETE:
        reason = f"same configuration as trial {dup.number}, which failed: " + str(
            dup.user_attrs.get(Attr.FAIL_REASON, "unknown reason"))
        trial.set_user_attr(Attr.DUPLICATE_OF, dup.number)
        raise TrialFailed(reason)
    for key, value in dup.constraints.items():
        trial.set_constraint(key, value)
    for key in (Attr.CONSTRAINTS, Attr.FEASIBLE, Attr.CONCURRENCY, Attr.METRICS):
        if key in dup.user_attrs:
            trial.set_user_attr(key, dup.user_attrs[key])
    trial.set_user_attr(Attr.DUPLICATE_OF, dup.number)
    trial.set_user_attr(Attr.MEASUREMENTS, 0)
    metrics = dict(dup.user_attrs.get(Attr.METRICS, {}))
    concurrency = int(dup.user_attrs.get(Attr.CONCURRENCY) or 0)
    feasible = bool(dup.user_attrs.get(Attr.FEASIBLE))
    runs.log_metrics(client, run_id, metrics, step=concurrency)
    _, served = configs(ctx, params, bool(dup.user_attrs.get(Attr.BASELINE)))
    runs.log_files(client, run_id, {"config.pbtxt": served})
    ctx.study.tell(trial, dup.values)
    note = f"same configuration as trial {dup.number}: result reused, not measured again"
    runs.finish_run(client, run_id, "FINISHED", state="COMPLETE", note=note)
    runs.set_tags(client, run_id, {runs.FEASIBLE: str(feasible).lower(),
                                   "tracker.duplicate_of": dup.number})
    return Outcome(trial.number, "COMPLETE", params, metrics, feasible,
                   note=f"duplicate of trial {dup.number}")


def _measure(ctx: Context, trial: optuna.Trial, run_id: str, params: dict[str, Any],
             baseline: bool) -> Outcome:
    spec, server, client = ctx.spec, ctx.server, ctx.parent.client
    try:
        cfg, served_text = configs(ctx, params, baseline)
    except TrackerError as err:
        raise TrialFailed(f"configuration refused before starting Triton: {err}") from err
    for old in ctx.workdir.glob("trial-*"):  # the server has moved on from earlier trials
        shutil.rmtree(old, ignore_errors=True)
    repo_root = ctx.workdir / f"trial-{trial.number}"
    try:
        try:
            repo = write_repository(repo_root, ctx.info, cfg, serving=ctx.serving,
                                    ort_threads=ctx.ort_threads)
        except TrackerError as err:
            raise TrialFailed(f"cannot write the trial's model repository: {err}") from err
        served_text = repo.served_config_path.read_text()
        mark = len(server.log_text()) if server.strategy == "reload" else 0
        ctx.progress.measuring(trial.number, "starting Triton")
        try:
            server.apply_trial(repo)
        except TrackerError as err:
            raise TrialFailed(str(getattr(err, "reason", err)),
                              server.log_text()[mark:]) from err
        _, load = mc.split_params(params)
        levels = [float(params["concurrency"])] if "concurrency" in load else None
        endpoints = server.endpoints
        monitors = default_monitors(endpoints.metrics, pids=server.pids)

        # the guided sweep (search.sweep): Model Analyzer's first guess, then a walk
        plan = None if levels is not None else sweep_plan.for_trial(
            spec, params, sweep_plan.defaults_of(ctx.info.config))

        def on_level(m: Any) -> None:
            ctx.progress.measuring(trial.number, f"{m.level}: {m.throughput:,.1f} infer/s")

        try:
            result = sweep(endpoints, repo.model_name, repo.served_config, spec.load,
                           spec.constraints, monitors, levels=levels, on_level=on_level,
                           plan=plan)
            choice = pick_best_level(result.measurements, spec.constraints, spec.objectives)
        except TrackerError as err:
            raise TrialFailed(f"measurement failed: {err}", server.log_text()[mark:]) from err
        log = server.log_text()[mark:]
        files: dict[str, str | bytes | Path] = {
            "config.pbtxt": served_text, "perf.csv": csvio.dumps(result.measurements),
            "server.log": clip_log(log)}
        if ctx.serving == "python":
            files["production_config.pbtxt"] = mc.dumps(repo.production_config)
        runs.log_metrics(client, run_id, {**choice.metrics, "concurrency": choice.concurrency,
                                          "feasible": float(choice.feasible)},
                         step=choice.concurrency, extra=runs.sweep_metrics(result.measurements))
        runs.log_files(client, run_id, files)
        if ctx.log_models:
            _log_model(ctx, run_id, repo.production_config, params)
    except TrialFailed:
        shutil.rmtree(repo_root, ignore_errors=True)
        raise
    for key, value in choice.violations.items():
        trial.set_constraint(key, value)
    trial.set_user_attr(Attr.CONSTRAINTS, [choice.violations[k] for k in
                                           constraint_keys(spec.constraints)])
    trial.set_user_attr(Attr.FEASIBLE, choice.feasible)
    trial.set_user_attr(Attr.CONCURRENCY, choice.concurrency)
    trial.set_user_attr(Attr.METRICS, choice.metrics)
    trial.set_user_attr(Attr.MEASUREMENTS, len(result.measurements))
    ctx.study.tell(trial, choice.values)
    runs.set_tags(client, run_id, {runs.FEASIBLE: str(choice.feasible).lower(),
                                   "tracker.concurrency": choice.concurrency,
                                   # false: no level of this trial met the stability rule
                                   "tracker.stable": str(choice.stable).lower(),
                                   "tracker.sweep_stop": result.stop_reason})
    runs.finish_run(client, run_id, "FINISHED", state="COMPLETE")
    return Outcome(trial.number, "COMPLETE", params, choice.metrics, choice.feasible)


def _log_model(ctx: Context, run_id: str, production: ModelConfig,
               params: dict[str, Any]) -> None:
    """The trial's production model directory as the MLflow model ``model`` of its run, so
    ``tracker promote`` can register ``runs:/<run id>/model``. A failure here is reported on
    the run, not fatal to the trial."""
    from tracker.tracking.flavor import log_triton_model

    with tempfile.TemporaryDirectory(prefix="tracker-model-") as tmp:
        model_dir = Path(tmp) / production.name
        (model_dir / "1").mkdir(parents=True)
        target = model_dir / "1" / (production.default_model_filename or "model.onnx")
        try:
            target.hardlink_to(ctx.info.model_file)
        except OSError:
            shutil.copyfile(ctx.info.model_file, target)
        mc.save(production, model_dir / "config.pbtxt")
        try:
            log_triton_model(model_dir, run_id, tracking_uri=ctx.parent.tracking_uri,
                             params={k: str(v) for k, v in params.items()})
        except TrackerError as err:
            runs.set_tags(ctx.parent.client, run_id, {"tracker.model_error": str(err)})


def _fail(ctx: Context, trial: optuna.Trial, run_id: str, params: dict[str, Any],
          failed: TrialFailed) -> Outcome:
    client = ctx.parent.client
    reason = redact_text(failed.reason)
    trial.set_user_attr(Attr.FAIL_REASON, reason[:2000])
    trial.set_user_attr(Attr.MEASUREMENTS, 0)
    if failed.log:
        runs.log_files(client, run_id, {"server.log": clip_log(failed.log)})
    ctx.study.tell(trial, state=TrialState.FAIL)
    runs.finish_run(client, run_id, "FAILED", state="FAIL", note=reason)
    runs.set_tags(client, run_id, {"tracker.fail_reason": reason[:500]})
    return Outcome(trial.number, "FAIL", params, {}, None, note=reason.splitlines()[0][:200])


def abandon_trial(study: optuna.Study, trial: optuna.Trial, *, interrupted: bool,
                  reason: str, client: Any) -> None:
    """Finish a trial cut short: FAIL in Optuna (interrupted: re-queued so a rerun measures it
    first; the baseline re-queues itself), its child run KILLED (interrupted) or FAILED."""
    frozen = study._storage.get_trial(trial._trial_id)
    run_id = frozen.user_attrs.get(Attr.RUN_ID)
    if frozen.state == TrialState.RUNNING:
        trial.set_user_attr(Attr.INTERRUPTED if interrupted else Attr.FAIL_REASON,
                            True if interrupted else reason)
        study.tell(trial, state=TrialState.FAIL)
        if interrupted and frozen.params and not frozen.user_attrs.get(Attr.BASELINE):
            study.enqueue_trial(dict(frozen.params))
        status, state = ("KILLED" if interrupted else "FAILED"), "FAIL"
    else:  # finished in Optuna just before the signal: the run only missed its end
        status, state = "FINISHED", frozen.state.name
    if run_id:
        runs.finish_run(client, str(run_id), status, state=state,
                        note=None if status == "FINISHED" else reason)
