"""The output check outside a study's trials: ``tracker profile`` and the confirmation
(``tracker confirm``, and a study's own) check a configuration before they measure it, as a
trial is checked (outputs/trials.py, docs/output-check.md).

The reference is the study's (``check/reference.npz`` on its parent run, named by the study's
``tracker.check_reference_run``) when there is one; else, for ``tracker profile``, the
default configuration's answers, asked on the same server just before (or, when the profiled
configuration is the default itself, its own answers one at a time, checked against its
answers sent together).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import optuna

from tracker.outputs.default import serve_default
from tracker.outputs.probes import Comparison, ProbeSet, Tolerance
from tracker.outputs.stored import REFERENCE_ATTR, load_reference
from tracker.outputs.trials import (
    MAX_DIFF,
    PASSED,
    OutputsDiffer,
    ProbesFailed,
    answers_of,
    check_answers,
    probe_client,
    probes_failed,
    tolerance,
    warm_up,
)
from tracker.search.storage import make_storage
from tracker.triton.model_config import split_params

if TYPE_CHECKING:
    from mlflow import MlflowClient

    from tracker.invocation.session import Session
    from tracker.spec import StudySpec
    from tracker.triton.model_config import ModelConfig
    from tracker.triton.server.base import TritonServer


@dataclass
class ReferenceCheck:
    """A configuration's answers against ``reference`` (None: the configuration checked is
    the default, whose own answers one at a time are the reference); passed to
    ``measure`` as its procedure's ``check``."""

    spec: StudySpec
    tol: Tolerance
    reference: ProbeSet | None = None
    verdict: Comparison | None = None
    times: list[float] = field(default_factory=list)

    def __call__(self, server: TritonServer, model: str, config: ModelConfig) -> int:
        self.times.clear()
        with probe_client(self.spec, server) as client:
            reference = self.reference or answers_of(self.spec, client, model, config,
                                                     self.times)
            self.verdict = check_answers(client, model, config, reference, self.tol,
                                         alone=self.reference is not None, times=self.times)
        if self.verdict.error and self.reference is not None:
            raise ProbesFailed(probes_failed(self.spec, self.verdict.error, server.log_text()))
        if not self.verdict.passed:
            what = ("outputs differ from the default configuration's" if self.reference else
                    "the default configuration answers differently one at a time and sent "
                    "together (its answers vary with how requests are batched)")
            raise OutputsDiffer(f"{what}: {self.verdict.detail}")
        return warm_up(self.spec, model, reference, self.times)[0]

    def metrics(self) -> dict[str, float]:
        """``check/passed`` and ``check/max_abs_diff`` (none when not checked)."""
        if self.verdict is None:
            return {}
        return {PASSED: float(self.verdict.passed), MAX_DIFF: self.verdict.max_abs_diff}


def stored_reference(spec: StudySpec, storage_url: str,
                     client: MlflowClient) -> ProbeSet | None:
    """The reference of the spec's study in ``storage_url``; None when there is no such
    study (a sqlite file that does not exist is not created) or it has no reference."""
    if storage_url.startswith("sqlite:///") and not Path(storage_url[10:]).exists():
        return None
    try:
        study = optuna.load_study(study_name=spec.study_name,
                                  storage=make_storage(storage_url, heartbeat_interval=None))
    except KeyError:
        return None
    run_id = study.user_attrs.get(REFERENCE_ATTR)
    return load_reference(client, str(run_id)) if run_id else None


def profile_check(session: Session, server: TritonServer,
                  values: Mapping[str, object]) -> ReferenceCheck | None:
    """The check of ``tracker profile``: against the study's reference when there is one;
    else, when ``values`` change the configuration (not only the load), against the default
    configuration's answers, served on ``server`` first; else (the default itself) against
    its own answers one at a time. None when the check is off or the model's answers are
    not compared."""
    spec = session.spec
    tol = tolerance(spec)
    if tol is None:
        return None
    reference = stored_reference(spec, session.storage_url, session.client)
    _, load_values = split_params(values)
    if reference is None and set(values) - set(load_values):
        # beside the work folder: the profile's repository is the work folder itself
        folder = Path(tempfile.mkdtemp(prefix="check-default-", dir=session.workdir.parent))
        try:
            repo = serve_default(session, server, folder)
            with probe_client(spec, server) as client:
                config = client.model_config(repo.model_name)
                reference = answers_of(spec, client, repo.model_name, config)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    return ReferenceCheck(spec, tol, reference)


def study_check(spec: StudySpec, study: optuna.Study,
                client: MlflowClient) -> ReferenceCheck | None:
    """The check of a study's confirmation: against the study's reference (None: the check
    is off, or the study has no reference)."""
    tol = tolerance(spec)
    run_id = study.user_attrs.get(REFERENCE_ATTR)
    if tol is None or not run_id:
        return None
    return ReferenceCheck(spec, tol, load_reference(client, str(run_id)))
