"""``tracker confirm``: the confirmation (tracker/confirm/rounds.py) on a finished study,
without re-running the search; the study's rounds are continued (an interrupted or
inconclusive confirmation goes on where it stopped), ``new`` starts over. Then the study's
report is written again with the verdict."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from tracker import tags
from tracker.confirm.rounds import run, settings_of
from tracker.errors import TrackerError
from tracker.invocation.session import Session, StudyContext, TuneOptions
from tracker.spec import load_spec
from tracker.tracking import outbox, patience
from tracker.verdict import record as confirmed

if TYPE_CHECKING:
    from mlflow.entities import Run


@dataclass(frozen=True)
class ConfirmResult:
    study_name: str
    parent_run_id: str
    verdict: str | None
    summary: str


@contextlib.contextmanager
def confirm_session(spec_path: str | Path, *, study_name: str | None = None,
                    storage: str | None = None, interrupted: str = "",
                    wait: patience.Wait | None = None) -> Iterator[tuple[StudyContext, Run]]:
    """The study of SPEC, its parent run and the spec's server as a confirmation's
    :class:`~tracker.invocation.session.StudyContext` (and the parent's MLflow run), inside the
    session's guard: Ctrl-C becomes Interrupted (``interrupted`` added to its message), and
    the server is stopped and the work folder removed on the way out. ``tracker confirm`` runs
    one confirmation in it; benchmarks/verdict_stability.py runs its A/A confirmations in
    one. Inside ``wait`` (tracking/patience.py), which gets the spec's wait, the records a
    study kept for MLflow are written first."""
    import optuna

    from tracker.candidate.measurement import Bench, resolve_serving
    from tracker.invocation.progress import Progress
    from tracker.search.storage import make_storage
    from tracker.tracking import runs
    from tracker.tracking.scaleout import PARENT_RUN_ATTR

    session = Session.open(spec_path, TuneOptions(study_name=study_name, storage=storage),
                           work_prefix="confirm-")
    spec, url, client = session.spec, session.storage_url, session.client
    if wait is not None:
        where = outbox.folder(spec.study_name)
        try:
            wait.wait_s = patience.wait_seconds(spec.mlflow.wait_s)
            wait.kept = lambda: outbox.kept_text(where)
            outbox.replay(client, where, wait.report)
        except TrackerError:
            session.close()
            raise
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
        with session.guarded(interrupted):
            server = session.start_server()
            yield StudyContext(session, {}, study, parent, Bench(
                spec, session.configuration, server,
                resolve_serving(spec, server, session.configuration)), progress,
                               store_model=False), prun
    finally:
        progress.close()


def confirm_study(spec_path: str | Path, *, study_name: str | None = None,
                  storage: str | None = None, rounds: int | None = None,
                  top_k: int | None = None, new: bool = False) -> ConfirmResult:
    """``tracker confirm``: continue the confirmation of an existing study on the spec's server
    up to ``rounds`` rounds in all (a finished one of the same configurations too; ``new``:
    start a new one), then rewrite the study's report with the verdict. The search is not run
    again. Given ``rounds``, no budget stops it before them (the budget applies otherwise)."""
    from tracker.conclusion.finish import spec_argument

    with patience.waiting(patience.wait_seconds(None), _say) as wait:
        try:
            return _confirm(spec_path, study_name, storage, rounds, top_k, new, wait)
        except patience.TrackingUnavailable as exc:
            name = study_name or load_spec(spec_path).study_name
            command = f"tracker confirm {spec_argument(Path(spec_path).resolve())}"
            raise patience.TrackingUnavailable(
                outbox.stop_line(exc, outbox.folder(name), command)) from exc


def _say(text: str) -> None:
    print(text, flush=True)


def _confirm(spec_path: str | Path, study_name: str | None, storage: str | None,
             rounds: int | None, top_k: int | None, new: bool,
             wait: patience.Wait) -> ConfirmResult:
    from tracker.conclusion.finish import finish_study
    from tracker.tracking import runs

    with confirm_session(spec_path, study_name=study_name, storage=storage, wait=wait,
                         interrupted="the measurements so far are kept: run the same command "
                                     "to continue") as (ctx, prun):
        settings = settings_of(ctx, rounds, top_k)
        if rounds is not None:  # rounds asked for by name: no budget cuts them short
            settings = replace(settings, budget_s=None, floor_s=0.0)
        run(ctx, settings, again=True, new=new)
    spec, parent, study = ctx.spec, ctx.parent, ctx.study
    client = parent.client
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
