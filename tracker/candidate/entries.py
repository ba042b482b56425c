"""A configuration's entry models as a study measures and judges them (one entry, or several
independent entry models on one server: the same code).

``model.name`` lists the entries (docs/pipelines.md, "Several models on one server"). Each is
driven by its own load (``load`` with its ``load.models.<name>`` changes) and all of them at
once, in the same windows (:func:`tracker.measure.sweep.sweep`). The configuration is
judged by one score, ``weighted_gain``: Model Analyzer's ``weighting`` of each model's
throughput against the default configuration's (:func:`tracker.search.objective.weighted_gain`),
at the joint level that meets every constraint (a bare constraint bounds every model,
``<model>/<metric>`` one) and scores best.

The chosen level is logged as the configuration names its metrics (bare for one entry;
``<model>/<metric>`` for each of several: ``a/perf_throughput``, ``a/perf_latency_p99``,
``a/concurrency``) plus any derived objective (``weighted_gain``; the default configuration's
own score is 0 by construction).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from tracker.feasibility import for_models
from tracker.measure.goodput import request_slo
from tracker.measure.sweep import EntryLoad
from tracker.search.objective import Scoring

if TYPE_CHECKING:
    from tracker.spec import StudySpec
    from tracker.triton.configuration import Configuration
    from tracker.triton.model_config import ModelConfig


def constraints_of(spec: StudySpec, conf: Configuration) -> dict[str, object]:
    """The study's constraints as its trials are judged by: each bare bound applied to every
    entry, each named as the configuration names its metrics (bare for one entry,
    ``a/perf_latency_p99``, ``b/...`` for several)."""
    return for_models(spec.constraints, conf.entries, conf.metric_name)


def scoring(spec: StudySpec, conf: Configuration,
            reference: Mapping[str, float] | None) -> Scoring:
    """What a derived objective (``weighted_gain``) is computed with: the entries, their
    metric names, ``model.weights`` and the default configuration's metrics."""
    return Scoring(conf.entries, conf.metric_name, weights_of(spec), reference)


def weights_of(spec: StudySpec) -> dict[str, float]:
    """Each entry model's weight in ``weighted_gain`` (``model.weights``; unset: 1 each)."""
    given = spec.model.weights or {}
    return {name: float(given.get(name, 1.0)) for name in spec.model.names}


def loads_of(spec: StudySpec, conf: Configuration, served: Mapping[str, ModelConfig],
             levels: Sequence[float] | None = None,
             model_levels: Mapping[str, Sequence[float]] | None = None,
             warmed: Mapping[str, int] | None = None) -> dict[str, EntryLoad]:
    """Each entry's part of the sweep: its served config, its own load (its levels:
    ``model_levels``, else ``levels``, else its load's), its composing models (their split
    lands in its Measurement's ``steps``), the requests that warmed it already (``warmed``:
    the output check's), its per-request latency bounds (its goodput's SLA)."""
    bounds = for_models(spec.constraints, conf.entries)
    return {name: EntryLoad(served[name], spec.load.for_model(name),
                            (model_levels or {}).get(name, levels), conf.composing(name),
                            (warmed or {}).get(name, 0),
                            request_slo({k.split("/", 1)[1]: v for k, v in bounds.items()
                                         if k.startswith(f"{name}/")}))
            for name in conf.entries}
