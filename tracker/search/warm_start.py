"""A warm start: an earlier study's best configurations, measured again first (docs/retune.md).

The earlier study's trials (read from MLflow by :mod:`tracker.tracking.earlier`) become a
queue of remembered configurations (:func:`plan`): its feasible trials, the confirmation's
chosen and tied ones first, then by the first objective; never its default (this study
measures its own default first anyway). Each is mapped onto this study's space
(:func:`map_params`): a knob the new space lacks is dropped, a knob the earlier study did not
search takes the default configuration's value, and a configuration with a value outside the
new space is skipped.

The queue is measured one configuration at a time, after the default (:func:`enqueue_next`):
the next remembered configuration is queued only while the last one, measured here, is
feasible and within :data:`KEEP_WITHIN` of this study's best so far. A memory that does not
hold on this model (another model's landscape) so costs one trial, not the whole queue. Each
remembered trial's sweep starts at the level the earlier study judged it by
(:attr:`Remembered.level`, ``warm_level``), where the guided sweep would otherwise start at
this study's best trial's level. The sampler learns from what this study measures, the
remembered configurations included; the earlier figures are never told to Optuna nor reported:
benchmarks/search_efficiency.py measured this design (docs/retune.md).

Refusals (:func:`refusal`): an earlier study of another model, backend or inputs, or one that
optimised other objectives, unless ``force``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.trial import TrialState
from tritonclient.grpc.model_config_pb2 import DataType

from tracker.search.optuna_study import baseline_trial, best_trials, same_params
from tracker.trial_record import Attr, TrialRecord
from tracker.triton.configuration import Configuration
from tracker.triton.formats.base import backend_of

#: remembered configurations queued at most (the benchmark's figures: docs/retune.md)
MAX_REMEMBERED = 3
#: the next remembered configuration is queued while the last one is within this share of
#: this study's best (and feasible)
KEEP_WITHIN = 0.9
_SKIP = object()


class EarlierTrialLike(Protocol):
    """What :func:`plan` reads of an earlier trial (tracking.earlier.EarlierTrial)."""

    @property
    def number(self) -> int: ...
    @property
    def run_id(self) -> str: ...
    @property
    def params(self) -> dict[str, str]: ...
    @property
    def metrics(self) -> dict[str, float]: ...
    @property
    def feasible(self) -> bool: ...
    @property
    def baseline(self) -> bool: ...
    @property
    def concurrency(self) -> int | None: ...
    @property
    def confirm_role(self) -> str | None: ...
    @property
    def confirm_rank(self) -> int | None: ...


@dataclass(frozen=True)
class Remembered:
    """A configuration from the earlier study, in this study's space."""

    key: str                      # "<earlier run id>/trial-<n>": the earlier trial's run
    params: dict[str, Any]
    level: int | None             # the concurrency the earlier trial was judged by
    number: int                   # the earlier trial's number


@dataclass(frozen=True)
class WarmPlan:
    """What a warm start reuses: the remembered configurations in order, and what changed."""

    source_run: str
    source: str                   # the earlier study in words
    queue: list[Remembered]
    dropped: list[str] = field(default_factory=list)   # knobs the new space lacks
    added: list[str] = field(default_factory=list)     # knobs at their default values
    skipped: int = 0              # configurations with a value outside the new space
    hardware: list[str] = field(default_factory=list)  # what ran differently
    refused: str | None = None    # forced past this refusal

    def words(self) -> str:
        """One paragraph: what is reused, and what is not."""
        if not self.queue:
            head = f"warm start from {self.source}: no configuration of it fits this space"
        else:
            shown = ", ".join(f"trial-{r.number}" for r in self.queue)
            head = (f"warm start from {self.source}: its best configurations ({shown}) are "
                    f"measured after the default, each while the one before holds up here "
                    f"(feasible, within {1 - KEEP_WITHIN:.0%} of this study's best); the "
                    "earlier figures are not reused")
        parts = [head]
        if self.dropped:
            parts.append(f"knobs not in this space dropped: {', '.join(self.dropped)}")
        if self.added:
            parts.append(f"new knobs at their defaults: {', '.join(self.added)}")
        if self.skipped:
            parts.append(f"{self.skipped} configuration(s) with values outside this space "
                         "skipped")
        if self.refused:
            parts.append(f"forced past: {self.refused}")
        if self.hardware:
            parts.append("the earlier study ran on other hardware: " + "; ".join(self.hardware))
        return "; ".join(parts)


# ---- the earlier trials in this space --------------------------------------------------------

def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def parse_value(text: str, dist: BaseDistribution) -> Any:
    """The value of ``dist`` that an MLflow param ``text`` holds (:data:`_SKIP` when none)."""
    if isinstance(dist, CategoricalDistribution):
        for choice in dist.choices:
            if str(choice) == text or (str(choice).lower() == text.lower()
                                       and isinstance(choice, bool)):
                return choice
            if (isinstance(choice, int | float) and not isinstance(choice, bool)
                    and _number(text) == choice):
                return choice
        return _SKIP
    value = _number(text)
    if value is None:
        return _SKIP
    if isinstance(dist, IntDistribution):
        if value != int(value) or not dist._contains(int(value)):
            return _SKIP
        return int(value)
    if isinstance(dist, FloatDistribution) and dist._contains(value):
        return value
    return _SKIP


def map_params(params: Mapping[str, str], dists: Mapping[str, BaseDistribution],
               defaults: Mapping[str, Any]) -> dict[str, Any] | None:
    """An earlier trial's params (strings, as MLflow keeps them) in this study's space: knobs
    the space lacks dropped, knobs the earlier study did not search at ``defaults`` (the
    default configuration's params); None when a value is outside the space."""
    out: dict[str, Any] = {}
    for key, dist in dists.items():
        if key not in params:
            out[key] = defaults[key]
            continue
        value = parse_value(params[key], dist)
        if value is _SKIP:
            return None
        out[key] = value
    return out


def ranked(trials: Sequence[EarlierTrialLike], metric: str, direction: str,
           ) -> list[EarlierTrialLike]:
    """The earlier study's feasible trials, best first: the confirmation's chosen, winner and
    tied configurations (by their confirmation rank), then the rest by ``metric``; never its
    default configuration."""
    roles = {"chosen": 0, "winner": 0, "tied": 1}
    sign = -1.0 if direction == "maximize" else 1.0

    def key(t: EarlierTrialLike) -> tuple[int, int, float, int]:
        value = t.metrics.get(metric)
        role = roles.get(t.confirm_role or "", 2)
        return (role, (t.confirm_rank or 0) if role < 2 else 0,
                sign * value if value is not None else math.inf, t.number)

    return sorted((t for t in trials if t.feasible and not t.baseline), key=key)


@dataclass(frozen=True)
class PlanInputs:
    """What :func:`plan` maps the earlier study onto."""

    dists: Mapping[str, BaseDistribution]
    defaults: Mapping[str, Any]          # the default configuration's params
    objectives: Mapping[str, str]
    limit: int = MAX_REMEMBERED


def plan(source_run: str, source: str, trials: Sequence[EarlierTrialLike],
         inputs: PlanInputs) -> WarmPlan:
    """The remembered configurations of an earlier study's ``trials`` in this space."""
    metric, direction = next(iter(inputs.objectives.items()))
    earlier_knobs = {k for t in trials for k in t.params}
    queue: list[Remembered] = []
    skipped = 0
    for t in ranked(trials, metric, direction):
        params = map_params(t.params, inputs.dists, inputs.defaults)
        if params is None:
            skipped += 1
            continue
        if same_params(params, inputs.defaults) or any(same_params(params, r.params)
                                                       for r in queue):
            continue
        if len(queue) < inputs.limit:
            queue.append(Remembered(f"{t.run_id}/trial-{t.number}", params, t.concurrency,
                                    t.number))
    return WarmPlan(source_run, source, queue,
                    dropped=sorted(earlier_knobs - set(inputs.dists)),
                    added=sorted(set(inputs.dists) - earlier_knobs) if earlier_knobs else [],
                    skipped=skipped)


# ---- what the study is, and whether an earlier one may lend it its memory --------------------

def signature(conf: Configuration) -> dict[str, object]:
    """What a later warm start compares: the models, the entry model's backend and inputs."""
    cfg = conf.entry_info.config
    return {"models": list(conf.names), "backend": backend_of(cfg),
            "inputs": [f"{i.name} {DataType.Name(i.data_type).removeprefix('TYPE_')} "
                       f"{list(i.dims)}" for i in cfg.input]}


def refusal(earlier: Mapping[str, Any], current: Mapping[str, Any]) -> str | None:
    """Why an earlier study must not lend its memory (None: it may). ``earlier`` and
    ``current``: ``model``, ``objectives`` and ``signature`` (None when not recorded)."""
    if earlier["model"] != current["model"]:
        return (f"it tuned model {earlier['model']!r}, not {current['model']!r}")
    if list(earlier["objectives"]) and list(earlier["objectives"]) != list(
            current["objectives"]):
        return (f"it optimised {list(earlier['objectives'])}, not "
                f"{list(current['objectives'])}")
    old, new = earlier.get("signature"), current["signature"]
    if not old:
        return None
    if old.get("backend") != new.get("backend"):
        return f"its model ran on the {old.get('backend')} backend, not {new.get('backend')}"
    if old.get("models") != new.get("models"):
        return f"it served models {old.get('models')}, not {new.get('models')}"
    if old.get("inputs") != new.get("inputs"):
        return (f"its inputs were {'; '.join(old.get('inputs') or [])}, not "
                f"{'; '.join(new.get('inputs') or [])}")
    return None


def hardware_differences(earlier: Mapping[str, str], current: Mapping[str, str],
                         names: Mapping[str, str]) -> list[str]:
    """``what earlier (now current)`` for each machine fact both record and that differs;
    ``names``: tag -> its words."""
    return [f"{what} {earlier[tag]} (now {current[tag]})" for tag, what in names.items()
            if earlier.get(tag) and current.get(tag) and earlier[tag] != current[tag]]


# ---- the queue in the Optuna study -------------------------------------------------------

def _remembered_trials(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    return [t for t in study.get_trials(deepcopy=False) if Attr.WARM_START in t.user_attrs]


def _holds(study: optuna.Study, trial: optuna.trial.FrozenTrial, direction: str) -> bool:
    """The remembered ``trial``, measured here, is feasible and within :data:`KEEP_WITHIN` of
    this study's best feasible value (the memory still holds on this model)."""
    record = TrialRecord.of(trial)
    if trial.state != TrialState.COMPLETE or not record.feasible or not trial.values:
        return False
    front = [float(t.values[0]) for t in best_trials(study) if t.values]  # two objectives:
    if not front:                                                           # the first's best
        return False
    mine = float(trial.values[0])
    top = max(front) if direction == "maximize" else min(front)
    if direction == "maximize":
        return mine >= KEEP_WITHIN * top
    return mine * KEEP_WITHIN <= top  # minimised (latency, cost): at most 1/KEEP_WITHIN of it


def enqueue_next(study: optuna.Study, warm: WarmPlan, direction: str) -> Remembered | None:
    """Queue the next remembered configuration (the first one once the default is queued):
    none while one waits or runs, and none once the last one measured here did not hold up.
    Returns what was queued. Call it under the storage lock with several workers."""
    if baseline_trial(study) is None:
        return None
    done = _remembered_trials(study)
    if any(t.state in (TrialState.WAITING, TrialState.RUNNING) for t in done):
        return None
    if done and not _holds(study, done[-1], direction):
        return None
    seen = {str(t.user_attrs[Attr.WARM_START]) for t in done}
    following = next((r for r in warm.queue if r.key not in seen), None)
    if following is None:
        return None
    attrs: dict[str, Any] = {Attr.WARM_START: following.key}
    if following.level is not None:
        attrs[Attr.WARM_LEVEL] = following.level
    study.enqueue_trial(dict(following.params), user_attrs=attrs)
    return following
