"""Several independent entry models on one server: one configuration measured as a whole.

``model.name`` lists the entries (docs/pipelines.md, "Several models on one server"). Each is
driven by its own load (``load`` with its ``load.models.<name>`` changes) and all of them at
once, in the same windows (:func:`tracker.measure.sweep.sweep`). The configuration is
judged by one score, ``weighted_gain``: Model Analyzer's ``weighting`` of each model's
throughput against the default configuration's (:func:`tracker.search.objective.weighted_gain`),
at the joint level that meets every constraint (a bare constraint bounds every model,
``<model>/<metric>`` one) and scores best.

The chosen level is logged as ``<model>/<metric>`` for every model (``a/perf_throughput``,
``a/perf_latency_p99``, ``a/concurrency``) plus ``weighted_gain``; the default configuration's
own score is 0 by construction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from tracker.errors import MeasurementError
from tracker.feasibility import for_models
from tracker.measure.sweep import EntryLoad
from tracker.measure.types import SweepLevel, SweepResult
from tracker.metrics import WEIGHTED_GAIN, model_metric
from tracker.search.objective import LevelChoice, pick_best_joint_level, weighted_gain

if TYPE_CHECKING:
    from tracker.spec import StudySpec
    from tracker.triton.configuration import Configuration
    from tracker.triton.model_config import ModelConfig


def is_joint(spec: StudySpec) -> bool:
    """Whether the study serves several independent entry models."""
    return len(spec.model.names) > 1


def constraints_of(spec: StudySpec) -> dict[str, object]:
    """The study's constraints as its trials are judged by: for several entry models each
    bare bound applied to every model (``a/perf_latency_p99``, ``b/...``)."""
    if not is_joint(spec):
        return dict(spec.constraints)
    return for_models(spec.constraints, spec.model.names)


def weights_of(spec: StudySpec) -> dict[str, float]:
    """Each entry model's weight in ``weighted_gain`` (``model.weights``; unset: 1 each)."""
    given = spec.model.weights or {}
    return {name: float(given.get(name, 1.0)) for name in spec.model.names}


def loads_of(spec: StudySpec, conf: Configuration, served: Mapping[str, ModelConfig],
             levels: Sequence[float] | None = None,
             model_levels: Mapping[str, Sequence[float]] | None = None,
             ) -> dict[str, EntryLoad]:
    """Each entry's part of the sweep: its served config, its own load (its levels:
    ``model_levels``, else ``levels``, else its load's), its composing models (their split
    lands in its Measurement's ``steps``)."""
    return {name: EntryLoad(served[name], spec.load.for_model(name),
                            (model_levels or {}).get(name, levels), conf.composing(name))
            for name in conf.entries}


def choose(spec: StudySpec, levels: Sequence[SweepLevel],
           reference: Mapping[str, float] | None) -> LevelChoice:
    """The joint level the configuration is judged by, as a :class:`LevelChoice` whose
    metrics are ``<model>/<metric>`` (``<model>/concurrency`` included) and
    ``weighted_gain``, and whose one objective value is that score."""
    weights = weights_of(spec)
    if reference is not None:
        missing = [model_metric(n, "perf_throughput") for n in weights
                   if model_metric(n, "perf_throughput") not in reference]
        if missing:
            raise MeasurementError(
                "weighted_gain compares each model with the default configuration, but the "
                f"default configuration's trial has no {', '.join(missing)}: measure it "
                "first (it is trial 0 of a new study)")
    got = pick_best_joint_level(levels, constraints_of(spec), weights, reference=reference)
    score = got.score if reference is not None else weighted_gain(got.metrics, got.metrics,
                                                                   weights)
    level = levels[got.index]
    metrics = {**got.metrics, WEIGHTED_GAIN: score,
               **{model_metric(n, "concurrency"): float(m.concurrency or 0)
                  for n, m in level.measurements.items()}}
    first = next(iter(level.measurements.values()))
    return LevelChoice(got.index, int(first.concurrency or 0), metrics, [score],
                       dict(got.violations), stable=got.stable)


def perf_files(joint: SweepResult) -> dict[str, str]:
    """``perf/<model>.csv``: each model's levels in perf_analyzer's CSV."""
    from tracker.measure import csvio

    return {f"perf/{name}.csv": csvio.dumps(joint.of(name)) for name in joint.names}
