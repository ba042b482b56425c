"""config.pbtxt field paths, read from the ModelConfig protobuf descriptor.

A knob in the study spec is named by its dotted path in Triton's ``ModelConfig`` message, e.g.
``max_batch_size``, ``instance_group.count``, ``dynamic_batching.max_queue_delay_microseconds``.
Repeated message fields (``instance_group``) are walked into their element type. Map fields are
not walked, except ``parameters.KEY`` (one key of the ``parameters`` map, whose string value
takes any scalar: how backends read options such as ``intra_op_thread_count``), as
tracker/triton/field_paths.py sets it. A path is a knob only when it ends on a scalar or enum
field.

This module knows nothing of the spec or of Triton servers; it only reads the protobuf schema.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from tritonclient.grpc import model_config_pb2

Kind = Literal["int", "float", "bool", "str", "enum", "param"]
PARAMETERS = "parameters"

_INT_TYPES = {
    FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_UINT32,
    FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_SINT32, FieldDescriptor.TYPE_SINT64,
    FieldDescriptor.TYPE_FIXED32, FieldDescriptor.TYPE_FIXED64, FieldDescriptor.TYPE_SFIXED32,
    FieldDescriptor.TYPE_SFIXED64,
}
_UNSIGNED_TYPES = {
    FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_FIXED32,
    FieldDescriptor.TYPE_FIXED64,
}
_FLOAT_TYPES = {FieldDescriptor.TYPE_FLOAT, FieldDescriptor.TYPE_DOUBLE}

# How deep `config_field_paths` enumerates (for suggestions); lookups walk any depth.
_MAX_DEPTH = 4


@dataclass(frozen=True)
class ConfigField:
    """A leaf field of ModelConfig: its dotted path, value kind and, for enums, the names."""

    path: str
    kind: Kind
    repeated: bool
    enum_names: tuple[str, ...] = ()
    minimum: int | None = None  # 0 for unsigned integer fields

    def accepts(self, value: object) -> bool:
        """Whether a single value fits this field (one element for a repeated field).
        Enum values may be short: ``GPU`` stands for ``KIND_GPU``."""
        if self.kind == "param":
            return isinstance(value, bool | int | float | str)
        if self.kind == "int":
            return isinstance(value, int) and not isinstance(value, bool)
        if self.kind == "float":
            return isinstance(value, int | float) and not isinstance(value, bool)
        if self.kind == "bool":
            return isinstance(value, bool)
        if self.kind == "enum":
            return isinstance(value, str) and any(
                n == value.upper() or n.endswith("_" + value.upper()) for n in self.enum_names)
        return isinstance(value, str)

    def describe(self) -> str:
        """The expected value in words, for error messages."""
        if self.kind == "enum":
            return "one of " + ", ".join(repr(n) for n in self.enum_names)
        return {"int": "an integer", "float": "a number", "bool": "true or false",
                "str": "a string", "param": "a string, a number or true/false"}[self.kind]


def _is_map(field: FieldDescriptor) -> bool:
    msg = field.message_type
    return msg is not None and bool(msg.GetOptions().map_entry)


def _is_repeated(field: FieldDescriptor) -> bool:
    # protobuf >= 5.28 has `is_repeated` and deprecates `label`; older ones only have `label`.
    flag = getattr(field, "is_repeated", None)
    if isinstance(flag, bool):
        return flag
    return bool(field.label == FieldDescriptor.LABEL_REPEATED)


def _leaf(path: str, field: FieldDescriptor) -> ConfigField:
    repeated = _is_repeated(field)
    kind: Kind
    names: tuple[str, ...] = ()
    minimum = 0 if field.type in _UNSIGNED_TYPES else None
    if field.type in _INT_TYPES:
        kind = "int"
    elif field.type in _FLOAT_TYPES:
        kind = "float"
    elif field.type == FieldDescriptor.TYPE_BOOL:
        kind = "bool"
    elif field.type == FieldDescriptor.TYPE_ENUM:
        kind = "enum"
        names = tuple(v.name for v in field.enum_type.values)
    else:
        kind = "str"
    return ConfigField(path=path, kind=kind, repeated=repeated, enum_names=names,
                       minimum=minimum)


def _root() -> Descriptor:
    desc: Descriptor = model_config_pb2.ModelConfig.DESCRIPTOR
    return desc


@cache
def config_field(path: str) -> ConfigField | None:
    """The leaf field at ``path`` (dotted), or None when no scalar/enum field has that path."""
    desc: Any = _root()
    parts = path.split(".")
    if parts[0] == PARAMETERS:
        ok = len(parts) == 2 and bool(parts[1])
        return ConfigField(path=path, kind="param", repeated=False) if ok else None
    for i, part in enumerate(parts):
        field = desc.fields_by_name.get(part) if desc is not None else None
        if field is None:
            return None
        last = i == len(parts) - 1
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            if last or _is_map(field):
                return None
            desc = field.message_type
        elif last:
            return _leaf(path, field)
        else:
            return None
    return None


@cache
def config_field_paths() -> tuple[str, ...]:
    """Every leaf path up to a few levels deep, sorted (the candidates for suggestions)."""
    out: list[str] = []

    def walk(desc: Descriptor, prefix: str, depth: int, seen: frozenset[str]) -> None:
        for field in desc.fields:
            path = prefix + field.name
            if field.type != FieldDescriptor.TYPE_MESSAGE:
                out.append(path)
            elif not _is_map(field) and depth < _MAX_DEPTH:
                sub = field.message_type
                if sub.full_name not in seen:
                    walk(sub, path + ".", depth + 1, seen | {sub.full_name})

    walk(_root(), "", 1, frozenset({_root().full_name}))
    return tuple(sorted(out))


def closest(word: str, candidates: Iterable[str]) -> str | None:
    """The candidate closest to ``word`` (difflib), or None when nothing is close."""
    pool = list(candidates)
    found = difflib.get_close_matches(word, pool, n=1, cutoff=0.6)
    if found:
        return found[0]
    # A typo in the last segment of a dotted path: compare segment-wise.
    if "." in word:
        head, _, tail = word.rpartition(".")
        same_head = [c for c in pool if c.rpartition(".")[0] == head]
        tails = difflib.get_close_matches(tail, [c.rpartition(".")[2] for c in same_head],
                                          n=1, cutoff=0.5)
        if tails:
            return f"{head}.{tails[0]}"
    return None
