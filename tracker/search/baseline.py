"""Trial 0: the default configuration, expressed in the search space.

Every study measures the model's default config (or the user's own config.pbtxt) first, so
that each result can say how much better it is than what one gets without tuning. The
baseline's parameters are read from that config at the search-space keys. When a value is not
in the space (the default ``max_batch_size: 4`` against ``[1, 8, 32]``), the space is widened
to hold it: the default config *is* measured, so it belongs to the space the study reports
on. A value the space cannot express at all (a section the default config does not have) is
kept in ``exact`` and the baseline is measured as the config it is, not as its parameters.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

from tracker.spec.fields import SEQUENCE_STRATEGY, file_knob
from tracker.spec.server_options import server_knob
from tracker.triton import field_paths
from tracker.triton.configuration import Configuration
from tracker.triton.model_config import LOAD_PARAMS

# Values Triton uses when the default config leaves a field out (model_config.proto); a
# config without a warmup block is model_warmup.count 0 (tracker/triton/warmup.py)
IMPLIED: dict[str, object] = {"instance_group.count": 1, "model_warmup.count": 0}
_MAX_CATEGORIES = 1000


@dataclass(frozen=True)
class Baseline:
    """The baseline trial's parameters, and the values the space could not express."""

    params: dict[str, Any]
    exact: dict[str, Any] = field(default_factory=dict)

    @property
    def is_exact(self) -> bool:
        return not self.exact


def _enum_name(path: str, value: object) -> object:
    if path == SEQUENCE_STRATEGY:  # already a name ("direct"/"oldest"), no schema field
        return value
    desc = field_paths.resolve(path)
    if (isinstance(value, int) and desc is not None
            and desc.type == FieldDescriptor.TYPE_ENUM):
        found = desc.enum_type.values_by_number.get(value)
        return found.name if found is not None else value
    return value


def config_values(conf: Configuration, keys: list[str]) -> dict[str, object]:
    """The config's value at each field path (None when the config does not set it); for a
    configuration, each ``<model>/<field path>`` read from that model's default config. Load
    knobs, the keys of the model's JSON files and server options are not the config's."""
    out: dict[str, object] = {}
    for key in keys:
        if key in LOAD_PARAMS or file_knob(key) is not None or server_knob(key):
            continue
        model, path = conf.split_key(key)
        model_cfg = conf.info(model).config
        value = field_paths.get_value(model_cfg, path)
        if isinstance(value, list):  # repeated scalar: one value stands for a one-element list
            value = value[0] if len(value) == 1 else (value or None)
        if value is None or (value == 0 and path == "instance_group.count"):
            value = IMPLIED.get(path)  # an instance group without a count has one instance
        out[key] = _enum_name(path, value)
    return out


def _values(dist: BaseDistribution) -> list[Any]:
    if isinstance(dist, CategoricalDistribution):
        return list(dist.choices)
    if isinstance(dist, IntDistribution):
        return list(range(dist.low, dist.high + 1, dist.step))
    raise TypeError(dist)


def _widen(dist: BaseDistribution, value: Any) -> BaseDistribution | None:
    """A distribution that holds ``value`` (the same one when it already does); None when no
    distribution of a compatible kind can."""
    if isinstance(dist, CategoricalDistribution):
        if any(type(c) is type(value) and c == value for c in dist.choices):
            return dist
        kinds = {type(c) for c in dist.choices}
        if kinds != {type(value)} and not (kinds <= {int, float} and type(value) in (int, float)):
            return None
        choices = [*dist.choices, value]
        if all(isinstance(c, int | float) and not isinstance(c, bool) for c in choices):
            choices.sort()
        return CategoricalDistribution(choices)
    if isinstance(dist, IntDistribution):
        if isinstance(value, bool) or not isinstance(value, int):
            return None
        if dist._contains(dist.to_internal_repr(value)):
            return dist
        on_step = (value - dist.low) % dist.step == 0
        if on_step and not dist.log:
            return IntDistribution(min(dist.low, value), max(dist.high, value), step=dist.step)
        if dist.log and value >= 1:
            return IntDistribution(min(dist.low, value), max(dist.high, value), log=True)
        if (dist.high - dist.low) // dist.step + 1 < _MAX_CATEGORIES:
            return CategoricalDistribution(sorted([*_values(dist), value]))
        return None
    if isinstance(dist, FloatDistribution):
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        v = float(value)
        if dist._contains(v):
            return dist
        if dist.step is None:
            if dist.log and v <= 0:
                return None
            return FloatDistribution(min(dist.low, v), max(dist.high, v), log=dist.log)
        if abs(((v - dist.low) / dist.step) - round((v - dist.low) / dist.step)) < 1e-9:
            return FloatDistribution(min(dist.low, v), max(dist.high, v), step=dist.step)
        return None
    return None


def _closest(dist: BaseDistribution, value: Any) -> Any:
    """A value of ``dist`` near ``value`` (for a baseline the space cannot express)."""
    if isinstance(dist, CategoricalDistribution):
        numeric = [c for c in dist.choices
                   if isinstance(c, int | float) and not isinstance(c, bool)]
        if numeric and isinstance(value, int | float) and not isinstance(value, bool):
            return min(numeric, key=lambda c: abs(c - value))
        return dist.choices[0]
    if isinstance(dist, IntDistribution):
        return dist.low
    if isinstance(dist, FloatDistribution):
        return dist.low
    raise TypeError(dist)


def fit_baseline(distributions: Mapping[str, BaseDistribution],
                 conf: Configuration, files: Mapping[str, object] | None = None,
                 ) -> tuple[dict[str, BaseDistribution], Baseline]:
    """(the space widened to hold the default config, the baseline's parameters).

    ``concurrency`` in the space (a load knob) takes its highest value for the baseline: the
    default config under the most load the study applies. ``files``: the value each
    ``FILE:KEY`` knob of the space has in the model's own file (json_knobs.defaults).
    """
    values = {**config_values(conf, list(distributions)), **(files or {})}
    space: dict[str, BaseDistribution] = {}
    params: dict[str, Any] = {}
    exact: dict[str, Any] = {}
    for key, dist in distributions.items():
        if key in LOAD_PARAMS:
            space[key] = dist
            params[key] = (max(_values(dist)) if isinstance(
                dist, CategoricalDistribution | IntDistribution) else dist.high)  # type: ignore[attr-defined]
            continue
        value = values.get(key)
        widened = _widen(dist, value) if value is not None else None
        if widened is None:
            space[key] = dist
            params[key] = _closest(dist, value)
            exact[key] = value
        else:
            space[key] = widened
            params[key] = value.item() if hasattr(value, "item") else value
    return space, Baseline(params, exact)
