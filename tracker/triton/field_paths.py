"""Field paths into a ModelConfig: `dynamic_batching.max_queue_delay_microseconds` and friends.

A field path names one scalar (or repeated scalar) field of
`tritonclient.grpc.model_config_pb2.ModelConfig` by the names of the fields on the way, joined
by dots. The schema walk (which paths exist, why one does not, the closest suggestion, enum
short names such as ``GPU``) is tracker/spec/fields.py's, shared with the spec checks; this
module reads and sets values in a message. Two conventions:

- a repeated message field on the way (``instance_group``) addresses its element 0, or the
  element an index names (``instance_group.1.count``), created (with those before it) when
  missing;
- the ``parameters`` map (``map<string, ModelParameter>``) is addressed as ``parameters.KEY``
  and sets ``string_value`` (how Triton backends read options such as ORT's
  ``intra_op_thread_count``).

This module only knows protobuf; the rules about which combinations make sense live in
model_config.py.
"""

from __future__ import annotations

from typing import Any

from google.protobuf.descriptor import EnumDescriptor, FieldDescriptor
from google.protobuf.message import Message
from tritonclient.grpc import model_config_pb2

from tracker.errors import ConfigError
from tracker.spec.fields import (
    FLOAT_TYPES,
    INT_RANGES,
    SEQUENCE_STRATEGY,
    enum_name,
    is_repeated,
    path_parts,
    resolve,
)
from tracker.triton.sequence import is_sequence, set_strategy, strategy

__all__ = ["check_path", "coerce", "get_value", "resolve", "set_value"]


def check_path(path: str) -> None:
    """Raise ConfigError unless `path` names a settable config field (used to check specs)."""
    if path != SEQUENCE_STRATEGY:
        resolve(path)


def _enum_value(path: str, enum: EnumDescriptor, value: object) -> int:
    names = [v.name for v in enum.values]
    if isinstance(value, int) and not isinstance(value, bool):
        if value in enum.values_by_number:
            return value
    elif isinstance(value, str):
        name = enum_name(names, value.strip())
        if name is not None:
            return int(enum.values_by_name[name].number)
    raise ConfigError(f"`{path}` must be one of {names}, but got {value!r}")


def coerce(path: str, field: FieldDescriptor, value: object) -> Any:
    """`value` converted to what `field` holds; ConfigError naming the path when it cannot be."""
    kind = field.type
    if kind == FieldDescriptor.TYPE_ENUM:
        return _enum_value(path, field.enum_type, value)
    if kind == FieldDescriptor.TYPE_BOOL:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"`{path}` must be a bool (true/false), but got {value!r}")
    if kind in INT_RANGES:
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if not isinstance(value, int) or isinstance(value, bool):
            raise ConfigError(f"`{path}` must be an integer, but got {value!r}")
        low, high = INT_RANGES[kind]
        if not low <= value <= high:
            rule = ">= 0" if low == 0 else f"in [{low}, {high}]"
            raise ConfigError(f"`{path}` must be {rule}, but got {value}")
        return value
    if kind in FLOAT_TYPES:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise ConfigError(f"`{path}` must be a number, but got {value!r}")
    if kind == FieldDescriptor.TYPE_STRING:
        if isinstance(value, str):
            return value
        raise ConfigError(f"`{path}` must be a string, but got {value!r}")
    raise ConfigError(f"`{path}` has a field type that cannot be set from a value")


def _parameter_text(path: str, value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, str)):
        return str(value)
    raise ConfigError(f"`{path}` must be a scalar (string, number or bool), but got {value!r}")


def _container(cfg: Message, parts: list[str]) -> Message:
    """The message holding the last field of `parts`, created along the way (a list's
    element ``[i]``, element 0 without an index, and the elements before it)."""
    msg = cfg
    for part, index in path_parts(".".join(parts))[:-1]:
        field = msg.DESCRIPTOR.fields_by_name[part]
        if is_repeated(field):
            items = getattr(msg, part)
            while len(items) <= (index or 0):
                items.add()
            msg = items[index or 0]
        else:
            msg = getattr(msg, part)
    return msg


def set_value(cfg: model_config_pb2.ModelConfig, path: str, value: object) -> None:
    """Set the field at `path` in `cfg` (in place), checking the value's type."""
    if path == SEQUENCE_STRATEGY:
        set_strategy(cfg, value)
        return
    field = resolve(path)
    if field is None:
        key = path.split(".", 1)[1]
        cfg.parameters[key].string_value = _parameter_text(path, value)
        return
    parts = path.split(".")
    if is_repeated(field):
        items = list(value) if isinstance(value, (list, tuple)) else [value]
        coerced = [coerce(path, field, item) for item in items]
        target = getattr(_container(cfg, parts), parts[-1])
        del target[:]
        target.extend(coerced)
        return
    if isinstance(value, (list, tuple)):
        raise ConfigError(f"`{path}` holds one value, but got a list {list(value)!r}")
    coerced_one = coerce(path, field, value)
    container = _container(cfg, parts)
    try:
        setattr(container, parts[-1], coerced_one)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"`{path}` cannot be set to {value!r}: {exc}") from exc


def get_value(cfg: model_config_pb2.ModelConfig, path: str) -> object:
    """The current value at `path` (element 0 of repeated messages; None when absent)."""
    if path == SEQUENCE_STRATEGY:
        return strategy(cfg) if is_sequence(cfg) else None
    field = resolve(path)
    if field is None:
        key = path.split(".", 1)[1]
        return cfg.parameters[key].string_value if key in cfg.parameters else None
    msg: Message = cfg
    parts = path.split(".")
    for part, index in path_parts(".".join(parts))[:-1]:
        child_field = msg.DESCRIPTOR.fields_by_name[part]
        if is_repeated(child_field):
            items = getattr(msg, part)
            if len(items) <= (index or 0):
                return None
            msg = items[index or 0]
        else:
            if not msg.HasField(part):
                return None
            msg = getattr(msg, part)
    result = getattr(msg, parts[-1])
    return list(result) if is_repeated(field) else result
