"""``tracker confirm``: the confirmation round (study/confirm_rounds.py) on a finished study,
without re-running the search; an interrupted confirmation continues where it stopped. Then
the study's report is written again with the verdict."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from tracker import tags
from tracker.errors import TrackerError
from tracker.study.confirm_rounds import run, settings_of
from tracker.study.session import Session, StudyContext, TuneOptions
from tracker.tracking import confirmed


@dataclass(frozen=True)
class ConfirmResult:
    study_name: str
    parent_run_id: str
    verdict: str | None
    summary: str


def confirm_study(spec_path: str | Path, *, study_name: str | None = None,
                  storage: str | None = None, rounds: int | None = None,
                  top_k: int | None = None) -> ConfirmResult:
    """``tracker confirm``: run (or continue) the confirmation of an existing study on the
    spec's server, then rewrite the study's report with the verdict. A finished confirmation
    is replaced by a new one (the search is not run again)."""
    import optuna

    from tracker.search.storage import make_storage
    from tracker.study.conclude import finish_study
    from tracker.study.measured import resolve_serving
    from tracker.study.progress import Progress
    from tracker.tracking import runs
    from tracker.tracking.scaleout import PARENT_RUN_ATTR

    session = Session.open(spec_path, TuneOptions(study_name=study_name, storage=storage),
                           work_prefix="confirm-")
    spec, url, client = session.spec, session.storage_url, session.client
    try:
        study = optuna.load_study(study_name=spec.study_name,
                                  storage=make_storage(url, heartbeat_interval=None))
    except KeyError as exc:
        session.close()
        raise TrackerError(f"no study named {spec.study_name!r} in {url}: run `tracker tune` "
                           "first") from exc
    parent_id = study.user_attrs.get(PARENT_RUN_ATTR)
    if not parent_id:
        session.close()
        raise TrackerError(f"study {spec.study_name!r} has no MLflow parent run (user "
                           f"attribute {PARENT_RUN_ATTR!r})")
    prun = client.get_run(str(parent_id))
    parent = runs.StudyRun(client, str(parent_id), str(prun.info.experiment_id),
                           spec.study_name)
    progress = Progress(spec.search.n_trials, spec.search.n_trials, bar=False)
    try:
        with session.guarded("the measurements so far are kept: run the same command to "
                             "continue"):
            server = session.start_server()
            ctx = StudyContext(session, {}, study, parent, server,
                               resolve_serving(spec, server, session.info), progress,
                               store_model=False)
            run(ctx, settings_of(ctx, rounds, top_k), again=True)
    finally:
        progress.close()
    result = finish_study(ctx, status="FINISHED", owner=False,
                          stop_reason=str(prun.data.tags.get(tags.STOP_REASON, "")),
                          wall_s=float(prun.data.metrics.get("wall_s", 0.0)))
    verdict = confirmed.verdict(confirmed.load(study), dict(spec.objectives))
    own = os.environ.get("MLFLOW_RUN_ID")
    if own and own != parent.run_id:  # `mlflow run -e confirm` made a run of its own
        runs.set_tags(client, own, {tags.ROLE: "confirm", tags.STUDY: spec.study_name,
                                    tags.STUDY_RUN_ID: parent.run_id,
                                    tags.NOTE: result.summary,
                                    confirmed.VERDICT_TAG: verdict.verdict if verdict else ""})
    return ConfirmResult(spec.study_name, parent.run_id,
                         verdict.verdict if verdict else None, result.summary)
