"""The deploy-side output check: a new version answers the study's probes as the study's
default configuration did, after it loads beside the serving version and before it takes the
traffic (docs/output-check.md).

``tracker promote`` tags the registered version with the study's reference run and tolerances
(``tracker.check_reference_run``, ``tracker.check_tolerance``); :func:`for_version` reads them
and gives the publisher a step that sends the probes to the new version. A different answer
fails the step: the publisher rolls back (the old version keeps serving), the registry
pointers stay, and the version is tagged ``failed`` with the reason and
``tracker.deploy.refused``. A version without those tags (registered by hand, or before the
check existed) is deployed without it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING

import mlflow
from mlflow.exceptions import MlflowException

from tracker import tags
from tracker.deploy import steps
from tracker.errors import DeployError, TrackingError
from tracker.outputs import probes
from tracker.outputs.probes import ProbeSet, Tolerance
from tracker.tracking import registry, runs

if TYPE_CHECKING:
    from tracker.triton.infer import ControlClient

ARTIFACT = probes.ARTIFACT  # where the study stores it (outputs/stored.py)
STEP = "comparing its answers with the study's reference"
Verify = Callable[["ControlClient", str, int], None]


def for_version(client: mlflow.MlflowClient, name: str, version: int) -> Verify | None:
    """The check a registered version must pass, or None when it carries no reference."""
    try:
        found = client.get_model_version(name, str(version)).tags
    except MlflowException as exc:
        raise DeployError(f"cannot read {name} version {version}: {exc.message}") from exc
    run_id = found.get(tags.CHECK_REFERENCE)
    if not run_id:
        return None
    given = json.loads(found.get(tags.CHECK_TOLERANCE) or "{}")
    tol = Tolerance(float(given.get("rtol", 0.0)), float(given.get("atol", 0.0)),
                    frozenset(given.get("ignore", ())))
    try:
        reference = probes.loads(runs.read_file(client, run_id, ARTIFACT))
    except TrackingError as exc:
        raise DeployError(f"cannot read the study's reference answers: {exc}") from exc
    return lambda control, model, v: answers_as_reference(control, model, v, reference, tol)


def answers_as_reference(client: ControlClient, name: str, version: int,
                         reference: ProbeSet, tol: Tolerance) -> None:
    """StepFailed when ``version`` of ``name`` answers the probes unlike ``reference``."""
    got = reference.ask(client, name, version=version)
    verdict = probes.compare(reference, got, tol)
    if not verdict.passed:
        raise steps.StepFailed(STEP, f"version {version} answers differently from the "
                                     f"configuration the study measured: {verdict.detail}")


def mark_failed(name: str, version: int, error: DeployError, *, target: str) -> None:
    """Tag a version whose deployment failed: ``failed`` with the reason, and
    ``tracker.deploy.refused`` when it was the output check that refused it."""
    client = mlflow.MlflowClient()
    registry.mark_deployment(client, name, version, registry.FAILED, message=str(error),
                             target=target)
    if STEP in str(error):
        try:
            client.set_model_version_tag(name, str(version), tags.DEPLOY_REFUSED,
                                         str(error)[:5000])
        except MlflowException as exc:
            raise DeployError(f"cannot tag {name} version {version}: {exc.message}") from exc
