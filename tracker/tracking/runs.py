"""The study in MLflow: one parent run per study, one child run per trial.

Everything goes through :class:`mlflow.MlflowClient` with explicit run ids (never the fluent,
thread-local run stack), so it works the same from worker threads. Under ``mlflow run`` the
parent is the run MLflow made (``MLFLOW_RUN_ID``); otherwise a new run. A rerun of the same
study (resume) makes a new parent and moves the children of the earlier parents of that study
(same study name and storage, tags ``tracker.study`` / ``tracker.storage``) under it, so one
parent always shows every trial; each earlier parent gets the tag ``tracker.superseded_by``.

Nothing secret is logged: URLs go through :mod:`tracker.redact`.
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import re
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ParamSpec, TypeVar
from urllib.parse import urlsplit

from mlflow import MlflowClient
from mlflow.entities import Metric, Param, RunTag
from mlflow.exceptions import MlflowException

from tracker import tags
from tracker.errors import TrackingError
from tracker.measure.types import Measurement
from tracker.redact import redact_text, redact_url
from tracker.tracking import patience

# tag names: tracker/tags.py (these aliases are the names this module has always exported)
PARENT_TAG, RUN_NAME_TAG, NOTE_TAG = tags.PARENT, tags.RUN_NAME, tags.NOTE
ROLE, STUDY, STORAGE, TRIAL, STATE = tags.ROLE, tags.STUDY, tags.STORAGE, tags.TRIAL, tags.STATE
FEASIBLE, SUPERSEDED_BY = tags.FEASIBLE, tags.SUPERSEDED_BY
BEST_RUN = tags.BEST_RUN
SWEEP_PREFIX = "sweep/"
# the names MLflow makes up for unnamed runs ("welcoming-bug-166"): replaced by the study's
_AUTO_NAME = re.compile(r"^(?:[a-z]+-[a-z]+-\d+|-)$")
P = ParamSpec("P")
R = TypeVar("R")
_MAX_VALUE = 6000  # MLflow's limit on a param/tag value length is larger; keep rows readable


def tag_value(value: object) -> str:
    """A param or tag value as MLflow gets it: redacted, cut to a readable length."""
    text = redact_text(value if isinstance(value, str) else repr(value)
                       if not isinstance(value, int | float | bool) else str(value))
    return text[:_MAX_VALUE]


_RESUME = "run the same command again: the study resumes"
_STORAGE_FIX = {
    errno.ENOSPC: f"free space on that disk and {_RESUME}",
    errno.EDQUOT: f"free space (or raise your quota) on that disk and {_RESUME}",
    errno.EFBIG: "the file is larger than the file system or this process's file size limit "
                 f"(ulimit -f) allows: free space or raise the limit, and {_RESUME}",
    errno.EROFS: "make it writable or choose another artifact location",
    errno.EACCES: "make it writable for this user or choose another artifact location",
    errno.EPERM: "make it writable for this user or choose another artifact location",
}


def storage_error(what: str, exc: OSError, path: str | Path | None = None) -> TrackingError:
    """One line for a file MLflow could not store (a full or read-only disk): what was being
    stored, the path (the destination of a copy; ``path`` where the error names none, as a
    failed ``write`` does), what the system said and the fix."""
    path = exc.filename2 if exc.filename2 is not None else exc.filename or path
    said = exc.strerror or str(exc)
    where = f"{path}: {said}" if path is not None else said
    fix = _STORAGE_FIX.get(exc.errno or 0)
    text = f"MLflow could not store {what}: {where}" + (f"; {fix}" if fix else "")
    return TrackingError(" ".join(redact_text(text).split()))


_REQUEST = re.compile(r"API request to (?P<url>\S+) failed with (?:timeout )?exception")
_CAUSES = (re.compile(r"\[Errno -?\d+\] [^'\"()]+"),
           re.compile(r"(?:Read|Connect|Connection to \S+) timed out"))


def unreachable(text: str) -> str:
    """``text`` with MLflow's message for a request that got no answer (the request's URL and
    urllib3's whole retry history) said in one line: "MLflow at <server> does not answer:
    <cause>"; any other text as it is."""
    request = _REQUEST.search(text)
    if request is None:
        return text
    cause = next((found for c in _CAUSES if (found := c.search(text, request.end()))), None)
    if cause is None:
        return text
    parts = urlsplit(request["url"])
    server = redact_url(f"{parts.scheme}://{parts.netloc}")
    return f"{text[:request.start()]}MLflow at {server} does not answer: {cause[0].strip()}"


def mlflow_call(what: str, fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    try:
        return fn(*args, **kwargs)
    except MlflowException as exc:
        raise TrackingError(f"MLflow could not {what}: "
                            f"{unreachable(redact_text(str(exc)))}") from exc


@dataclass
class StudyRun:
    """The parent run of a study, and the client that writes to it."""

    client: MlflowClient
    run_id: str
    experiment_id: str
    study_name: str
    adopted: int = 0  # child runs moved here from earlier parents of the same study

    @property
    def tracking_uri(self) -> str:
        return str(self.client.tracking_uri)


def _experiment_id(client: MlflowClient, name: str) -> str:
    exp = mlflow_call("look up the experiment", client.get_experiment_by_name, name)
    if exp is not None:
        if exp.lifecycle_stage == "deleted":
            mlflow_call("restore the experiment", client.restore_experiment, exp.experiment_id)
        return str(exp.experiment_id)
    try:
        return str(client.create_experiment(name))
    except MlflowException:  # another worker created it meanwhile
        exp = mlflow_call("look up the experiment", client.get_experiment_by_name, name)
        if exp is None:
            raise
        return str(exp.experiment_id)


def find_study_runs(client: MlflowClient, experiment_id: str, study_name: str,
                    storage_id: str) -> list[str]:
    """Run ids of the parent runs of this study in the experiment (oldest first)."""
    runs = mlflow_call("search runs", client.search_runs, [experiment_id],
                 filter_string=(f"tags.`{ROLE}` = 'study' and tags.`{STUDY}` = "
                                f"'{_quote(study_name)}' and tags.`{STORAGE}` = "
                                f"'{_quote(storage_id)}'"),
                 order_by=["attributes.start_time ASC"], max_results=1000)
    return [r.info.run_id for r in runs]


def _quote(text: str) -> str:
    return text.replace("'", "\\'")


def children(client: MlflowClient, experiment_id: str, parent_id: str) -> list[str]:
    runs = mlflow_call("search runs", client.search_runs, [experiment_id],
                 filter_string=f"tags.`{PARENT_TAG}` = '{parent_id}'", max_results=10000)
    return [r.info.run_id for r in runs]


def open_study_run(*, tracking_uri: str, experiment: str, study_name: str, storage: str,
                   run_name: str | None = None, params: Mapping[str, object] | None = None,
                   run_id: str | None = None) -> StudyRun:
    """The parent run of this invocation of the study.

    ``run_id`` (None: ``$MLFLOW_RUN_ID``, set by ``mlflow run``) names an existing run to use,
    in its own experiment; otherwise (or ``""``) a new run in ``experiment``. Children of
    earlier parents of the same study are adopted. ``params`` (spec values) are logged, redacted.
    """
    client = patience.client(tracking_uri)
    storage_id = redact_url(storage)
    run_id = os.environ.get("MLFLOW_RUN_ID") if run_id is None else run_id
    tags = {ROLE: "study", STUDY: study_name, STORAGE: storage_id}
    if run_id:
        run = mlflow_call("find the run from MLFLOW_RUN_ID", client.get_run, run_id)
        experiment_id = str(run.info.experiment_id)
        if run_name and _AUTO_NAME.match(run.data.tags.get(RUN_NAME_TAG, "") or "-"):
            mlflow_call("name the run", client.update_run, run_id, name=run_name)
    else:
        experiment_id = _experiment_id(client, experiment)
        run = mlflow_call("create the study run", client.create_run, experiment_id,
                    run_name=run_name or study_name, tags=tags)
        run_id = run.info.run_id
    logged = run.data.params
    batch_params = [Param(k, tag_value(v)) for k, v in (params or {}).items() if k not in logged]
    mlflow_call("log the study run", client.log_batch, run_id,
          params=batch_params, tags=[RunTag(k, v) for k, v in tags.items()])
    study = StudyRun(client, run_id, experiment_id, study_name)
    for old in find_study_runs(client, experiment_id, study_name, storage_id):
        if old == run_id:
            continue
        for child in children(client, experiment_id, old):
            mlflow_call("move a trial run", client.set_tag, child, PARENT_TAG, run_id)
            study.adopted += 1
        mlflow_call("tag an earlier study run", client.set_tag, old, SUPERSEDED_BY, run_id)
    return study


# ---- trial runs ----------------------------------------------------------------------------

def start_trial_run(study: StudyRun, number: int, params: Mapping[str, object],
                    tags: Mapping[str, str] | None = None) -> str:
    """A RUNNING child run ``trial-<number>`` with the trial's params (field-path names)."""
    all_tags = {PARENT_TAG: study.run_id, ROLE: "trial", STUDY: study.study_name,
                TRIAL: str(number), STATE: "RUNNING", **(tags or {})}
    run = mlflow_call("create a trial run", study.client.create_run, study.experiment_id,
                run_name=f"trial-{number}", tags=all_tags)
    run_id = str(run.info.run_id)
    mlflow_call("log trial params", study.client.log_batch, run_id,
          params=[Param(k, tag_value(v)) for k, v in params.items()])
    return run_id


def _finite(metrics: Mapping[str, float]) -> dict[str, float]:
    return {k: float(v) for k, v in metrics.items()
            if isinstance(v, int | float) and math.isfinite(v)}


def sweep_metrics(measurements: Sequence[Measurement],
                  name: Callable[[str], str] | None = None) -> list[Metric]:
    """``sweep/<metric>`` at ``step`` = concurrency, one point per measured level; ``name``
    names each metric as the study does (``sweep/<model>/<metric>`` for one of several
    models measured together)."""
    now = int(time.time() * 1000)
    named = name or (lambda key: key)
    out: list[Metric] = []
    for m in measurements:
        step = int(m.concurrency if m.concurrency is not None else round(m.request_rate or 0))
        out.extend(Metric(SWEEP_PREFIX + named(k), v, now, step)
                   for k, v in _finite(m.metrics()).items())
    return out


def metric_batch(metrics: Mapping[str, float], step: int = 0,
                 extra: Iterable[Metric] = ()) -> list[Metric]:
    """``extra`` and the finite ``metrics`` at ``step``, stamped now."""
    now = int(time.time() * 1000)
    return [*extra, *(Metric(k, v, now, step) for k, v in _finite(metrics).items())]


def log_metrics(client: MlflowClient, run_id: str, metrics: Mapping[str, float],
                step: int = 0, extra: Iterable[Metric] = ()) -> None:
    batch = metric_batch(metrics, step, extra)
    for i in range(0, len(batch), 900):
        mlflow_call("log metrics", client.log_batch, run_id, metrics=batch[i:i + 900])


def log_files(client: MlflowClient, run_id: str, files: Mapping[str, str | bytes | Path]) -> None:
    """Artifacts from text, bytes or files: ``{"config.pbtxt": text, "best/x.png": path}``.
    A disk that is full or read-only (the temporary folder's or the artifact store's) is a
    TrackingError naming the path and the fix."""
    what = f"the artifacts {', '.join(files)} of run {run_id}"
    target: Path | None = None
    try:
        with tempfile.TemporaryDirectory(prefix="tracker-artifacts-") as tmp:
            for name, content in files.items():
                target = Path(tmp) / name
                target.parent.mkdir(parents=True, exist_ok=True)
                if isinstance(content, Path):
                    target.write_bytes(content.read_bytes())
                elif isinstance(content, bytes):
                    target.write_bytes(content)
                else:
                    target.write_text(content)
            target = None  # what fails now is MLflow's copy, which names its paths
            mlflow_call("log artifacts", client.log_artifacts, run_id, tmp)
    except OSError as exc:
        raise storage_error(what, exc, target) from exc


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """MLflow's download progress bar off: a read of one small file is not long work."""
    name = "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"
    before = os.environ.get(name)
    os.environ[name] = "false"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


def read_file(client: MlflowClient, run_id: str, path: str) -> bytes:
    """One artifact's bytes (the reverse of :func:`log_files`); TrackingError naming the run
    and the path when MLflow or the artifact store cannot give it."""
    with tempfile.TemporaryDirectory(prefix="tracker-artifacts-") as tmp, _quiet():
        try:
            local = client.download_artifacts(run_id, path, tmp)
            return Path(local).read_bytes()
        except (MlflowException, OSError) as exc:
            raise TrackingError(f"MLflow could not read artifact {path} of run {run_id}: "
                                f"{redact_text(str(exc))}") from exc


def set_tags(client: MlflowClient, run_id: str, tags: Mapping[str, object]) -> None:
    mlflow_call("tag a run", client.log_batch, run_id,
          tags=[RunTag(k, tag_value(v)) for k, v in tags.items()])


def finish_run(client: MlflowClient, run_id: str, status: str, *,
               state: str | None = None, note: str | None = None) -> None:
    """End a run: ``status`` FINISHED, FAILED or KILLED (never left RUNNING); ``state`` is
    the Optuna trial state tag, ``note`` the run description (e.g. Triton's message)."""
    tags: dict[str, object] = {}
    if state is not None:
        tags[STATE] = state
    if note:
        tags[NOTE_TAG] = note
    if tags:
        set_tags(client, run_id, tags)
    mlflow_call("end a run", client.set_terminated, run_id, status)


def mark_unfinished(client: MlflowClient, run_ids: Iterable[str], status: str = "KILLED") -> int:
    """End every run in ``run_ids`` that is still RUNNING (cleanup after an interruption)."""
    n = 0
    for run_id in run_ids:
        try:
            if client.get_run(run_id).info.status == "RUNNING":
                client.set_terminated(run_id, status)
                n += 1
        except MlflowException:
            continue
    return n
