"""Rules for the search space of the study spec: knob names, value types, numeric ranges.

A knob is a config.pbtxt field path (checked against the ModelConfig protobuf schema by
:mod:`tracker.spec.fields`) or a load knob (``concurrency``). Each function raises
:class:`~tracker.spec.messages.Problems` (or returns (sub-path, message) pairs) whose text says
the rule and the bad value.
"""

from __future__ import annotations

import math
from typing import Protocol

from tracker import metrics as catalog
from tracker.spec.fields import (
    PARAMETERS,
    ConfigField,
    canonical_path,
    closest,
    config_field,
    config_field_paths,
    file_knob,
    file_knob_problem,
    path_parts,
    plain_path,
)
from tracker.spec.limits import MAX_VALUE, choices_problem, index_problem, range_problem
from tracker.spec.messages import problem, show
from tracker.spec.server_options import server_knob, server_knob_problem

# Knobs in search.space that are not config.pbtxt fields but load settings (the catalog's).
LOAD_KNOBS: tuple[str, ...] = catalog.LOAD_KNOBS

# The knobs people tune most (DESIGN.md), offered first in suggestions.
COMMON_KNOBS: tuple[str, ...] = (
    "max_batch_size", "instance_group.count", "instance_group.kind",
    "dynamic_batching.max_queue_delay_microseconds", "dynamic_batching.preferred_batch_size",
)

# Lower bounds the schema's types do not say (an int32 may be negative; a count may not).
MIN_VALUE: dict[str, int] = {
    **catalog.LOAD_KNOB_MIN,
    "max_batch_size": 0,
    "instance_group.count": 1,
    "dynamic_batching.preferred_batch_size": 1,
    "dynamic_batching.max_queue_delay_microseconds": 0,
}


class RangeLike(Protocol):
    low: int | float
    high: int | float
    step: int | float | None
    log: bool

    @property
    def is_int(self) -> bool: ...


def parse_number(value: object) -> object:
    """Before-validator: a number (not true/false, not a string) or null."""
    if value is None or (isinstance(value, int | float) and not isinstance(value, bool)):
        if isinstance(value, float) and not math.isfinite(value):
            raise problem(f"must be a finite number, but got {show(value)}")
        return value
    raise problem(f"must be a number, but got {show(value)}")


def check_range(low: float, high: float, step: float | None, log: bool) -> None:
    """The rules of a ``{low, high, step, log}`` range (Optuna's, said up front)."""
    if low > high:
        raise problem(f"`low <= high` must hold, but got (low={low}, high={high})")
    if step is not None and step <= 0:
        raise problem(f"`step > 0` must hold, but got step={step}", "step")
    if log and low <= 0:
        raise problem(f"`low > 0` must hold for a log range, but got low={low}", "low")
    if log and step is not None and step != 1:
        raise problem(f"`step` cannot be combined with `log: true`, but got step={step}", "step")
    if step is not None and not log:
        count = (high - low) / step
        if abs(count - round(count)) > 1e-9:
            raise problem("`high - low` must be a multiple of `step`, but got "
                          f"(low={low}, high={high}, step={step})")
    is_int = all(isinstance(v, int) for v in (low, high, step) if v is not None)
    too_many = range_problem(low, high, step, log, is_int)
    if too_many is not None:
        raise problem(too_many)


def check_space_value_shape(value: object) -> object:
    """Before-validator for a list of choices: scalars only, none repeated."""
    if not isinstance(value, list):
        return value
    too_many = choices_problem(len(value))
    if too_many is not None:
        raise problem(too_many)
    seen: set[tuple[type, object]] = set()
    for i, item in enumerate(value):
        if item is None or not isinstance(item, bool | int | float | str):
            raise problem("a choice must be a number, a string or true/false, but got "
                          f"{show(item)}", f"[{i}]")
        key = (type(item), item)
        if key in seen:
            raise problem(f"lists {show(item)} more than once", f"[{i}]")
        seen.add(key)
    return value


def knob_path(key: str) -> str:
    """The field path of a search.space key: ``preprocess/instance_group.count`` (a model of
    a configuration of several) -> ``instance_group.count``; a bare key as it is; a server
    option knob (``server/cache_size``) as it is."""
    if server_knob(key):
        return key
    return key.split("/", 1)[1] if "/" in key else key


def check_knob(key: str) -> str:
    """After-validator for a search.space key: a config field path, a load knob, a key of
    a JSON file in the model directory (``model.json:KEY``; the model's check finds them;
    single-model studies only), or ``<model>/<field path>`` (which models there are is
    checked against the configuration, tracker.search.space.check_space)."""
    if file_knob(key) is not None:
        why = file_knob_problem(key)
        if why is not None:
            raise problem(why)
        return key
    if server_knob(key):  # server/<option>: a tritonserver flag (spec/server_options.py)
        why = server_knob_problem(key)
        if why is not None:
            raise problem(why)
        return key
    key = canonical_path(key)  # instance_group[1].count -> instance_group.1.count
    too_far = index_problem([i for _, i in path_parts(key.rpartition("/")[2]) if i is not None])
    if too_far is not None:
        raise problem(too_far)
    given = key
    if "/" in key:
        model, path = key.split("/", 1)
        if not model or path in LOAD_KNOBS:
            raise problem(f"`<model>/<field path>` needs a model name and a config field, but "
                          f"got {key!r} (load knobs such as 'concurrency' take no model)")
        key = path
    if key in LOAD_KNOBS or config_field(key) is not None:
        return given
    if key.split(".")[0] == PARAMETERS:
        raise problem("a parameters knob names one key of the map, 'parameters.KEY', e.g. "
                      "'parameters.intra_op_thread_count'")
    paths = config_field_paths()
    inside = [p for p in (*COMMON_KNOBS, *paths) if p.startswith(key + ".")]
    if inside:
        raise problem(f"{key!r} is a message, not a value; name a field inside it, e.g. "
                      f"{inside[0]!r}")
    guess = closest(key, (*LOAD_KNOBS, *paths))
    hint = f"did you mean {guess!r}?" if guess else (
        "a knob is a config.pbtxt field path such as 'instance_group.count', 'concurrency', "
        "or a key of a JSON file of the model directory, 'model.json:KEY'")
    raise problem(f"unknown knob; {hint}")


def knob_value_problems(key: str, field: ConfigField | None,
                        value: list[bool | int | float | str] | RangeLike) -> list[tuple[str, str]]:
    """What is wrong with the choices or the range given for knob ``key``."""
    if key in LOAD_KNOBS:
        field = ConfigField(path=key, kind="int", repeated=False)
    if field is None:
        return []
    least = MIN_VALUE.get(plain_path(key), field.minimum)
    most = upper_bound(key, field)
    out: list[tuple[str, str]] = []
    if isinstance(value, list):
        for i, item in enumerate(value):
            if not field.accepts(item):
                out.append((f"[{i}]", f"must be {field.describe()}, but got {show(item)}"))
            elif least is not None and isinstance(item, int | float) and item < least:
                out.append((f"[{i}]", f"must be >= {least}, but got {show(item)}"))
            elif most is not None and isinstance(item, int | float) and item > most[0]:
                out.append((f"[{i}]", f"must be <= {most[0]} ({most[1]}), but got {show(item)}"))
        return out
    if field.kind not in ("int", "float", "param"):
        return [("", f"a range needs a numeric field, but {key} takes {field.describe()}; "
                     "list the values instead")]
    if field.kind == "int" and not value.is_int:
        return [("", "must be an integer range (low, high and step integers) for an integer "
                     f"field, but got (low={value.low}, high={value.high}, step={value.step})")]
    if least is not None and value.low < least:
        return [("low", f"must be >= {least}, but got {value.low}")]
    if most is not None and value.high > most[0]:
        return [("high", f"must be <= {most[0]} ({most[1]}), but got {value.high}")]
    return out


def upper_bound(key: str, field: ConfigField) -> tuple[int, str] | None:
    """(the largest value knob ``key`` takes, why) or None: the limit of
    tracker/spec/limits.py, else the largest value of the field's protobuf type."""
    tighter = MAX_VALUE.get(plain_path(key))
    if tighter is not None:
        return tighter
    if field.maximum is not None:
        return field.maximum, f"the largest {field.proto_type or 'integer'} value"
    return None
