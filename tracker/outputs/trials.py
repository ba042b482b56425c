"""The output check of a study: every configuration answers the default's probes as the
default does before it is measured (docs/output-check.md). The comparison itself is
tracker/outputs/probes.py.

The default configuration (the baseline trial, always a study's first) answers the probes one
at a time: those are the reference answers, stored once as ``check/reference.npz`` on the
parent run and named in the study's user attribute ``tracker.check_reference_run``, so a
resumed study or another worker compares against the same answers. Every trial, the default
included, then answers the probes one at a time and, when its entry model batches
(``max_batch_size > 0``), all at once, so a dynamic batcher puts different probes in one
batch. A difference fails the trial before it is measured (:class:`OutputsDiffer`); a trial's
run gets ``check/passed`` (1 or 0) and ``check/max_abs_diff``.

Probes: the rows of ``load.input_data`` (at most ``check.outputs.probes``), else that many
inputs drawn from the study's seed. A stateful model's probe is a whole sequence: the user's
sequences (``load.input_data`` in perf_analyzer's sequence layout), else :data:`STEPS` steps
drawn from the seed; every configuration is sent them as sequences, whatever its scheduler. A
decoupled model's probes are the load's first requests (its prompt lengths and tokens to
make), each answer the whole response stream; a stateful decoupled model's probe is a whole
sequence whose steps are each streamed; an iterative sequence model's is one streamed request
(the whole sequence). Of several entry models only the configuration's entry is checked.

The check's probes sent one at a time are also the sweep's first warm-up requests: the
configuration is cold when the check starts, so its first answers carry the cost of the
model's first inferences, which the sweep's warm-up would otherwise pay. ``__call__`` returns
how many of them stand in for the first level's warm-up (the load's ``warmup_requests``
less one, at most; the sweep sends only the rest) and ``check/warmup_s`` is what they took:
``check/seconds`` less that is what the check adds to the study.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from tracker import tags
from tracker.errors import MeasurementError, SpecError, TrackerError
from tracker.measure.inputs import input_specs, load_samples, random_samples
from tracker.measure.sequence_steps import sequence_samples
from tracker.measure.stream_inputs import samples_for
from tracker.outputs import probes
from tracker.outputs.probes import Comparison, ProbeSet, Tensors, Tolerance
from tracker.outputs.stored import (
    REFERENCE_ATTR,
    find_reference,
    load_reference,
    store_reference,
)
from tracker.trial_record import TrialRecord, shown_params
from tracker.triton.client import TritonClient
from tracker.triton.sequence import controls, is_decoupled, sends_sequences
from tracker.triton.server.logs import log_errors

if TYPE_CHECKING:
    import optuna
    from mlflow import MlflowClient

    from tracker.spec import StudySpec
    from tracker.triton.infer import InferClient
    from tracker.triton.model_config import ModelConfig
    from tracker.triton.server.base import TritonServer

PASSED, MAX_DIFF, SECONDS = "check/passed", "check/max_abs_diff", "check/seconds"
WARMUP = "check/warmup_s"  # of check/seconds: the probes that were the sweep's warm-up
STEPS = 4  # steps of a stateful model's drawn probe sequences


class OutputsDiffer(TrackerError):
    """A configuration answers the probes differently from the default configuration."""


class ProbesFailed(OutputsDiffer):
    """A configuration crashed or timed out on a probe the default configuration answered."""


#: what a client's error says when the server or its stub went away, or the answer was late
_CRASHED = ("not healthy", "unhealthy", "failed to connect", "connection refused",
            "socket closed", "unavailable", "connection reset", "stub process")
_TIMED_OUT = ("deadline exceeded", "timed out", "timeout")


def failure_words(error: str, timeout_s: float) -> str:
    """How a configuration failed a probe, from the client's error: it crashed, it timed out
    after ``timeout_s``, or it answered with an error."""
    low = error.lower()
    if any(word in low for word in _TIMED_OUT):
        return f"timed out after {timeout_s:g} s"
    if any(word in low for word in _CRASHED):
        return "crashed"
    return "answered with an error"


def probes_failed(spec: StudySpec, error: str, log: str, knobs: str = "") -> str:
    """A configuration that crashed or timed out (``check.outputs.timeout_s``) on a probe the
    default answered: the words say which (:func:`failure_words`), with the client's
    ``error``, what ``knobs`` differ and the server log's last error lines."""
    lines = log_errors(log)
    logged = f"; server log: {' | '.join(lines)}" if lines else ""
    what = failure_words(error, spec.check.outputs.timeout_s)
    return (f"the configuration {what} on the output check's "
            f"probes, which the default configuration answered{knobs}: {error}{logged}")


def probe_client(spec: StudySpec, server: TritonServer) -> TritonClient:
    """A client for sending the probes to ``server``: each one's deadline is
    ``check.outputs.timeout_s``."""
    return TritonClient(server.endpoints, timeout_s=spec.check.outputs.timeout_s)


def tolerance(spec: StudySpec) -> Tolerance | None:
    """The spec's tolerances (None: ``check.outputs: false``)."""
    out = spec.check.outputs
    return Tolerance(out.rtol, out.atol, frozenset(out.ignore)) if out.enabled else None


def make_probes(spec: StudySpec, config: ModelConfig) -> list[Tensors]:
    """The probe requests for the entry model's ``config``, from that model's own load
    (``load.models.<name>`` among several): one batch item each (a stateful model's: whole
    sequences, :func:`_sequences`)."""
    count = spec.check.outputs.probes
    types = {s.name: s.datatype for s in input_specs(config)}
    load = spec.load.for_model(str(config.name))
    data = load.input_data
    if sends_sequences(config):
        samples = _sequences(spec, config, count)
    elif is_decoupled(config):  # the load's own requests (prompt lengths, tokens to make)
        samples = samples_for(config, load.model_copy(update={"batch_size": 1}))[:count]
    elif data is not None:
        samples = load_samples(data, config, 1)[:count]
    else:
        seed = spec.search.seed or 0
        samples = [random_samples(config, 1, seed=seed + i)[0] for i in range(count)]
    return [{name: (types[name], array) for name, array in s.items()} for s in samples]


def _sequences(spec: StudySpec, config: ModelConfig, count: int) -> list[dict[str, Any]]:
    """``count`` whole sequences of one-item steps, each input's steps stacked on a first
    axis: the load's sequences from ``load.input_data`` when it gives them, else its rows (or
    inputs drawn from the seed) taken :data:`STEPS` at a time."""
    load = spec.load.for_model(str(config.name)).model_copy(update={"batch_size": 1})
    steps, given = sequence_samples(config, load) if load.input_data is not None else ([], None)
    if given is not None:
        seqs = [[steps[k] for k in seq] for seq in given[:count]]
    else:
        seed = spec.search.seed or 0
        rows = steps or [random_samples(config, 1, seed=seed + k)[0]
                         for k in range(count * STEPS)]
        seqs = [[rows[(i * STEPS + j) % len(rows)] for j in range(STEPS)] for i in range(count)]
    try:
        return [{name: np.stack([step[name] for step in seq]) for name in seq[0]}
                for seq in seqs]
    except ValueError as err:
        raise MeasurementError(f"a stateful model's probe is a whole sequence whose steps "
                               f"have one shape, but the steps' shapes differ: {err}") from err


def sequence_kind(config: ModelConfig) -> str:
    """How a probe set for ``config`` is sent: ``""`` one request per probe, else whole
    sequences with correlation IDs of this kind (``"uint"``, ``"string"``)."""
    return controls(config).corrid_type if sends_sequences(config) else ""


def output_names(spec: StudySpec, config: ModelConfig) -> list[str]:
    """The entry model's outputs; SpecError when ``check.outputs.ignore`` names another."""
    names = [str(o.name) for o in config.output]
    wrong = [n for n in spec.check.outputs.ignore if n not in names]
    if wrong:
        raise SpecError([f"check.outputs.ignore: {wrong[0]!r} is no output of model "
                         f"{str(config.name)!r} (its outputs: {names})"])
    return names



def summary_note(spec: StudySpec) -> str:
    """What the study's summary sentence adds about the check: an output it ignored, or
    that it was off ("" when every output was compared)."""
    out = spec.check.outputs
    if not out.enabled:
        return " The outputs were not checked against the default's (check.outputs: false)."
    if out.ignore:
        return (f" The output check ignored {', '.join(out.ignore)} "
                "(check.outputs.ignore): those outputs may differ from the default's.")
    return ""


# ---- one trial's check --------------------------------------------------------------------

@dataclass
class OutputCheck:
    """The check of one trial: called by ``measure`` once the configuration is
    served and before it is measured (``check(server, model, loaded_config)``)."""

    spec: StudySpec
    study: optuna.Study
    client: MlflowClient
    parent_run_id: str
    baseline: bool
    changed: Mapping[str, object] = field(default_factory=dict)  # knobs unlike the default's
    verdict: Comparison | None = None
    skipped: str = ""
    seconds: float = 0.0  # what the check cost this trial (the reference included)
    fresh: bool = False   # the reference was made by this trial's answers one at a time
    times: list[float] = field(default_factory=list)  # each probe's, sent one at a time
    warmup_s: float = 0.0  # the part of ``seconds`` that stood in for the sweep's warm-up
    probe_set: ProbeSet | None = field(default=None, init=False)  # what it was asked

    def __call__(self, server: TritonServer, model: str, config: ModelConfig) -> int:
        """Check the served configuration (OutputsDiffer when it answers differently); the
        number of the sweep's first warm-up requests its probes stand in for."""
        started = time.monotonic()
        try:
            self._check(server, model, config)
        finally:
            self.seconds = time.monotonic() - started
        return self._warm_up(model)

    def _warm_up(self, model: str) -> int:
        if self.probe_set is None:
            return 0
        done, self.warmup_s = warm_up(self.spec, model, self.probe_set, self.times)
        return done

    def _check(self, server: TritonServer, model: str, config: ModelConfig) -> None:
        tol = tolerance(self.spec)
        if tol is None:
            self.skipped = "check.outputs is false"
            return
        with probe_client(self.spec, server) as client:
            reference = self._reference(client, model, config, tol)
            if reference is None:
                self.skipped = "the study has no reference answers (its default " \
                               "configuration did not answer)"
                return
            self.probe_set = reference
            self.verdict = check_answers(client, model, config, reference, tol,
                                         alone=not self.fresh, times=self.times)
        if self.verdict.error:
            raise ProbesFailed(self.failure(server.log_text()))
        if not self.verdict.passed:
            raise OutputsDiffer(self.message())

    def _reference(self, client: InferClient, model: str, config: ModelConfig,
                   tol: Tolerance) -> ProbeSet | None:
        if not self.baseline:
            return find_reference(self.study, self.client)
        known = self.study.user_attrs.get(REFERENCE_ATTR)
        if known:  # a resumed study: its first default's answers stay the reference
            return load_reference(self.client, str(known))
        reference = answers_of(self.spec, client, model, config, self.times)
        store_reference(self.study, self.client, self.parent_run_id, reference, tol)
        self.fresh = True
        return reference

    def message(self) -> str:
        assert self.verdict is not None
        return (f"outputs differ from the default configuration's (knobs unlike the "
                f"default's: {self._knobs()}): {self.verdict.detail}")

    def _knobs(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.changed.items()) or "none"

    def failure(self, log: str) -> str:
        assert self.verdict is not None
        return probes_failed(self.spec, self.verdict.error, log,
                             f" (knobs unlike the default's: {self._knobs()})")

    def metrics(self) -> dict[str, float]:
        """``check/passed``, ``check/max_abs_diff``, ``check/seconds`` and
        ``check/warmup_s`` (none when not checked)."""
        if self.verdict is None:
            return {}
        return {PASSED: float(self.verdict.passed), MAX_DIFF: self.verdict.max_abs_diff,
                SECONDS: round(self.seconds, 4), WARMUP: round(self.warmup_s, 4)}

    def run_tags(self) -> dict[str, object]:
        return {tags.CHECK: f"not checked: {self.skipped}"} if self.skipped else {}


def answers_of(spec: StudySpec, client: InferClient, model: str, config: ModelConfig,
               times: list[float] | None = None) -> ProbeSet:
    """The probes made for ``config`` and the served ``model``'s answers, one at a time
    (each one's seconds appended to ``times``): the reference when it is the default."""
    try:
        inputs = make_probes(spec, config)
    except MeasurementError as err:
        raise MeasurementError(f"cannot make the output check's probes: {err}") from err
    made = ProbeSet(inputs, output_names(spec, config), sequence=sequence_kind(config),
                    stream=is_decoupled(config))
    # a sequence set that is also sent together (a model that batches) needs the default's
    # answer at each position of that phase, each under its own correlation ID
    every = bool(made.sequence) and config.max_batch_size > 0
    return dataclasses.replace(made, answers=made.ask(client, model, times=times,
                                                      every_position=every))


def warm_up(spec: StudySpec, model: str, asked: ProbeSet, times: list[float],
            ) -> tuple[int, float]:
    """How many requests of the probes ``asked`` one at a time (each took ``times[i]``), in
    order, stand in for the first level's warm-up of ``model`` (probes of one item as the
    load's requests are; the load keeps one of its own), and the seconds they took."""
    load = spec.load.for_model(model)
    budget = load.warmup_requests - 1 if load.batch_size == 1 else 0
    done, seconds = 0, 0.0
    for i, took in enumerate(times):
        if done + asked.requests(i) > budget:
            break
        done, seconds = done + asked.requests(i), seconds + took
    return done, seconds


def check_answers(client: InferClient, model: str, config: ModelConfig,
                  reference: ProbeSet, tol: Tolerance, *, alone: bool = True,
                  times: list[float] | None = None) -> Comparison:
    """The probes one at a time (unless not ``alone``: the default configuration, whose
    answers one at a time are the reference; each one's seconds appended to ``times``), then
    (a model that batches) all at once; the first verdict that fails, else the one with the
    larger difference. The default's own sequences are not sent together: its reference
    used every position's correlation ID on this load of the model, and a model that keeps
    each sequence's state for its lifetime refuses a start for an ID it holds."""
    one = probes.compare(reference, reference.ask(client, model, times=times) if alone
                         else reference.answers, tol, "sent one at a time")
    if not one.passed or config.max_batch_size < 1 or (reference.sequence and not alone):
        return one
    sent = "sequences" if reference.sequence else "requests"
    many = probes.compare(reference, reference.ask(client, model, together=True),
                          tol, f"{len(reference.inputs) * probes.COPIES} {sent} sent together",
                          start=reference.together_from())
    return many if not many.passed or many.max_abs_diff > one.max_abs_diff else one


def changed_knobs(study: optuna.Study, params: Mapping[str, Any]) -> dict[str, object]:
    """The trial's knobs whose value differs from the default configuration's trial."""
    for t in study.get_trials(deepcopy=False):
        record = TrialRecord.of(t)
        if record.baseline:
            default = shown_params(dict(t.params), record.exact_params)
            return {k: v for k, v in params.items() if default.get(k) != v}
    return dict(params)
