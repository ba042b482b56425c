"""Field paths into a ModelConfig: `dynamic_batching.max_queue_delay_microseconds` and friends.

A field path names one scalar (or repeated scalar) field of
`tritonclient.grpc.model_config_pb2.ModelConfig` by the names of the fields on the way, joined
by dots. Everything is read from the protobuf descriptor, so every scalar field Triton knows is
addressable without a list kept by hand. Two conventions:

- a repeated message field on the way (``instance_group``) addresses its element 0, created
  when missing;
- the ``parameters`` map (``map<string, ModelParameter>``) is addressed as ``parameters.KEY``
  and sets ``string_value`` (how Triton backends read options such as ORT's
  ``intra_op_thread_count``).

This module only knows protobuf; the rules about which combinations make sense live in
model_config.py.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator
from functools import cache
from typing import Any

from google.protobuf.descriptor import Descriptor, EnumDescriptor, FieldDescriptor
from google.protobuf.message import Message
from tritonclient.grpc import model_config_pb2

from tracker.errors import ConfigError

PARAMETERS = "parameters"
_MAX_DEPTH = 4

_INT_TYPES = {
    FieldDescriptor.TYPE_INT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SINT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_INT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SINT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_UINT32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_FIXED32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_UINT64: (0, 2**64 - 1),
    FieldDescriptor.TYPE_FIXED64: (0, 2**64 - 1),
}
_FLOAT_TYPES = {FieldDescriptor.TYPE_FLOAT, FieldDescriptor.TYPE_DOUBLE}


def _is_repeated(field: FieldDescriptor) -> bool:
    # protobuf >= 5.28 has `is_repeated` and deprecates `label`; older ones have only `label`
    flag = getattr(field, "is_repeated", None)
    if isinstance(flag, bool):
        return flag
    return bool(field.label == FieldDescriptor.LABEL_REPEATED)


def _is_map(field: FieldDescriptor) -> bool:
    msg = field.message_type
    return bool(msg is not None and msg.GetOptions().map_entry)


def _walk(desc: Descriptor, prefix: str, depth: int, seen: tuple[str, ...]) -> Iterator[str]:
    for field in desc.fields:
        path = f"{prefix}{field.name}"
        if field.type != FieldDescriptor.TYPE_MESSAGE:
            yield path
        elif _is_map(field):
            continue
        elif depth < _MAX_DEPTH and field.message_type.full_name not in seen:
            yield from _walk(field.message_type, path + ".", depth + 1,
                             (*seen, field.message_type.full_name))


@cache
def known_paths() -> tuple[str, ...]:
    """Every scalar field path of ModelConfig (to a depth of 5 fields), sorted."""
    desc = model_config_pb2.ModelConfig.DESCRIPTOR
    return tuple(sorted(_walk(desc, "", 0, (desc.full_name,))))


def _unknown(path: str, why: str) -> ConfigError:
    close = difflib.get_close_matches(path, known_paths(), n=1, cutoff=0.6)
    hint = f"; did you mean `{close[0]}`?" if close else ""
    return ConfigError(f"`{path}` is not a config.pbtxt field path ({why}){hint}")


def resolve(path: str) -> FieldDescriptor | None:
    """The descriptor of the scalar field at `path`; None for `parameters.KEY`.

    Raises ConfigError for a path that does not name a scalar field, suggesting the closest.
    """
    parts = path.split(".")
    if not all(parts):
        raise _unknown(path, "empty segment")
    if parts[0] == PARAMETERS:
        if len(parts) != 2:
            raise ConfigError(f"`{path}`: a parameters path is `parameters.KEY`, one key, "
                              "e.g. `parameters.intra_op_thread_count`")
        return None
    desc: Descriptor = model_config_pb2.ModelConfig.DESCRIPTOR
    for part in parts[:-1]:
        field = desc.fields_by_name.get(part)
        if field is None:
            raise _unknown(path, f"`{desc.name}` has no field `{part}`")
        if field.type != FieldDescriptor.TYPE_MESSAGE:
            raise _unknown(path, f"`{part}` is a value and has no fields")
        if _is_map(field):
            raise _unknown(path, f"`{part}` is a map")
        desc = field.message_type
    leaf = desc.fields_by_name.get(parts[-1])
    if leaf is None:
        raise _unknown(path, f"`{desc.name}` has no field `{parts[-1]}`")
    if leaf.type == FieldDescriptor.TYPE_MESSAGE:
        raise _unknown(path, f"`{parts[-1]}` is a message, not a value")
    return leaf


def check_path(path: str) -> None:
    """Raise ConfigError unless `path` names a settable config field (used to check specs)."""
    resolve(path)


def _enum_value(path: str, enum: EnumDescriptor, value: object) -> int:
    names = [v.name for v in enum.values]
    if isinstance(value, int) and not isinstance(value, bool):
        if value in enum.values_by_number:
            return value
    elif isinstance(value, str):
        wanted = value.strip().upper()
        for name in names:
            if name == wanted or name.endswith("_" + wanted):
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
    if kind in _INT_TYPES:
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if not isinstance(value, int) or isinstance(value, bool):
            raise ConfigError(f"`{path}` must be an integer, but got {value!r}")
        low, high = _INT_TYPES[kind]
        if not low <= value <= high:
            rule = ">= 0" if low == 0 else f"in [{low}, {high}]"
            raise ConfigError(f"`{path}` must be {rule}, but got {value}")
        return value
    if kind in _FLOAT_TYPES:
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
    """The message holding the last field of `parts`, created along the way."""
    msg = cfg
    for part in parts[:-1]:
        field = msg.DESCRIPTOR.fields_by_name[part]
        if _is_repeated(field):
            items = getattr(msg, part)
            msg = items[0] if len(items) else items.add()
        else:
            msg = getattr(msg, part)
    return msg


def set_value(cfg: model_config_pb2.ModelConfig, path: str, value: object) -> None:
    """Set the field at `path` in `cfg` (in place), checking the value's type."""
    field = resolve(path)
    if field is None:
        key = path.split(".", 1)[1]
        cfg.parameters[key].string_value = _parameter_text(path, value)
        return
    parts = path.split(".")
    if _is_repeated(field):
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
    field = resolve(path)
    if field is None:
        key = path.split(".", 1)[1]
        return cfg.parameters[key].string_value if key in cfg.parameters else None
    msg: Message = cfg
    parts = path.split(".")
    for part in parts[:-1]:
        child_field = msg.DESCRIPTOR.fields_by_name[part]
        if _is_repeated(child_field):
            items = getattr(msg, part)
            if not len(items):
                return None
            msg = items[0]
        else:
            if not msg.HasField(part):
                return None
            msg = getattr(msg, part)
    result = getattr(msg, parts[-1])
    return list(result) if _is_repeated(field) else result
