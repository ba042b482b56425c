"""The search space: the spec's ``search.space`` (or a default one derived from the model) as
value grids and Optuna distributions.

A space maps a knob (a config.pbtxt field path, or ``concurrency``) to a list of choices or to a
numeric :class:`~tracker.spec.Range`. The knob names are the Optuna parameter names and the
MLflow params, unchanged.

Enumeration rules (``grid``, ``space_size``):
- a list: its values, in order;
- an integer range: ``low, low+step, ..., high`` (step 1 by default); with ``log: true`` it is
  ``low, 2*low, 4*low, ...`` up to ``high`` (powers of two when ``low`` is one);
- a float range with ``step``: ``low, low+step, ..., high``; without a step it is continuous
  and has no grid (``space_size`` is None).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

from tracker.errors import ConfigError, SpecError
from tracker.search.knob_rules import priority_problems, warmup_problems
from tracker.spec import Range, Scalar, Space
from tracker.spec.limits import range_count
from tracker.spec.server_options import server_knob
from tracker.triton import sequence
from tracker.triton.configuration import Configuration
from tracker.triton.formats import format_of, json_knobs
from tracker.triton.formats.ensemble import KNOB_PREFIX as ENSEMBLE_KNOBS
from tracker.triton.formats.knobs import Knob, refused

if TYPE_CHECKING:
    from tracker.triton.model_config import ModelInfo

# The default space (docs/spec.md, "The default search space"). For a batching model: the
# largest batch the scheduler may form (powers of two, as Model Analyzer sweeps them), how long
# the dynamic batcher may wait to fill one (0 = never wait, up to 1 ms), and 1-3 model
# instances. For a model with a fixed batch dimension only the instance count applies: up to 4
# instances share the cores or the GPU.
DEFAULT_MAX_BATCH_SIZES: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
DEFAULT_QUEUE_DELAYS_US: tuple[int, ...] = (0, 100, 500, 1000)
DEFAULT_INSTANCE_COUNTS: tuple[int, ...] = (1, 2, 3)
DEFAULT_INSTANCE_COUNTS_UNBATCHED: tuple[int, ...] = (1, 2, 3, 4)

# Knobs that only mean something when the model batches (max_batch_size > 0).
BATCHING_PREFIXES: tuple[str, ...] = ("dynamic_batching.", "sequence_batching.")


def default_space(info: ModelInfo) -> Space:
    """The space searched when the spec gives none (see the module constants). A stateful
    model keeps its sequence batcher: its own knobs replace the dynamic batcher's
    (tracker/triton/sequence.py). A model Triton completed keeps its own max_batch_size
    (tracker/triton/autocomplete.py)."""
    if info.completed:
        own = default_space(dataclasses.replace(info, completed=False))
        return {k: v for k, v in own.items() if k != "max_batch_size"}
    if sequence.is_sequence(info.config):
        counts = DEFAULT_INSTANCE_COUNTS if info.supports_batching else \
            DEFAULT_INSTANCE_COUNTS_UNBATCHED
        out: Space = {"max_batch_size": list(DEFAULT_MAX_BATCH_SIZES)} \
            if info.supports_batching else {}
        out.update(sequence.default_knobs(info.config, info.supports_batching))
        out["instance_group.count"] = list(counts)
        return out
    if info.supports_batching:
        return {
            "max_batch_size": list(DEFAULT_MAX_BATCH_SIZES),
            "dynamic_batching.max_queue_delay_microseconds": list(DEFAULT_QUEUE_DELAYS_US),
            "instance_group.count": list(DEFAULT_INSTANCE_COUNTS),
        }
    return {"instance_group.count": list(DEFAULT_INSTANCE_COUNTS_UNBATCHED)}


def tuned_models(conf: Configuration) -> list[str]:
    """The models of a configuration the default space tunes: all but the ensembles (Triton
    schedules those; they have no instances and no batcher)."""
    return [n for n in conf.names if conf.info(n).format != "ensemble"]


def _ensemble_floor(conf: Configuration, name: str) -> int:
    """The largest max_batch_size of an ensemble calling ``name`` (a step's may not be
    smaller)."""
    return max((conf.info(e).config.max_batch_size for e, steps in conf.steps.items()
                if name in steps), default=0)


def default_space_of(conf: Configuration) -> Space:
    """The default space of a model, or of every tuned model of a configuration with its
    keys as ``<model>/<field path>`` (a step's max_batch_size choices at least its
    ensemble's)."""
    out: Space = {}
    for name in tuned_models(conf):
        floor = _ensemble_floor(conf, name)
        for key, knob in default_space(conf.info(name)).items():
            if key == "max_batch_size" and isinstance(knob, list):
                knob = [v for v in knob if isinstance(v, int) and v >= floor] or [floor]
            out[conf.key(name, key)] = knob
    return out


def resolve_space(space: Space, conf: Configuration) -> Space:
    """The spec's space, or the default one for this model (or configuration) when the
    spec's is empty."""
    return dict(space) if space else default_space_of(conf)


def doublings(low: int, high: int) -> list[int]:
    """The values an integer log range takes in a grid: ``low``, ``2*low``, ... up to ``high``."""
    out = []
    level = max(low, 1)
    while level <= high:
        out.append(level)
        level *= 2
    return out


def values(knob: Range | list[Scalar]) -> list[Scalar] | None:
    """Every value one knob takes, or None for a continuous float range."""
    if isinstance(knob, list):
        return list(knob)
    if knob.is_int:
        low, high = int(knob.low), int(knob.high)
        if knob.log:
            return list(doublings(low, high))
        return list(range(low, high + 1, int(knob.step or 1)))
    if knob.step is None:
        return None
    count = round((knob.high - knob.low) / knob.step)
    return [round(knob.low + i * knob.step, 12) for i in range(count + 1)]


def value_count(knob: Range | list[Scalar]) -> int | None:
    """How many values one knob takes (counted, not listed), or None for a continuous
    float range."""
    if isinstance(knob, list):
        return len(knob)
    return range_count(knob.low, knob.high, knob.step, knob.log, knob.is_int)


def space_size(space: Mapping[str, Range | list[Scalar]]) -> int | None:
    """How many configurations the space holds (1 for an empty one); None when a knob is a
    continuous range."""
    sizes = []
    for knob in space.values():
        found = value_count(knob)
        if found is None:
            return None
        sizes.append(found)
    return math.prod(sizes)


def grid(space: Mapping[str, Range | list[Scalar]]) -> dict[str, list[Scalar]]:
    """Every value of every knob (Optuna's GridSampler search space). SpecError naming the
    knob when one is a continuous range."""
    out: dict[str, list[Scalar]] = {}
    for key, knob in space.items():
        found = values(knob)
        if found is None:
            raise SpecError([f"search.space.{key}: a continuous range has no grid; give it a "
                             "`step` or list its values"])
        out[key] = found
    return out


def distribution(knob: Range | list[Scalar]) -> BaseDistribution:
    """One knob as an Optuna distribution: a list is categorical, a range int or float."""
    if isinstance(knob, list):
        return CategoricalDistribution(tuple(knob))
    if knob.is_int:
        return IntDistribution(int(knob.low), int(knob.high), log=knob.log,
                               step=int(knob.step or 1))
    return FloatDistribution(float(knob.low), float(knob.high), log=knob.log,
                             step=None if knob.step is None else float(knob.step))


def distributions(space: Mapping[str, Range | list[Scalar]]) -> dict[str, BaseDistribution]:
    """The space as Optuna distributions, keyed by knob (the Optuna parameter names)."""
    return {key: distribution(knob) for key, knob in space.items()}


def model_knobs(info: ModelInfo) -> tuple[str, tuple[Knob, ...]]:
    """(the backend the model's production config names, the knobs that backend reads)."""
    fmt = format_of(info)
    return fmt.backend(info, None), fmt.knobs(info)


def refused_knobs(space: Mapping[str, object], info: ModelInfo) -> list[tuple[str, str]]:
    """(knob, why) for each ``parameters.*``/``optimization.*`` knob the model's backend does
    not read (tracker/triton/formats/knobs.py)."""
    backend, catalog = model_knobs(info)
    return refused(space, backend, catalog)


def _check_model(space: Mapping[str, Range | list[Scalar]], info: ModelInfo,
                 batch_size: int) -> None:
    """SpecError for knobs this model cannot take: batching knobs when its batch dimension
    is fixed, a ``load.batch_size`` larger than every ``max_batch_size`` choice, and
    ``FILE:KEY`` knobs whose file or key the model directory does not have."""
    problems: list[str] = [f"search.space.{key}: {message}"
                           for key, message in refused_knobs(space, info)]
    problems.extend(f"search.space.{key}: {message}"
                    for key, message in json_knobs.problems(info, space))
    problems.extend([*priority_problems(space, info.config),
                     *warmup_problems(space, info.config)])
    problems.extend(f"search.space.{key}: {why}" for key in space
                    if (why := sequence.scheduler_problem(info.config, key)) is not None)
    if not info.supports_batching:
        for key, knob in space.items():
            if key.startswith(BATCHING_PREFIXES):
                problems.append(f"search.space.{key}: the model has a fixed batch dimension "
                                "(max_batch_size 0), so it cannot batch; remove this knob")
            elif key == "max_batch_size" and any(v != 0 for v in values(knob) or [1]):
                problems.append(f"search.space.max_batch_size: the model has a fixed batch "
                                f"dimension, so max_batch_size must stay 0, but got {knob}")
        if batch_size > 1:
            problems.append(f"load.batch_size: the model cannot batch, so it must be 1, but got "
                            f"{batch_size}")
    elif batch_size > 1:
        sizes = values(space["max_batch_size"]) if "max_batch_size" in space else None
        largest = max((v for v in sizes or [] if isinstance(v, int | float)), default=None)
        if largest is None and "max_batch_size" not in space:
            largest = info.config.max_batch_size
        if largest is not None and batch_size > largest:
            problems.append(f"load.batch_size: must be <= max_batch_size ({largest:g}), but "
                            f"got {batch_size}")
    if problems:
        raise SpecError(problems)


def check_space(space: Mapping[str, Range | list[Scalar]], conf: Configuration,
                *, batch_size: int = 1) -> None:
    """SpecError for knobs the configuration's models cannot take. Each key is a model's
    field path (``<model>/<field path>``, bare for a one-model configuration) and is checked
    against that model (:func:`_check_model`; an unknown model or field names the valid
    ones); an ensemble takes ``ensemble_scheduling.*`` knobs only; server options are the
    server's, not a model's."""
    from tracker.triton.model_config import LOAD_PARAMS

    space = {k: v for k, v in space.items() if not server_knob(k)}
    problems: list[str] = []
    per_model: dict[str, dict[str, Range | list[Scalar]]] = {n: {} for n in conf.names}
    for key, knob in space.items():
        if key in LOAD_PARAMS:
            continue
        try:  # a single model's knobs are bare (or prefixed with its name)
            model, path = conf.split_key(key)
        except ConfigError:
            problems.append(f"search.space.{key}: this study serves several models "
                            f"({', '.join(conf.names)}); name the model as "
                            f"'<model>/{key}', e.g. '{tuned_models(conf)[0]}/{key}'"
                            if "/" not in key else
                            f"search.space.{key}: no model {key.partition('/')[0]!r} in the "
                            f"configuration (its models: {', '.join(conf.names)})")
            continue
        if conf.info(model).format == "ensemble" and not path.startswith(ENSEMBLE_KNOBS):
            own = [k.path for k in format_of(conf.info(model)).knobs(conf.info(model))]
            problems.append(f"search.space.{key}: {model!r} is an ensemble (Triton schedules "
                            f"it: no instances, no batcher); its knobs are {own}; tune its "
                            "steps instead")
        else:
            per_model[model][path] = knob
    for name, sub in per_model.items():
        if not sub and batch_size == 1:
            continue
        try:
            _check_model(sub, conf.info(name), batch_size if name in conf.entries else 1)
        except SpecError as err:
            prefix = conf.knob_prefix(name)  # empty for a single model: its messages as they are
            problems.extend(m.replace("search.space.", f"search.space.{prefix}", 1)
                            if m.startswith("search.space.")
                            else f"{m} (model {name!r})" if prefix else m
                            for m in err.messages)
    if problems:
        raise SpecError(problems)
