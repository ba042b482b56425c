"""Rules Triton applies to a model's knobs together, said before any trial runs: request
priorities (``dynamic_batching.default_priority_level`` within ``priority_levels``, one level
while ``preserve_ordering`` is true, and the levels ``load.priorities`` sends at), an instance
group's rate limiter resources within what the server gives (``server.options``), and a
warmup Triton can run (``model_warmup``).

Each function returns the problems as ``search.space.<knob>: <rule and value>`` lines; the
values a knob may take are its space's choices or range, else the model's default config.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from tracker.metrics import priority_level
from tracker.spec import Range, Scalar
from tracker.spec.fields import plain_path
from tracker.triton import field_paths, warmup

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

    from tracker.spec import StudySpec
    from tracker.triton.configuration import Configuration

LEVELS = "dynamic_batching.priority_levels"
DEFAULT_LEVEL = "dynamic_batching.default_priority_level"
ORDERING = "dynamic_batching.preserve_ordering"
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
    priorities are on, and above 0 when they are off (a trial that leaves it unset gets the
    lowest level, tracker/triton/model_config.py ``apply``), and more than one level while
    ``preserve_ordering`` is true."""
    if ORDERING in space or LEVELS in space:
        ordering = _ordering_problems(space, cfg, max(_numbers(space, LEVELS, cfg) or [0.0]))
        if ordering:
            return ordering
    if DEFAULT_LEVEL not in space and LEVELS not in space:
        return []
    levels = _numbers(space, LEVELS, cfg) or [0.0]
    defaults = _numbers(space, DEFAULT_LEVEL, cfg) or [0.0]
    fewest, highest = min(levels), max(defaults)
    where = f"search.space.{DEFAULT_LEVEL if DEFAULT_LEVEL in space else LEVELS}"
    if fewest > 0 and highest > fewest:
        return [f"{where}: a priority level must be at most dynamic_batching.priority_levels "
                f"({fewest:g}), but default_priority_level may be {highest:g}"]
    if fewest > 0 and DEFAULT_LEVEL in space and min(defaults) < 1:  # unset: the lowest
        return [f"{where}: with priority_levels {fewest:g}, default_priority_level must be "
                f"in [1, {fewest:g}], but may be {min(defaults):g}"]
    if fewest == 0 and highest > 0:
        return [f"{where}: default_priority_level {highest:g} needs priority levels "
                "(dynamic_batching.priority_levels > 0), but priority_levels may be 0"]
    return []


def _ordering_problems(space: Mapping[str, Range | list[Scalar]], cfg: ModelConfig,
                       most: float) -> list[str]:
    """Triton allows one priority level at most while ``preserve_ordering`` is true."""
    ordered = (True in space[ORDERING] if isinstance(space.get(ORDERING), list)
               else field_paths.get_value(cfg, ORDERING) is True)
    if not ordered or most <= 1:
        return []
    where = LEVELS if LEVELS in space else ORDERING
    return [f"search.space.{where}: Triton allows one priority level at most while "
            f"{ORDERING} is true, but priority_levels may be {most:g} and preserve_ordering "
            "true"]


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



def _sent_levels(shares: Mapping[int, float] | None, searched_knob: Range | list[Scalar] | None,
                 key: str, cfg: ModelConfig) -> list[str]:
    """One entry: every level its load sends at within each measured configuration's
    ``priority_levels`` (its config's, and ``searched_knob``'s values at space key ``key``;
    0, priorities off, is allowed beside configurations with them)."""
    if not shares:
        return []
    highest = max(shares)
    own = field_paths.get_value(cfg, LEVELS)
    own_levels = float(own) if isinstance(own, int | float) else 0.0
    searched = _choices(searched_knob)
    if max([own_levels, *searched]) == 0:
        return [f"load.priorities: sends requests at levels {list(shares)}, but model "
                f"{cfg.name!r} has no priority levels ({LEVELS} is 0 and the search space "
                f"does not set it), so Triton would serve them all alike; set priority_levels "
                f">= {highest} in its config.pbtxt or search it"]
    out = []
    if 0 < own_levels < highest:
        out.append(f"load.priorities: sends requests at level {highest}, but model "
                   f"{cfg.name!r} has {LEVELS} {own_levels:g} (its config.pbtxt); Triton "
                   "serves a request above priority_levels at default_priority_level without a "
                   "word")
    low = [v for v in searched if 0 < v < highest]
    if low:
        out.append(f"search.space.{key}: load.priorities sends requests at level {highest}, "
                   f"but priority_levels may be {min(low):g}; Triton serves a request above "
                   "priority_levels at default_priority_level without a word")
    return out


def load_priority_problems(spec: StudySpec, conf: Configuration,
                           space: Mapping[str, Range | list[Scalar]]) -> list[str]:
    """``load.priorities`` against each entry model's priority levels (Triton maps a level
    above ``priority_levels`` to the default level silently), and each objective or
    constraint that names a level (``perf_latency_p99/priority_1``, or ``<model>/...`` for
    one entry of several) against the levels its entry's load sends at."""
    out: list[str] = []
    sent: dict[str, tuple[int, ...]] = {}
    for name in conf.entries:
        shares = spec.load.for_model(name).priorities
        sent[name] = tuple(shares or ())
        key = conf.key(name, LEVELS)
        out.extend(_sent_levels(shares, space.get(key), key, conf.info(name).config))
    for section, names in (("objectives", spec.objectives), ("constraints", spec.constraints)):
        for metric in names:
            level = priority_level(metric)
            if level is None:
                continue
            named = [e for e in conf.entries if metric.startswith(f"{e}/")]
            for entry in (e for e in named or conf.entries if level not in sent[e]):
                have = list(sent[entry]) or "none (load.priorities is not set)"
                out.append(f"{section}.{metric}: names priority level {level}, but the load "
                           f"of model {entry!r} sends no request at it (its levels: {have})")
    return out


def warmup_problems(space: Mapping[str, Range | list[Scalar]], cfg: ModelConfig) -> list[str]:
    """``model_warmup`` knobs (tracker/triton/warmup.py) Triton could not run: on a stateful
    model (its warmup requests would lack the control inputs the sequence batcher adds), or a
    batch size above ``max_batch_size`` (1 for a model that cannot batch)."""
    keys = [k for k in space if plain_path(k).startswith(warmup.PREFIX)]
    if not keys:
        return []
    if cfg.HasField("sequence_batching"):
        return [f"search.space.{keys[0]}: model {cfg.name!r} is stateful: Triton's warmup "
                "requests would carry none of the control inputs its sequence batcher adds; "
                "write its model_warmup block (with those inputs) in config.pbtxt instead"]
    out = []
    for key in (k for k in keys if plain_path(k) == warmup.BATCH_SIZE):
        sizes = _numbers(space, "max_batch_size", cfg)
        largest = max(min(sizes), 1) if sizes else 1
        most = max(_choices(space[key]), default=0.0)
        if most > largest:
            out.append(f"search.space.{key}: a warmup batch must be at most max_batch_size "
                       f"({largest:g}; 1 for a model that cannot batch), but may be {most:g}")
    return out
