"""Rules Triton applies to a model's knobs together, said before any trial runs: request
priorities (``dynamic_batching.default_priority_level`` within ``priority_levels``) and an
instance group's rate limiter resources within what the server gives (``server.options``).

Each function returns the problems as ``search.space.<knob>: <rule and value>`` lines; the
values a knob may take are its space's choices or range, else the model's default config.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from tracker.spec import Range, Scalar
from tracker.spec.fields import plain_path
from tracker.triton import field_paths

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

LEVELS = "dynamic_batching.priority_levels"
DEFAULT_LEVEL = "dynamic_batching.default_priority_level"
RESOURCE_COUNT = "instance_group.rate_limiter.resources.count"
RESOURCE_NAME = "instance_group.rate_limiter.resources.name"


def _choices(knob: Range | list[Scalar] | None) -> list[float]:
    if isinstance(knob, Range):
        return [float(knob.low), float(knob.high)]
    if isinstance(knob, list):
        return [float(v) for v in knob if isinstance(v, int | float) and not isinstance(v, bool)]
    return []


def _numbers(space: Mapping[str, Range | list[Scalar]], key: str,
             cfg: ModelConfig) -> list[float]:
    if key in space:
        return _choices(space[key])
    value = field_paths.get_value(cfg, key)
    return [float(value)] if isinstance(value, int | float) else []


def priority_problems(space: Mapping[str, Range | list[Scalar]], cfg: ModelConfig) -> list[str]:
    """Triton refuses a ``default_priority_level`` outside ``[1, priority_levels]`` when
    priorities are on, and above 0 when they are off."""
    if DEFAULT_LEVEL not in space and LEVELS not in space:
        return []
    levels = _numbers(space, LEVELS, cfg) or [0.0]
    defaults = _numbers(space, DEFAULT_LEVEL, cfg) or [0.0]
    fewest, highest = min(levels), max(defaults)
    where = f"search.space.{DEFAULT_LEVEL if DEFAULT_LEVEL in space else LEVELS}"
    if fewest > 0 and highest > fewest:
        return [f"{where}: a priority level must be at most dynamic_batching.priority_levels "
                f"({fewest:g}), but default_priority_level may be {highest:g}"]
    if fewest > 0 and min(defaults) < 1:
        return [f"{where}: with priority_levels {fewest:g}, default_priority_level must be "
                f"in [1, {fewest:g}], but may be {min(defaults):g}"]
    if fewest == 0 and highest > 0:
        return [f"{where}: default_priority_level {highest:g} needs priority levels "
                "(dynamic_batching.priority_levels > 0), but priority_levels may be 0"]
    return []


def resource_problems(space: Mapping[str, Range | list[Scalar]],
                      resources: Mapping[str, int]) -> list[str]:
    """An instance group's rate limiter may not need more of a resource than the server was
    given (``server.options.rate_limit_resources``): Triton refuses to load it."""
    names = [k for k in space if plain_path(k.rpartition("/")[2]) == RESOURCE_NAME]
    out = []
    for key in names:
        count_key = key.replace("resources.name", "resources.count")
        choices = space[key] if isinstance(space[key], list) else []
        counts = _choices(space.get(count_key))
        for name in choices:
            have = resources.get(str(name))
            if have is not None and counts and max(counts) > have:
                out.append(f"search.space.{count_key}: resource {name!r} has {have} on the "
                           f"server (server.options.rate_limit_resources), but an instance "
                           f"may need up to {max(counts):g}; Triton refuses to load it")
    return out

