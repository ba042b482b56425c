"""The end of a study invocation: the report, the best trial and the summary on the parent run.

The parent run gets: the best trial's run id (tag ``tracker.best_run_id``), its params under
the same field-path names as the trial runs (so the runs table lines them up), its headline
metrics, ``best/config.pbtxt`` (the production config: what to deploy) and, when the trial
server used the Python-backend shim, ``best/served_config.pbtxt``; ``trials.csv``, the plots
and ``report.html``; and the summary sentence as its description. Then the trials as an MLflow
table (``trials.json``), the spec (``study.yaml``) and the saved view of the experiment that
the printed link opens (tracking/parent_artifacts.py, tracking/view.py).

After a confirmation (tracker/confirm/) the best trial is the configuration it chose, the
sentence carries its intervals, and the parent gets ``confirm/...``, ``improvement_pct`` with
its interval, the tag ``tracker.verdict`` and ``confirm.csv``; each confirmed trial's run its
own ``confirm/...`` metrics and ``tracker.confirm_rank``.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml
from mlflow.entities import Param
from mlflow.exceptions import MlflowException

from tracker import tags
from tracker.candidate.values import configs, production_texts
from tracker.errors import TrackingError
from tracker.invocation import remembered
from tracker.invocation.session import StudyContext
from tracker.metrics import CAPACITY, RELATIVE
from tracker.outputs import trials as output_check
from tracker.tracking import (
    capacity_plot,
    confirm_plot,
    parent_artifacts,
    runs,
    steps_plot,
    stream_plots,
    view,
)
from tracker.tracking.entry_names import ENTRY_NAMES_ATTR, entry_names
from tracker.tracking.report import ReportText, best_row, improvement_pct, summary, write_report
from tracker.trial_record import TrialRow, trial_rows
from tracker.verdict import record as confirmed
from tracker.verdict import stats as confirm_stats
from tracker.verdict import words


@dataclass(frozen=True)
class Conclusion:
    summary: str
    best_trial: int | None
    best_run_id: str | None
    link: str | None = None  # how to open the study's saved view in the MLflow UI


def finish_study(ctx: StudyContext, *, status: str, owner: bool, stop_reason: str,
                 wall_s: float) -> Conclusion:
    """Write the report on the parent run; end it with ``status`` when this invocation owns it.
    A report that cannot be written is a warning: the trials are already recorded."""
    spec, parent = ctx.spec, ctx.parent
    client = parent.client
    rows = trial_rows(ctx.study)
    objectives = dict(spec.objectives)
    entries = entry_names(ctx.configuration.entries, ctx.configuration.metric_name)
    ctx.study.set_user_attr(ENTRY_NAMES_ATTR, entries)  # for tracker promote's description
    text = summary(rows, objectives, entries)
    best = best_row(rows, objectives)
    record = confirmed.load(ctx.study)
    verdict = confirmed.verdict(record, objectives)
    caption = None
    if record is not None and verdict is not None:  # the confirmation decides, not the search
        command = words.more_command(record, verdict, objectives, spec_argument(spec.source))
        text = words.study_summary(text, verdict, objectives, command)
        caption = words.headline(verdict)
        best = next((r for r in rows if r.number == confirmed.trial_of(verdict.chosen)), best)
        for row in rows:
            scored = verdict.scored.get(row.name)
            if scored is not None and scored.value is not None:
                value = (confirm_stats.gain_interval(scored.value)  # rounds: ratio scale
                         if next(iter(objectives)) in RELATIVE else scored.value)
                row.confirmed = (value.estimate, value.low, value.high)
                row.confirmed_p99 = scored.p99.estimate if scored.p99 is not None else None
    text += output_check.summary_note(spec)
    try:
        _log_report(ctx, rows, best, text, stop_reason, wall_s, caption, verdict)
        if verdict is not None:
            _log_verdict(ctx, rows, verdict)
    except (MlflowException, TrackingError, OSError, ValueError) as exc:
        ctx.progress.line(f"warning: the study report was not written: {exc}")
    link = None
    try:
        link = _log_view(ctx, rows)
    except (MlflowException, TrackingError, OSError, ValueError) as exc:
        ctx.progress.line(f"warning: the study's MLflow view was not written: {exc}")
    if owner:
        try:
            runs.finish_run(client, parent.run_id, status)
        except TrackingError as exc:
            ctx.progress.line(f"warning: the parent run was not ended: {exc}")
    return Conclusion(text, best.number if best else None, best.run_id if best else None,
                      link)


def _log_view(ctx: StudyContext, rows: list[TrialRow]) -> str:
    """The trials table and the spec on the parent run, the saved view on the experiment;
    returns the line that says how to open it."""
    spec, parent = ctx.spec, ctx.parent
    parent_artifacts.log_trials_table(parent.client, parent.run_id, rows, dict(spec.objectives))
    source = spec.source.read_text() if spec.source and spec.source.is_file() else None
    spec_text = parent_artifacts.spec_text(
        source, yaml.safe_dump(spec.model_dump(mode="json"), sort_keys=False))
    runs.log_files(parent.client, parent.run_id, {parent_artifacts.SPEC_FILE: spec_text})
    view.drop_superseded_views(parent.client, parent.experiment_id)
    view_id = view.write_view(parent.client, parent.experiment_id, parent.run_id,
                              name=f"Study {ctx.study.study_name}",
                              knobs=list(ctx.distributions), objectives=dict(spec.objectives),
                              streaming=stream_plots.is_streaming(rows))
    return view.study_link(parent.tracking_uri, parent.experiment_id, view_id)


def spec_argument(source: Path | None) -> str:
    """The spec's path as a user would type it (relative to the working directory if inside)."""
    if source is None:
        return "SPEC"
    try:
        return str(source.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(source)


def _log_report(ctx: StudyContext, rows: list[TrialRow], best: TrialRow | None, text: str,
                stop_reason: str, wall_s: float, caption: str | None = None,
                verdict: confirm_stats.Verdict | None = None) -> None:
    spec, parent = ctx.spec, ctx.parent
    client = parent.client
    objectives = dict(spec.objectives)
    metric = next(iter(objectives))
    with tempfile.TemporaryDirectory(prefix="tracker-report-") as tmp:
        curves = (stream_plots.sweep_curves(client, rows)
                  if stream_plots.is_streaming(rows) else None)
        files: dict[str, str | bytes | Path] = dict(
            write_report(rows, objectives, spec.constraints, Path(tmp),
                         entries=entry_names(ctx.configuration.entries,
                                             ctx.configuration.metric_name),
                         words=ReportText(f"Study {ctx.study.study_name}", text, caption),
                         curves=curves,
                         extra=remembered.with_origin(  # search.warm_start's source
                             parent, ctx.study,
                             _extra(ctx, rows, best, verdict, caption, Path(tmp)))))
        if best is not None:
            cfgs, served = configs(ctx.bench, best.params, best.baseline)
            productions = production_texts(ctx.bench, cfgs)  # every model's, the entry's too
            production = productions[ctx.configuration.entry]
            files["best/config.pbtxt"] = production
            files.update({f"best/{name}/config.pbtxt": text
                          for name, text in productions.items()})
            if served.strip() != production.strip():
                files["best/served_config.pbtxt"] = served
        runs.log_files(client, parent.run_id, files)
    parent_tags: dict[str, object] = {tags.NOTE: text, tags.SUMMARY: text,
                                      tags.STOP_REASON: stop_reason}
    metrics: dict[str, float] = {
        "trials_complete": float(sum(r.state == "COMPLETE" for r in rows)),
        "trials_failed": float(sum(r.state == "FAIL" for r in rows)),
        "measurements": float(sum(r.measurements for r in rows)),
        "configurations": float(sum(r.measurements > 0 for r in rows)),
        "wall_s": wall_s}
    base = next((r for r in rows if r.baseline and r.complete), None)
    if base is not None and base.values:
        metrics[f"default_{metric}"] = base.values[0]
    if best is not None:
        parent_tags.update({tags.BEST_RUN: best.run_id or "", tags.BEST_TRIAL: best.number})
        parent_tags.update({f"{tags.BEST_PARAM_PREFIX}{k}": v for k, v in best.params.items()})
        metrics.update(best.metrics)
        if base is not None and base.values and best.values and \
                confirmed.load(ctx.study) is None:  # else the confirmation's, _log_verdict
            pct = improvement_pct(best.values[0], base.values[0], objectives[metric])
            if pct is not None:
                metrics["improvement_pct"] = pct
        logged = client.get_run(parent.run_id).data.params
        fresh = [Param(k, str(v)) for k, v in best.params.items() if k not in logged]
        if fresh and all(k not in logged for k in best.params):
            client.log_batch(parent.run_id, params=fresh)
    runs.set_tags(client, parent.run_id, parent_tags)
    runs.log_metrics(client, parent.run_id, metrics)


def _extra(ctx: StudyContext, rows: list[TrialRow], best: TrialRow | None,
           verdict: confirm_stats.Verdict | None, caption: str | None,
           out_dir: Path) -> tuple[dict[str, Path], str] | None:
    """The report's figures beyond the search's: a pipeline's per-step split (:func:`_steps`),
    the confirmation's per-pair ratios (tracking/confirm_plot.py) and a capacity study's
    curves (tracking/capacity_plot.py)."""
    steps = _steps(ctx, rows, best, out_dir)
    pairs = confirm_plot.ratios(verdict, out_dir / "plots", caption) if verdict else {}
    if CAPACITY in ctx.spec.objectives:  # the hockey stick and the cost (capacity_plot.py)
        pairs = {**pairs, **capacity_plot.capacity(ctx.parent.client, rows,
                                                   ctx.spec.constraints, out_dir / "plots")}
    if not pairs:
        return steps
    files, section = steps or ({}, "")
    return {**files, **{f"plots/{name}": path for name, path in pairs.items()}}, section


def _steps(ctx: StudyContext, rows: list[TrialRow], best: TrialRow | None,
           out_dir: Path) -> tuple[dict[str, Path], str] | None:
    """A pipeline's per-step split of the default and the best configuration
    (tracking/steps_plot.py); None for a model without composing models."""
    conf = ctx.configuration
    steps = conf.split_steps
    if not steps:
        return None
    base = next((r for r in rows if r.baseline and r.complete), None)
    searched = best_row(rows, dict(ctx.spec.objectives))  # the search's own best
    chosen: dict[str, tuple[int, dict[str, float]]] = {}
    for label, row in (("default", base), ("best of the search", searched),
                       ("chosen", best)):
        if row is not None and all(n != row.number for n, _m in chosen.values()):
            chosen[label] = (row.number, row.metrics)
    return steps_plot.write(chosen, steps, out_dir)


def _log_verdict(ctx: StudyContext, rows: list[TrialRow], verdict: confirm_stats.Verdict) -> None:
    """The confirmation on the parent run (metrics, ``tracker.verdict``, ``confirm.csv``) and
    on each confirmed trial's run (``confirm/...`` metrics, ``tracker.confirm_rank``)."""
    client, parent = ctx.parent.client, ctx.parent
    objectives = dict(ctx.spec.objectives)
    metric = next(iter(objectives))
    record = confirmed.load(ctx.study) or {}
    runs.log_metrics(client, parent.run_id, words.parent_metrics(verdict, objectives))
    runs.set_tags(client, parent.run_id, {**words.parent_tags(verdict),
                                          tags.CONFIRM_STOP: record.get("stop", "")})
    runs.log_files(client, parent.run_id, {"confirm.csv": confirmed.rounds_csv(record, metric)})
    by_name = {r.name: r for r in rows}
    for rank, key in enumerate(verdict.rank(), start=1):
        row = by_name.get(key)
        if row is None or not row.run_id:
            continue
        scored = verdict.scored[key]
        runs.log_metrics(client, row.run_id, words.scored_metrics(scored, metric))
        values = confirmed.series(record, row.number, metric)
        for step, value in enumerate(values, start=1):
            if value is not None:
                runs.log_metrics(client, row.run_id, {f"confirm/round_{metric}": value},
                                 step=step)
        runs.set_tags(client, row.run_id, {confirmed.RANK_TAG: rank,
                                           tags.CONFIRM_ROLE: (
                                               "default" if scored.baseline else
                                               "chosen" if key == verdict.chosen else
                                               "tied" if key in verdict.tied else
                                               "winner" if key == verdict.winner else
                                               "worse")})
