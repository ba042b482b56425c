"""``mlflow run``'s own run, and whether the study's run can be it.

``mlflow run`` creates its run before the entry point starts (``MLFLOW_RUN_ID``), in the
experiment given by ``--experiment-name`` / ``--experiment-id`` (or ``MLFLOW_EXPERIMENT_NAME``
/ ``_ID``), else in MLflow's ``Default`` experiment. The rule (:func:`place`):

- that run is in the spec's experiment, or in one the user chose (anything but ``Default``):
  it is the study's parent run (or the profile run); a choice other than the spec's is said
  in one line, since it is the user's to make;
- it is in ``Default`` (no experiment given) and the spec names another: the study's run is
  a new run in the spec's experiment, and :func:`point_at` gives it what MLflow's run holds
  (the ``-P`` params that were given, the source and project tags) and tags MLflow's run as a
  launcher pointing at it (``tracker.role=launcher``, ``tracker.study_run_id``, a note). One
  line on stderr (:func:`settle`) says where the study went and why.
"""

from __future__ import annotations

import os
import posixpath
import re
import sys
from dataclasses import dataclass

from mlflow import MlflowClient
from mlflow.entities import Param, RunTag
from mlflow.exceptions import MlflowException

from tracker import tags
from tracker.errors import TrackingError
from tracker.redact import redact_text

DEFAULT_EXPERIMENT_ID = "0"  # where `mlflow run` puts its run when no experiment is given
LAUNCHER_ROLE = "launcher"
_SERVERS = ("http://", "https://", "databricks")  # tracking URIs whose server places artifacts
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


@dataclass(frozen=True)
class Placement:
    """Where the run of this invocation goes. ``run_id``: the existing run to log into
    (``mlflow run``'s), or ``""`` for a new one in the spec's experiment; ``launcher``:
    ``mlflow run``'s run when it is not that run (then :func:`point_at` it); ``note``: one line
    for the user, ``""`` when everything is where the spec says."""

    run_id: str
    launcher: str | None
    note: str


def place(client: MlflowClient, experiment: str, *, what: str = "study") -> Placement:
    """Where ``what``'s run goes, under ``mlflow run`` or not (module doc)."""
    own = os.environ.get("MLFLOW_RUN_ID")
    if not own:
        return Placement("", None, "")
    try:
        run = client.get_run(own)
        exp = client.get_experiment(run.info.experiment_id)
    except MlflowException as exc:
        raise TrackingError(f"MLflow could not find the run of `mlflow run` (MLFLOW_RUN_ID={own}"
                            f") in {redact_text(str(client.tracking_uri))}: "
                            f"{redact_text(str(exc))}") from exc
    if exp.name == experiment:
        return Placement(own, None, "")
    if str(exp.experiment_id) != DEFAULT_EXPERIMENT_ID:
        return Placement(own, None, (
            f"note: the {what}'s run is `mlflow run`'s run {own} in experiment {exp.name!r}, "
            f"the one `mlflow run` was given, not the spec's {experiment!r}"))
    _create_beside(client, experiment, exp.artifact_location)
    return Placement("", own, (
        f"note: `mlflow run` was given no experiment and made its run {own} in {exp.name!r}; "
        f"the {what}'s run is a new run in the spec's experiment {experiment!r} (run {own} "
        f"points at it). `mlflow run --experiment-name {experiment}` makes them one run"))


def _create_beside(client: MlflowClient, name: str, default_location: str) -> None:
    """Create experiment ``name`` (when missing) with its artifacts beside ``Default``'s.
    With a database tracking URI the store lives in this process, and an experiment made here
    would put its artifacts in ``./mlruns`` of the project folder `mlflow run` runs in: MLflow's
    clone, gone after a run from a repository URI. A tracking server picks its own."""
    uri = str(client.tracking_uri)
    if uri.startswith(_SERVERS) or client.get_experiment_by_name(name) is not None:
        return
    folder = posixpath.join(posixpath.dirname(default_location.rstrip("/")),
                            _UNSAFE.sub("_", name))
    try:
        client.create_experiment(name, artifact_location=folder)
    except MlflowException as exc:  # another worker created it meanwhile: use theirs
        if client.get_experiment_by_name(name) is None:
            raise TrackingError(f"MLflow could not create the experiment {name!r}: "
                                f"{redact_text(str(exc))}") from exc


def settle(client: MlflowClient, placed: Placement, run_id: str, *, study: str) -> None:
    """After the run ``run_id`` was opened where ``placed`` said: point ``mlflow run``'s own run
    at it when that is another run, and print the note (if any) on stderr."""
    if placed.launcher:
        point_at(client, placed.launcher, run_id, study=study, note=placed.note)
    if placed.note:
        print(placed.note, file=sys.stderr, flush=True)


def point_at(client: MlflowClient, launcher: str, run_id: str, *, study: str,
             note: str) -> None:
    """Give run ``run_id`` what ``mlflow run``'s run ``launcher`` holds (the params that were
    given, where it came from), and tag the launcher as pointing at it."""
    try:
        source = client.get_run(launcher).data
        target = client.get_run(run_id).data
        params = [Param(k, v) for k, v in source.params.items() if k not in target.params]
        copied = [RunTag(k, v) for k, v in source.tags.items()
                  if k.startswith(tags.PROVENANCE) and k not in target.tags]
        client.log_batch(run_id, params=params, tags=[*copied, RunTag(tags.LAUNCHER, launcher)])
        client.log_batch(launcher, tags=[
            RunTag(tags.ROLE, LAUNCHER_ROLE), RunTag(tags.STUDY, study),
            RunTag(tags.STUDY_RUN_ID, run_id), RunTag(tags.NOTE, note.removeprefix("note: "))])
    except MlflowException as exc:
        raise TrackingError(f"MLflow could not link `mlflow run`'s run {launcher} to run "
                            f"{run_id}: {redact_text(str(exc))}") from exc
