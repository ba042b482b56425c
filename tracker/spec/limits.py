"""The limits ``tracker check`` holds a spec to beyond the schema's types, so that a value
that would exhaust memory or time at trial time is refused before anything starts.

- an integer config field takes what its protobuf type holds (int32 within
  [-2^31, 2^31 - 1], uint64 within [0, 2^64 - 1], ...; read from the ModelConfig descriptor by
  :mod:`tracker.spec.fields`), and :data:`MAX_VALUE` tightens a few of them:
  ``instance_group.count`` is at most :data:`MAX_INSTANCE_COUNT` (each instance is a process or
  a copy of the model);
- an element index in a field path (``instance_group.3.count``) is below :data:`MAX_ELEMENTS`
  (the elements before it are created);
- a search list holds at most :data:`MAX_CHOICES` values, and a range at most
  :data:`MAX_RANGE_VALUES` (an integer range without ``log``, or a float range with a
  ``step``; the grid sampler and the space's size enumerate them).

YAML aliases are bounded where the spec is read (tracker/spec/yaml_loader.py). Each check here
returns the message (the rule and the value) or None.
"""

from __future__ import annotations

import math

#: instances in one instance group
MAX_INSTANCE_COUNT = 1024
#: elements a field path may address in one list (indices 0 .. MAX_ELEMENTS - 1)
MAX_ELEMENTS = 1024
#: values in one search list
MAX_CHOICES = 1024
#: values in one enumerable search range
MAX_RANGE_VALUES = 1_000_000

#: upper bounds tighter than the field's type, by field path without indices, and why
MAX_VALUE: dict[str, tuple[int, str]] = {
    "instance_group.count": (MAX_INSTANCE_COUNT, "instances in one group"),
}


def index_problem(indices: list[int]) -> str | None:
    """Why a field path's element indices are too large, or None."""
    worst = max(indices, default=0)
    if worst >= MAX_ELEMENTS:
        return (f"an element index must be < {MAX_ELEMENTS} (at most {MAX_ELEMENTS} elements "
                f"of a list), but got {worst}")
    return None


def choices_problem(count: int) -> str | None:
    """Why a search list of ``count`` values is too long, or None."""
    if count > MAX_CHOICES:
        return f"a search list holds at most {MAX_CHOICES} values, but got {count}"
    return None


def range_count(low: float, high: float, step: float | None, log: bool,
                is_int: bool) -> int | None:
    """How many values a range holds, counted without listing them; None when it is
    continuous (a float range without a step)."""
    if is_int and log:  # low, 2*low, 4*low, ... up to high (tracker/search/space.py)
        first = max(int(low), 1)
        return (int(high) // first).bit_length() if high >= first else 0
    if step is None and not is_int:
        return None
    return math.floor((high - low) / (step or 1) + 1e-9) + 1


def range_problem(low: float, high: float, step: float | None, log: bool,
                  is_int: bool) -> str | None:
    """Why a range holds too many values to enumerate, or None."""
    count = range_count(low, high, step, log, is_int)
    if count is not None and count > MAX_RANGE_VALUES:
        return (f"a range holds at most {MAX_RANGE_VALUES} values (give it a larger `step` or "
                f"`log: true`), but (low={low}, high={high}, step={step}) holds {count}")
    return None
