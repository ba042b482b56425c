"""``tracker confirm``: the confirmation round (tracker/confirm.py) on a finished study, without
re-running the search; the study's rounds are continued (an interrupted or inconclusive
confirmation goes on where it stopped), ``new`` starts over. Then the study's report is written
again with the verdict."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tracker import tags
from tracker.confirm import run, settings_of
from tracker.errors import TrackerError
from tracker.tracking import confirmed
from tracker.trial import Context

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
                    storage: str | None = None) -> Iterator[tuple[Context, Run]]:
    """The study of SPEC, its parent run and the spec's server as a confirmation's
    :class:`~tracker.trial.Context` (and the parent's MLflow run); the server is stopped and
    the work folder removed on the way out. ``tracker confirm`` runs one confirmation in it;
    benchmarks/verdict_stability.py runs its A/A confirmations in one."""
    import tempfile

    import optuna
    from mlflow import MlflowClient

    from tracker.pipeline import resolve_serving
    from tracker.progress import Progress
    from tracker.runner import TuneOptions, apply_overrides, expand_env, shielded, tracking_uri
    from tracker.search.storage import make_storage
    from tracker.search.study import default_storage
    from tracker.spec import ensure_model, load_spec
    from tracker.tracking import runs
    from tracker.tracking.scaleout import PARENT_RUN_ATTR
    from tracker.triton.model_config import model_info
    from tracker.triton.server.modes import make_server

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    spec = apply_overrides(load_spec(spec_path), TuneOptions(study_name=study_name,
                                                             storage=storage))
    ensure_model(spec)
    info = model_info(spec.model)
    uri = tracking_uri(spec)
    url = expand_env(spec.search.storage or default_storage(uri))
    try:
        study = optuna.load_study(study_name=spec.study_name,
                                  storage=make_storage(url, heartbeat_interval=None))
    except KeyError as exc:
        raise TrackerError(f"no study named {spec.study_name!r} in {url}: run `tracker tune` "
                           "first") from exc
    parent_id = study.user_attrs.get(PARENT_RUN_ATTR)
    if not parent_id:
        raise TrackerError(f"study {spec.study_name!r} has no MLflow parent run (user "
                           f"attribute {PARENT_RUN_ATTR!r})")
    client = MlflowClient(tracking_uri=uri)
    prun = client.get_run(str(parent_id))
    parent = runs.StudyRun(client, str(parent_id), str(prun.info.experiment_id),
                           spec.study_name)
    server = make_server(spec.server)
    progress = Progress(spec.search.n_trials, spec.search.n_trials, bar=False)
    work = Path(tempfile.mkdtemp(prefix=f"{spec.study_name}-confirm-"))
    ctx = Context(spec, info, {}, study, parent, server, resolve_serving(spec, server), work,
                  progress, log_models=False)
    try:
        yield ctx, prun
    finally:
        with shielded():
            with contextlib.suppress(Exception):
                server.stop()
            shutil.rmtree(work, ignore_errors=True)
            progress.close()


def confirm_study(spec_path: str | Path, *, study_name: str | None = None,
                  storage: str | None = None, rounds: int | None = None,
                  top_k: int | None = None, new: bool = False) -> ConfirmResult:
    """``tracker confirm``: continue the confirmation of an existing study on the spec's server
    up to ``rounds`` rounds in all (a finished one of the same configurations too; ``new``:
    start a new one), then rewrite the study's report with the verdict. The search is not run
    again."""
    import signal

    from tracker.conclude import finish_study
    from tracker.runner import Interrupted, received_signal, signals
    from tracker.tracking import runs

    with confirm_session(spec_path, study_name=study_name, storage=storage) as (ctx, prun), \
            signals():
        try:
            run(ctx, settings_of(ctx, rounds, top_k), again=True, new=new)
        except KeyboardInterrupt as exc:
            signum = received_signal()
            raise Interrupted(signum, f"interrupted by {signal.Signals(signum).name}; the "
                              "measurements so far are kept: run the same command to "
                              "continue") from exc
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
