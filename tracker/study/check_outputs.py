"""The output check of a study: every configuration answers the default's probes as the
default does before it is measured (docs/tuning.md, "Every proposal computes what the model
computes"). The comparison itself is tracker/triton/probes.py.

The default configuration (the baseline trial, always a study's first) answers the probes one
at a time: those are the reference answers, stored once as ``check/reference.npz`` on the
parent run and named in the study's user attribute ``tracker.check_reference_run``, so a
resumed study or another worker compares against the same answers. Every trial, the default
included, then answers the probes one at a time and, when its entry model batches
(``max_batch_size > 0``), all at once, so a dynamic batcher puts different probes in one
batch. A difference fails the trial before it is measured (:class:`OutputsDiffer`); a trial's
run gets ``check/passed`` (1 or 0) and ``check/max_abs_diff``.

Probes: the rows of ``load.input_data`` (at most ``check.outputs.probes``), else that many
inputs drawn from the study's seed. A sequence model would send each probe as a whole sequence
(``probes.ask``'s ``send``); decoupled models are not checked yet, and of several entry
models only the configuration's entry is.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from optuna.storages import fail_stale_trials
from optuna.trial import TrialState

from tracker import tags
from tracker.errors import MeasurementError, SpecError, TrackerError
from tracker.measure.inputs import input_specs, load_samples, random_samples
from tracker.tracking import runs
from tracker.trial_attrs import TrialRecord, shown_params
from tracker.triton import probes
from tracker.triton.probes import ProbeSet, Tensors, Tolerance, Verdict
from tracker.triton.sequence import is_sequence

if TYPE_CHECKING:
    import optuna
    from mlflow import MlflowClient

    from tracker.spec import StudySpec
    from tracker.triton.model_config import ModelConfig
    from tracker.triton.server.base import TritonServer

REFERENCE_ATTR = tags.CHECK_REFERENCE
ARTIFACT = probes.ARTIFACT
PASSED, MAX_DIFF, SECONDS = "check/passed", "check/max_abs_diff", "check/seconds"
WAIT_S = 900.0  # how long a worker waits for another's default configuration to answer


class OutputsDiffer(TrackerError):
    """A configuration answers the probes differently from the default configuration."""


def tolerance(spec: StudySpec) -> Tolerance | None:
    """The spec's tolerances (None: ``check.outputs: false``)."""
    out = spec.check.outputs
    return Tolerance(out.rtol, out.atol, frozenset(out.ignore)) if out.enabled else None


def make_probes(spec: StudySpec, config: ModelConfig) -> list[Tensors]:
    """The probe requests for the entry model's ``config``: one batch item each."""
    count = spec.check.outputs.probes
    types = {s.name: s.datatype for s in input_specs(config)}
    data = spec.load.input_data
    if data is not None:
        samples = load_samples(data, config, 1)[:count]
    else:
        seed = spec.search.seed or 0
        samples = [random_samples(config, 1, seed=seed + i)[0] for i in range(count)]
    return [{name: (types[name], array) for name, array in s.items()} for s in samples]


def output_names(spec: StudySpec, config: ModelConfig) -> list[str]:
    """The entry model's outputs; SpecError when ``check.outputs.ignore`` names another."""
    names = [str(o.name) for o in config.output]
    wrong = [n for n in spec.check.outputs.ignore if n not in names]
    if wrong:
        raise SpecError([f"check.outputs.ignore: {wrong[0]!r} is no output of model "
                         f"{str(config.name)!r} (its outputs: {names})"])
    return names


def unchecked_reason(config: ModelConfig) -> str | None:
    """Why this model's answers are not compared (None: they are)."""
    if config.model_transaction_policy.decoupled:
        return "a decoupled model's response streams are not compared yet"
    if is_sequence(config):
        return "a stateful model's answers depend on its sequence's earlier steps: not compared yet"
    return None


# ---- the reference, stored once per study -------------------------------------------------

_CACHE: dict[str, ProbeSet] = {}


def store_reference(study: optuna.Study, client: MlflowClient, run_id: str,
                    reference: ProbeSet, tol: Tolerance) -> None:
    """The reference on the parent run; the run and the tolerances named on the study (what
    ``tracker promote`` copies onto the registered version, for the deploy check)."""
    runs.log_files(client, run_id, {ARTIFACT: probes.dumps(reference)})
    ignored = f"; outputs ignored: {', '.join(sorted(tol.ignore))}" if tol.ignore else ""
    runs.set_tags(client, run_id, {tags.CHECK: (
        f"{len(reference.inputs)} probes, outputs {reference.outputs} within rtol "
        f"{tol.rtol:g}, atol {tol.atol:g}{ignored}")})
    study.set_user_attr(tags.CHECK_TOLERANCE, {"rtol": tol.rtol, "atol": tol.atol,
                                               "ignore": sorted(tol.ignore)})
    study.set_user_attr(REFERENCE_ATTR, run_id)
    _CACHE[run_id] = reference


def load_reference(client: MlflowClient, run_id: str) -> ProbeSet:
    if run_id not in _CACHE:
        with tempfile.TemporaryDirectory(prefix="tracker-probes-") as tmp:
            path = client.download_artifacts(run_id, ARTIFACT, tmp)
            _CACHE[run_id] = probes.loads(Path(path).read_bytes())
    return _CACHE[run_id]


def _baseline_running(study: optuna.Study) -> bool:
    """Whether another worker is running the default configuration now. A waiting default
    does not count: this worker may be the one to run it, after the trial that waits."""
    return any(TrialRecord.of(t).baseline for t in study.get_trials(
        deepcopy=False, states=(TrialState.RUNNING,)))


def find_reference(study: optuna.Study, client: MlflowClient,
                   wait_s: float = WAIT_S) -> ProbeSet | None:
    """The study's reference answers, waiting (up to ``wait_s``) while another worker's
    default configuration is still answering; None when the study has none (yet)."""
    deadline = time.monotonic() + wait_s
    while True:
        run_id = study.user_attrs.get(REFERENCE_ATTR)
        if run_id:
            return load_reference(client, str(run_id))
        if not _baseline_running(study) or time.monotonic() > deadline:
            return None
        time.sleep(1.0)
        # a killed worker's default stops holding us up once its heartbeat is stale
        fail_stale_trials(study)


# ---- one trial's check --------------------------------------------------------------------

@dataclass
class OutputCheck:
    """The check of one trial: called by measure_configuration once the configuration is
    served and before it is measured (``check(server, model, loaded_config)``)."""

    spec: StudySpec
    study: optuna.Study
    client: MlflowClient
    parent_run_id: str
    baseline: bool
    changed: Mapping[str, object] = field(default_factory=dict)  # knobs unlike the default's
    verdict: Verdict | None = None
    skipped: str = ""
    seconds: float = 0.0  # what the check cost this trial (the reference included)
    fresh: bool = False   # the reference was made by this trial's answers one at a time

    def __call__(self, server: TritonServer, model: str, config: ModelConfig) -> None:
        started = time.monotonic()
        try:
            self._check(server, model, config)
        finally:
            self.seconds = time.monotonic() - started

    def _check(self, server: TritonServer, model: str, config: ModelConfig) -> None:
        tol = tolerance(self.spec)
        why = "check.outputs is false" if tol is None else unchecked_reason(config)
        if tol is None or why is not None:
            self.skipped = str(why)
            return
        with server.client() as client:
            reference = self._reference(client, model, config, tol)
            if reference is None:
                self.skipped = "the study has no reference answers (its default " \
                               "configuration did not answer)"
                return
            self.verdict = check_answers(client, model, config, reference, tol,
                                         alone=not self.fresh)
        if not self.verdict.passed:
            raise OutputsDiffer(self.message())

    def _reference(self, client: probes.Infers, model: str, config: ModelConfig,
                   tol: Tolerance) -> ProbeSet | None:
        if not self.baseline:
            return find_reference(self.study, self.client)
        known = self.study.user_attrs.get(REFERENCE_ATTR)
        if known:  # a resumed study: its first default's answers stay the reference
            return load_reference(self.client, str(known))
        try:
            inputs = make_probes(self.spec, config)
        except MeasurementError as err:
            raise MeasurementError(f"cannot make the output check's probes: {err}") from err
        outputs = output_names(self.spec, config)
        reference = ProbeSet(inputs, outputs, probes.ask(client, model, inputs, outputs))
        store_reference(self.study, self.client, self.parent_run_id, reference, tol)
        self.fresh = True
        return reference

    def message(self) -> str:
        assert self.verdict is not None
        knobs = ", ".join(f"{k}={v}" for k, v in self.changed.items()) or "none"
        return (f"outputs differ from the default configuration's (knobs unlike the "
                f"default's: {knobs}): {self.verdict.detail}")

    def metrics(self) -> dict[str, float]:
        """``check/passed``, ``check/max_abs_diff`` and ``check/seconds`` (none when not
        checked)."""
        if self.verdict is None:
            return {}
        return {PASSED: float(self.verdict.passed), MAX_DIFF: self.verdict.max_abs_diff,
                SECONDS: round(self.seconds, 4)}

    def run_tags(self) -> dict[str, object]:
        return {tags.CHECK: f"not checked: {self.skipped}"} if self.skipped else {}


def check_answers(client: probes.Infers, model: str, config: ModelConfig,
                  reference: ProbeSet, tol: Tolerance, *, alone: bool = True) -> Verdict:
    """The probes one at a time (unless not ``alone``: the default configuration, whose
    answers one at a time are the reference), then (a model that batches) all at once; the
    first verdict that fails, else the one with the larger difference."""
    one = probes.compare(reference, probes.ask(client, model, reference.inputs,
                                               reference.outputs) if alone
                         else reference.answers, tol, "sent one at a time")
    if not one.passed or config.max_batch_size < 1:
        return one
    many = probes.compare(reference, probes.ask(client, model, reference.inputs,
                                                reference.outputs, together=True),
                          tol, f"{len(reference.inputs) * probes.COPIES} requests sent together")
    return many if not many.passed or many.max_abs_diff > one.max_abs_diff else one


def changed_knobs(study: optuna.Study, params: Mapping[str, Any]) -> dict[str, object]:
    """The trial's knobs whose value differs from the default configuration's trial."""
    for t in study.get_trials(deepcopy=False):
        record = TrialRecord.of(t)
        if record.baseline:
            default = shown_params(dict(t.params), record.exact_params)
            return {k: v for k, v in params.items() if default.get(k) != v}
    return dict(params)
