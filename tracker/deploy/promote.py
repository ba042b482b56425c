"""``tracker promote``: the best feasible trial of a study (or one chosen by hand) becomes the
served model.

1. the trial is chosen (:mod:`tracker.deploy.choose`): after a confirmation the configuration
   it chose (a verdict that keeps the default is refused unless forced, saying which), else the
   feasible complete measured trial best on the first objective, or with ``trial`` that trial
   when it is feasible and COMPLETE; the version's tags say how (``tracker.chosen_by``) and,
   for the confirmed choice, carry the verdict and the confirmed figures with their 95%
   intervals;
2. its model (logged on the trial's MLflow run as ``model``, see
   :mod:`tracker.tracking.flavor`: every model of the configuration as one MLflow model,
   one model the one-model case) is registered as a new version of the spec's
   registered model, with tags (study, trial, run id, perf_throughput, perf_latency_p99, each
   entry model's as ``<model>/perf_throughput``, the constraint it met) and the summary
   sentence as description;
3. it is deployed to Triton (:func:`tracker.deploy.service.deploy`), and once it serves, in
   the same transaction, it moves to the stage (the previous Production version is archived)
   and gets the alias; without a deployment (``--no-deploy``) it moves there at once, and the
   watcher deploys it;
4. a failed deployment leaves the previous version serving and the stage and alias on it,
   tags the new one ``failed`` and raises :class:`DeployError`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import mlflow
import optuna
from mlflow.exceptions import MlflowException

from tracker import tags
from tracker.deploy import service, watch
from tracker.deploy.choose import Ask, BoundLike, Choice, choose, constraint_text
from tracker.deploy.pointers import Pointers, record_seen
from tracker.deploy.settings import TargetSettings
from tracker.errors import DeployError, TrackingError
from tracker.metrics import fmt
from tracker.tracking import flavor, model_files, registry
from tracker.tracking.entry_names import EntryNames, recorded_entry_names
from tracker.tracking.flavor import models_from_tags
from tracker.tracking.report import entry_figures, summary
from tracker.tracking.winner import log_winner
from tracker.trial_record import Attr, TrialRow, trial_rows
from tracker.verdict import record as confirmed
from tracker.verdict import stats as confirm_stats
from tracker.verdict import words

__all__ = ["BoundLike", "Promotion", "Release", "constraint_text", "model_source", "promote"]

HEADLINE_TAGS = ("perf_throughput", "perf_latency_p99", "perf_capacity", "replicas",
                 "cost_per_million")
CHOSEN_BY = tags.MODEL_CHOSEN_BY


def model_source(client: mlflow.MlflowClient, run_id: str) -> tuple[str, str | None]:
    """(source URI, logged model id) of the trial's MLflow model ``model``: the one its run
    already has (an earlier promotion, or a study of a version that logged a model per trial),
    else one built now from the study's stored model files and the trial's production configs
    (:func:`tracker.tracking.winner.log_winner`; tag ``tracker.models`` names the models of a
    trial of several)."""
    try:
        run = client.get_run(run_id)
        for output in (run.outputs.model_outputs if run.outputs else []):
            logged = client.get_logged_model(output.model_id)
            if logged.name == flavor.MODEL_ARTIFACT_PATH:
                return f"models:/{logged.model_id}", logged.model_id
        stored = model_files.stored_for_run(client, run_id)
        if stored is not None:
            made = log_winner(client, run_id, stored, models_from_tags(run.data.tags))
            return made.model_uri, made.model_id
        names = {f.path for f in client.list_artifacts(run_id, flavor.MODEL_ARTIFACT_PATH)}
    except MlflowException as exc:
        raise DeployError(f"cannot read the trial's MLflow run {run_id}: {exc.message}") from exc
    except TrackingError as exc:
        raise DeployError(str(exc)) from exc
    if f"{flavor.MODEL_ARTIFACT_PATH}/MLmodel" in names:
        return f"runs:/{run_id}/{flavor.MODEL_ARTIFACT_PATH}", None
    raise DeployError(f"the trial's MLflow run {run_id} names no stored model file (tag "
                      f"{model_files.TAG_URI!r}) and has no model logged as "
                      f"{flavor.MODEL_ARTIFACT_PATH!r}; see its tag tracker.model_error, if any")


@dataclass(frozen=True)
class Promotion:
    registered_model: str
    version: int
    trial: int
    run_id: str
    stage: str
    alias: str
    description: str
    deployment: dict[str, Any] | None


@dataclass(frozen=True)
class Release:
    """Where a promoted version goes: the registered model, the Triton model name it is
    deployed as, the stage and alias that mean serving."""

    registered_model: str
    deployment_name: str
    pointers: Pointers = field(default_factory=Pointers)


def promote(study: optuna.Study, *, objectives: Mapping[str, str],
            constraints: Mapping[str, BoundLike] | None, release: Release,
            settings: TargetSettings | None = None, ask: Ask | None = None,
            log: Callable[[str], None] = print) -> Promotion:
    """Register, stage, alias and (with ``settings``) deploy the study's best feasible trial,
    or the one ``ask`` names (:mod:`tracker.deploy.choose`). ``constraints``: the spec's (None
    when unknown: the tag then says only that it met the study's constraints)."""
    registered_model, pointers = release.registered_model, release.pointers
    registry.validate_registered_name(registered_model)
    flavor.validate_model_name(release.deployment_name)
    rows = trial_rows(study)
    choice = choose(study, rows, objectives, constraints, ask or Ask(), log)
    best = choice.row
    if not best.run_id:
        raise DeployError(f"trial {best.number} of study {study.study_name!r} has no MLflow run "
                          f"(user attribute {Attr.RUN_ID!r} is missing)")
    client = mlflow.MlflowClient()
    source, model_id = model_source(client, best.run_id)
    tags = {registry.TAG_STUDY: study.study_name, registry.TAG_TRIAL: str(best.number),
            registry.TAG_RUN_ID: best.run_id, CHOSEN_BY: choice.chosen_by,
            registry.TAG_CONSTRAINT: ("the study's constraints (give the spec to name them)"
                                      if constraints is None
                                      else constraint_text(best.metrics, constraints)),
            **{m: repr(v) for m, v in best.metrics.items() if _headline_metric(m)},
            **_check_tags(study)}
    verdict = choice.verdict
    if verdict is not None and (not choice.by_hand or best.name == verdict.chosen):
        tags.update(_verdict_tags(verdict, best.name, objectives))
    description = _description(choice, rows, objectives, recorded_entry_names(study))
    mv = registry.register_version(client, registered_model, registry.VersionRequest(
        source=source, run_id=best.run_id, model_id=model_id, tags=tags,
        description=description))
    version = int(mv.version)
    _tag_model(client, registered_model, release.deployment_name)
    what = (f"{registered_model} version {version} (trial {best.number}"
            + (", chosen by hand)" if choice.by_hand else ")"))
    staged, deployment = _place(client, settings, release, version, what,
                                _headline(best.metrics), log)
    return Promotion(registered_model, version, best.number, best.run_id,
                     pointers.stage if staged else "no stage (refused by the registry)",
                     pointers.alias,
                     description, deployment)


def _description(choice: Choice, rows: list[TrialRow], objectives: Mapping[str, str],
                 entries: EntryNames | None) -> str:
    """The version's description: the study's sentence (the confirmed one after a
    confirmation), each entry model's figures at the trial registered, and for a trial chosen
    by hand, which one with its figures."""
    text = summary(rows, objectives, entries)  # entries: each entry's figures, as the note
    row, verdict = choice.row, choice.verdict
    if verdict is not None:
        text = words.study_summary(text, verdict, objectives)
        if not choice.by_hand:
            return text + entry_figures(row, rows, entries or {})
    if choice.by_hand:
        text += (f" Promoted by hand: {row.name} ({_headline(row.metrics)})."
                 + entry_figures(row, rows, entries or {}))
    return text


def _place(client: mlflow.MlflowClient, settings: TargetSettings | None, release: Release,
           version: int, what: str, headline: str,
           log: Callable[[str], None]) -> tuple[bool, dict[str, Any] | None]:
    """Step 3: deployed (the pointers move once it serves), or with ``settings`` None the
    pointers moved at once. Returns (whether the stage holds it, the deployment)."""
    registered, stage, alias = (release.registered_model, release.pointers.stage,
                                release.pointers.alias)
    if settings is None:
        staged = _stage(client, registered, version, stage, log)
        registry.set_alias(client, registered, alias, version)
        log(f"registered {what} ({headline}); "
            + (f"stage {stage}, " if staged else "") + f"alias {alias!r}")
        return staged, None
    log(f"registered {what} ({headline}); deploying it: stage {stage} and alias {alias!r} "
        "move to it once it serves")
    deployment = _deploy(client, settings, release, version, what, log)
    return registry.get_version(client, registered, version).current_stage == stage, deployment


def _deploy(client: mlflow.MlflowClient, settings: TargetSettings, release: Release,
            version: int, what: str, log: Callable[[str], None]) -> dict[str, Any]:
    """Step 3 and 4 of the module docstring: deploy the version, which moves the stage and
    the alias to it once it serves (in the same transaction); on failure they stay on the
    version that still serves, and where they are is recorded as seen (the watcher must not
    try the failed version again)."""
    registered, pointers = release.registered_model, release.pointers
    try:
        return service.deploy(settings, release.deployment_name,
                              f"models:/{registered}/{version}", log=log, pointers=pointers)
    except DeployError as exc:
        record_seen(client, registered, pointers)
        serving = registry.serving_version(client, registered)
        still = ("" if serving is None else
                 f"; stage {pointers.stage} and alias {pointers.alias!r} stay on version "
                 f"{serving.version}, which still serves")
        raise DeployError(f"{what} was not deployed: {exc}{still}") from exc


def _check_tags(study: optuna.Study) -> dict[str, str]:
    """The study's output-check reference (run and tolerances) for the version's tags: the
    deployment sends the new version the same probes (deploy/verify.py)."""
    attrs = study.user_attrs
    run = attrs.get(tags.CHECK_REFERENCE)
    if not run:
        return {}
    return {tags.CHECK_REFERENCE: str(run),
            tags.CHECK_TOLERANCE: json.dumps(attrs.get(tags.CHECK_TOLERANCE) or {})}


def _stage(client: mlflow.MlflowClient, name: str, version: int, stage: str,
           log: Callable[[str], None]) -> bool:
    """Move the version to ``stage``; a registry that refuses stages (they are deprecated
    since MLflow 2.9; Unity Catalog has none) leaves the alias alone in charge, said once."""
    try:
        registry.transition_stage(client, name, version, stage, archive_existing=True)
    except DeployError as exc:
        log(f"the registry refused the stage transition ({exc}); the alias alone marks the "
            "promoted version")
        return False
    return True


def _tag_model(client: mlflow.MlflowClient, registered: str, deployment_name: str) -> None:
    try:
        client.set_registered_model_tag(registered, watch.NAME_TAG, deployment_name)
    except MlflowException as exc:
        raise DeployError(f"cannot tag registered model {registered!r}: {exc.message}") from exc


def _headline_metric(metric: str) -> bool:
    """A headline figure: ``perf_throughput``, ``perf_latency_p99``, a capacity study's
    ``perf_capacity``, ``replicas`` and ``cost_per_million``, or one entry model's
    (``<model>/perf_throughput``)."""
    return metric.rpartition("/")[2] in HEADLINE_TAGS


def _headline(metrics: Mapping[str, float]) -> str:
    found = sorted((m for m in metrics if _headline_metric(m)), key=lambda m: (
        m.rpartition("/")[0], HEADLINE_TAGS.index(m.rpartition("/")[2])))
    parts = []
    for key in found:
        model, _, metric = key.rpartition("/")
        parts.append((f"{model} " if model else "") + fmt(metric, metrics[key])
                     + (" p99" if metric == "perf_latency_p99" else ""))
    return ", ".join(parts) or "no metrics"


def _verdict_tags(verdict: confirm_stats.Verdict, name: str,
                  objectives: Mapping[str, str]) -> dict[str, str]:
    metric = next(iter(objectives))
    scored = verdict.scored.get(name)
    tags = {confirmed.VERDICT_TAG: verdict.verdict}
    if scored is not None:
        tags.update({k: f"{v:.6g}" for k, v in words.scored_metrics(scored, metric).items()
                     if k.startswith(("confirm/improvement", f"confirm/{metric}"))})
    return tags
