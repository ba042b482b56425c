"""``search.warm_start`` for a study: which earlier study it starts from, and its records.

:func:`resolve` reads the earlier study from MLflow (:mod:`tracker.tracking.earlier`) and
turns it into the queue of remembered configurations (:mod:`tracker.search.warm_start`); an
earlier study of another model, backend or inputs is refused with the reason unless
``force`` (``auto`` then starts cold and says why). :func:`record` writes what every study
records for a later warm start (its model's signature, its launch mode) and, when warm, the
study it started from, then queues the first remembered configuration after the default;
:func:`follow` queues the next after each trial. ``tracker check`` prints :func:`check_text`.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracker import tags
from tracker.errors import StudyError
from tracker.invocation.session import Session, expand_env, tracking_uri
from tracker.measure.host import gpu_tags, host_tags
from tracker.redact import redact_url
from tracker.search import warm_start
from tracker.search.baseline import Baseline, fit_baseline
from tracker.search.optuna_study import default_storage
from tracker.search.space import distributions, resolve_space
from tracker.search.storage import storage_lock
from tracker.search.warm_start import PlanInputs, Remembered, WarmPlan
from tracker.spec.search_section import WARM_AUTO
from tracker.spec.server_options import server_knobs
from tracker.tracking import patience, runs
from tracker.tracking.earlier import Current, find_study
from tracker.tracking.report import origin_section
from tracker.trial_record import Attr

if TYPE_CHECKING:
    import optuna
    from mlflow import MlflowClient
    from optuna.distributions import BaseDistribution

    from tracker.spec import StudySpec
    from tracker.triton.configuration import Configuration
    from tracker.triton.server.base import TritonServer

#: the machine facts a warm start compares, in words
MACHINE_WORDS = {tags.HOST_CPU: "CPU", tags.HOST_CPU_CORES: "cores", "gpus": "GPUs",
                 tags.TRITON_VERSION: "Triton",
                 tags.VERSION + "nvidia_pytriton": "nvidia-pytriton",
                 tags.LAUNCH_MODE: "launch mode"}


@dataclasses.dataclass(frozen=True)
class Resolved:
    """The plan (None: the study starts cold) and, for ``auto``, why it starts cold."""

    plan: WarmPlan | None
    cold: str = ""


def _gpus(machine: Mapping[str, str], devices: Mapping[str, str]) -> str:
    """The GPUs as name and memory ("NVIDIA H100 80GB HBM3, 81559 MB"), "none" without one."""
    if devices:
        return "; ".join(sorted(", ".join(v.split(", ")[:2]) for v in devices.values()))
    return machine.get(tags.GPU_NAMES, "")


def machine_of(spec: StudySpec, gpu: Mapping[str, str]) -> dict[str, str]:
    """This study's machine facts (``gpu``: tracker.measure.host.gpu_tags of its server)."""
    host = host_tags()
    found = {k: host[k] for k in MACHINE_WORDS if k in host}
    found[tags.LAUNCH_MODE] = spec.server.mode
    found["gpus"] = _gpus(gpu, {k: v for k, v in gpu.items() if k.startswith(tags.GPU_DEVICE)})
    return found


def _current(spec: StudySpec, conf: Configuration) -> dict[str, Any]:
    return {"model": spec.model.label, "objectives": dict(spec.objectives),
            "signature": warm_start.signature(conf)}


def resolve(spec: StudySpec, conf: Configuration, client: MlflowClient,
            space: tuple[dict[str, BaseDistribution], Mapping[str, Any]], storage_url: str,
            gpu: Mapping[str, str]) -> Resolved:
    """The warm start ``spec`` asks for: ``space`` is the study's distributions and the
    default configuration's params. StudyError when a named study must be refused."""
    wanted = spec.search.warm_start
    if wanted is None:
        return Resolved(None)
    dists, defaults = space
    current = Current(spec.model.label, frozenset(dists), spec.study_name,
                      redact_url(storage_url))
    earlier = find_study(client, wanted.source, current)
    if earlier is None:
        return Resolved(None, f"warm start: no finished study of model {spec.model.label!r} "
                              f"with the knobs {', '.join(sorted(dists))} in this tracking "
                              "server; the study starts cold")
    why = warm_start.refusal({"model": earlier.model, "objectives": earlier.objectives,
                              "signature": earlier.signature}, _current(spec, conf))
    if why and not wanted.force:
        if wanted.source == WARM_AUTO:
            return Resolved(None, f"warm start: not from {earlier.label}: {why}; the study "
                                  "starts cold")
        raise StudyError(f"search.warm_start: {earlier.label} cannot be started from: {why} "
                         f"(`warm_start: {{from: {wanted.source}, force: true}}` starts from "
                         "it anyway)")
    found = warm_start.plan(earlier.run_id, earlier.label, earlier.trials,
                            PlanInputs(dists, defaults, spec.objectives))
    mine = machine_of(spec, gpu)
    theirs = {**earlier.machine, "gpus": _gpus(earlier.machine, earlier.gpu_devices)}
    return Resolved(dataclasses.replace(
        found, refused=why,
        hardware=warm_start.hardware_differences(theirs, mine, MACHINE_WORDS)))


def check_text(resolved: Resolved) -> str:
    """What the warm start reuses, in words ("" when the spec asks for none)."""
    if resolved.plan is not None:
        return resolved.plan.words()
    return resolved.cold


def space_of(spec: StudySpec, conf: Configuration,
             ) -> tuple[dict[str, BaseDistribution], Baseline]:
    """The study's distributions, widened to hold the default configuration, and the
    default's parameters (what ``tracker tune`` searches)."""
    space = resolve_space(spec.search.space, conf)
    return fit_baseline(distributions(space), conf,
                        {**conf.file_knob_defaults(space),
                         **{k: spec.server.options.value_of(k)
                            for k in server_knobs(list(space))}})


def for_check(spec: StudySpec, conf: Configuration, server: TritonServer) -> str:
    """What ``tracker check`` says about ``search.warm_start`` ("" when it is not set):
    the earlier study found in the tracking server and what will be reused from it."""
    if spec.search.warm_start is None:
        return ""
    dists, base = space_of(spec, conf)
    uri = tracking_uri(spec)
    storage = expand_env(spec.search.storage or default_storage(uri))
    return check_text(resolve(spec, conf, patience.client(uri), (dists, base.params),
                              storage, gpu_tags(server.gpu_set())))


def record(study: optuna.Study, storage: optuna.storages.RDBStorage,
           parent: runs.StudyRun, conf: Configuration, spec: StudySpec,
           warm: WarmPlan | None) -> Remembered | None:
    """Every study's records for a later warm start (parent-run tags: its model's signature,
    its launch mode) and, when warm, the study it started from and what it reuses; then the
    first remembered configuration queued after the default (once, however many workers)."""
    written: dict[str, object] = {
        tags.MODEL_SIGNATURE: json.dumps(warm_start.signature(conf)),
        tags.LAUNCH_MODE: spec.server.mode}
    if warm is not None:
        written |= {tags.WARM_START_FROM: warm.source_run, tags.WARM_START_NOTE: warm.words()}
    runs.set_tags(parent.client, parent.run_id, written)
    return follow(study, storage, warm, spec)


def begin(study: optuna.Study, storage: optuna.storages.RDBStorage, parent: runs.StudyRun,
          session: Session, resolved: Resolved, say: Callable[[str], None]) -> None:
    """:func:`record`, then the warm start in words (``say``: the progress line)."""
    record(study, storage, parent, session.configuration, session.spec, resolved.plan)
    if check_text(resolved):
        say(check_text(resolved))


def follow(study: optuna.Study, storage: optuna.storages.RDBStorage, warm: WarmPlan | None,
           spec: StudySpec) -> Remembered | None:
    """Queue the next remembered configuration when the last one held up here (under the
    storage lock: workers share the queue); what was queued."""
    if warm is None or not warm.queue:
        return None
    direction = next(iter(spec.objectives.values()))
    with storage_lock(storage, f"tracker-warm-{spec.study_name}"):
        return warm_start.enqueue_next(study, warm, direction)



def measured_words(study: optuna.Study, warm_note: str) -> str:
    """The warm start's note and which remembered configurations this study measured."""
    done = [(t.number, str(t.user_attrs[Attr.WARM_START]).rsplit("/", 1)[-1])
            for t in study.get_trials(deepcopy=False) if Attr.WARM_START in t.user_attrs]
    if not done:
        return warm_note
    return (warm_note + "; measured here: " + ", ".join(f"trial {n} (its {source})"
                                                        for n, source in done))


def with_origin(parent: runs.StudyRun, study: optuna.Study,
                extra: tuple[dict[str, Path], str] | None) -> tuple[dict[str, Path], str] | None:
    """The report's extra sections (conclusion/finish.py) with, for a study that started from
    an earlier one, the section naming and linking it (tracking/report.py) and saying which
    remembered configurations were measured again."""
    found = runs.mlflow_call("read the study run", parent.client.get_run, parent.run_id)
    source = found.data.tags.get(tags.WARM_START_FROM)
    if not source:
        return extra
    try:
        experiment = parent.client.get_run(source).info.experiment_id
    except Exception:  # the earlier run was deleted since: name it, link its run id anyway
        experiment = parent.experiment_id
    section = origin_section(parent.tracking_uri, experiment, source,
                             measured_words(study, found.data.tags.get(tags.WARM_START_NOTE, "")))
    files, before = extra or ({}, "")
    return files, before + section
