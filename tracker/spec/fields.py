"""config.pbtxt field paths, read from the ModelConfig protobuf descriptor.

A knob in the study spec is named by its dotted path in Triton's ``ModelConfig`` message, e.g.
``max_batch_size``, ``instance_group.count``, ``dynamic_batching.max_queue_delay_microseconds``.
Repeated message fields (``instance_group``) are walked into their element type. Map fields are
not walked, except ``parameters.KEY`` (one key of the ``parameters`` map, whose string value
takes any scalar: how backends read options such as ``intra_op_thread_count``). A path is a
knob only when it ends on a scalar or enum field.

This is the one place that walks the schema: `resolve` (a path to its field descriptor, or a
ConfigError naming why not and the closest path), `config_field_paths` (the candidates for that
suggestion), `closest` and `enum_name` (``GPU`` for ``KIND_GPU``). The spec checks knobs with
it, and tracker/triton/field_paths.py reads and sets values in a ModelConfig with it. It knows
nothing of the spec or of Triton servers; it only reads the protobuf schema.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from typing import Literal

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from tritonclient.grpc import model_config_pb2

from tracker.errors import ConfigError
from tracker.spec.limits import index_problem

Kind = Literal["int", "float", "bool", "str", "enum", "param"]
PARAMETERS = "parameters"

#: Integer field types and the values each can hold.
INT_RANGES: dict[int, tuple[int, int]] = {
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
FLOAT_TYPES = frozenset({FieldDescriptor.TYPE_FLOAT, FieldDescriptor.TYPE_DOUBLE})

# How many fields deep `config_field_paths` enumerates (for suggestions); lookups walk any depth.
_MAX_DEPTH = 5


def enum_name(names: Iterable[str], value: str) -> str | None:
    """The enum value name that ``value`` stands for, case-insensitively: the full name or its
    last part(s) after an underscore (``GPU`` for ``KIND_GPU``); None when none fits."""
    wanted = value.upper()
    for name in names:
        if name == wanted or name.endswith("_" + wanted):
            return name
    return None


@dataclass(frozen=True)
class ConfigField:
    """A leaf field of ModelConfig: its dotted path, value kind and, for enums, the names."""

    path: str
    kind: Kind
    repeated: bool
    enum_names: tuple[str, ...] = ()
    minimum: int | None = None  #: an integer field's least value (its protobuf type's)
    maximum: int | None = None  #: an integer field's largest value (its protobuf type's)
    proto_type: str = ""  #: the protobuf type of an integer field: "int32", "uint64", ...

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
            return isinstance(value, str) and enum_name(self.enum_names, value) is not None
        return isinstance(value, str)

    def describe(self) -> str:
        """The expected value in words, for error messages."""
        if self.kind == "enum":
            return "one of " + ", ".join(repr(n) for n in self.enum_names)
        return {"int": "an integer", "float": "a number", "bool": "true or false",
                "str": "a string", "param": "a string, a number or true/false"}[self.kind]


def is_map(field: FieldDescriptor) -> bool:
    """Whether ``field`` is a protobuf map (``map<K, V>``)."""
    msg = field.message_type
    return msg is not None and bool(msg.GetOptions().map_entry)


def is_repeated(field: FieldDescriptor) -> bool:
    """Whether ``field`` is repeated (a list)."""
    # protobuf >= 5.28 has `is_repeated` and deprecates `label`; older ones only have `label`.
    flag = getattr(field, "is_repeated", None)
    if isinstance(flag, bool):
        return flag
    return bool(field.label == FieldDescriptor.LABEL_REPEATED)


def _root() -> Descriptor:
    desc: Descriptor = model_config_pb2.ModelConfig.DESCRIPTOR
    return desc


def _walk(desc: Descriptor, prefix: str, depth: int, seen: frozenset[str]) -> Iterator[str]:
    for field in desc.fields:
        path = prefix + field.name
        if field.type != FieldDescriptor.TYPE_MESSAGE:
            yield path
        elif not is_map(field) and depth < _MAX_DEPTH:
            sub = field.message_type
            if sub.full_name not in seen:
                yield from _walk(sub, path + ".", depth + 1, seen | {sub.full_name})


@cache
def config_field_paths() -> tuple[str, ...]:
    """Every leaf path up to a few fields deep, sorted (the candidates for suggestions)."""
    return tuple(sorted(_walk(_root(), "", 1, frozenset({_root().full_name}))))


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


def _unknown(path: str, why: str) -> ConfigError:
    close = closest(path, config_field_paths())
    hint = f"; did you mean `{close}`?" if close else ""
    return ConfigError(f"`{path}` is not a config.pbtxt field path ({why}){hint}")


_BRACKET = re.compile(r"\[(\d+)\]")


def canonical_path(path: str) -> str:
    """A field path with its element indices as segments: ``instance_group[1].count`` (how
    the spec may write it) -> ``instance_group.1.count`` (the knob's one name: MLflow refuses
    brackets in param names)."""
    return _BRACKET.sub(r".\1", path)


def path_parts(path: str) -> list[tuple[str, int | None]]:
    """The fields on the way with the element index each names:
    ``instance_group.1.count`` -> [(``instance_group``, 1), (``count``, None)]."""
    out: list[tuple[str, int | None]] = []
    for segment in canonical_path(path).split("."):
        if segment.isdigit() and out and out[-1][1] is None:
            out[-1] = (out[-1][0], int(segment))
        else:
            out.append((segment, None))
    return out


def plain_path(path: str) -> str:
    """``path`` without element indices: ``instance_group.1.count`` -> ``instance_group.count``
    (the rules of a field are the same for every element)."""
    return ".".join(name for name, _ in path_parts(path))


def resolve(path: str) -> FieldDescriptor | None:
    """The descriptor of the scalar (or enum, or repeated scalar) field at ``path``; None for
    ``parameters.KEY``. Raises ConfigError for a path that does not name such a field, saying
    why and suggesting the closest path, or whose element index is beyond
    :data:`~tracker.spec.limits.MAX_ELEMENTS`."""
    if not all(path.split(".")):
        raise _unknown(path, "empty segment")
    indexed = path_parts(path)
    too_far = index_problem([i for _, i in indexed if i is not None])
    if too_far is not None:
        raise ConfigError(f"`{path}`: {too_far}")
    parts = [name for name, _ in indexed]
    if parts[0] == PARAMETERS:
        if len(parts) != 2:
            raise ConfigError(f"`{path}`: a parameters path is `parameters.KEY`, one key, "
                              "e.g. `parameters.intra_op_thread_count`")
        return None
    if indexed[-1][1] is not None:
        raise _unknown(path, "an index names an element of a list of messages, not a value")
    desc = _root()
    for part, index in indexed[:-1]:
        field = desc.fields_by_name.get(part)
        if field is None:
            raise _unknown(path, f"`{desc.name}` has no field `{part}`")
        if field.type != FieldDescriptor.TYPE_MESSAGE:
            raise _unknown(path, f"`{part}` is a value and has no fields")
        if is_map(field):
            raise _unknown(path, f"`{part}` is a map")
        if index is not None and not is_repeated(field):
            raise _unknown(path, f"`{part}` is one message, not a list: it takes no index")
        desc = field.message_type
    leaf = desc.fields_by_name.get(parts[-1])
    if leaf is None:
        raise _unknown(path, f"`{desc.name}` has no field `{parts[-1]}`")
    if leaf.type == FieldDescriptor.TYPE_MESSAGE:
        raise _unknown(path, f"`{parts[-1]}` is a message, not a value")
    return leaf


def _leaf(path: str, field: FieldDescriptor) -> ConfigField:
    kind: Kind
    names: tuple[str, ...] = ()
    if field.type in INT_RANGES:
        kind = "int"
    elif field.type in FLOAT_TYPES:
        kind = "float"
    elif field.type == FieldDescriptor.TYPE_BOOL:
        kind = "bool"
    elif field.type == FieldDescriptor.TYPE_ENUM:
        kind = "enum"
        names = tuple(v.name for v in field.enum_type.values)
    else:
        kind = "str"
    low, high = INT_RANGES.get(field.type, (None, None))
    return ConfigField(path=path, kind=kind, repeated=is_repeated(field), enum_names=names,
                       minimum=low, maximum=high,
                       proto_type=_TYPE_NAMES.get(field.type, "") if kind == "int" else "")


#: protobuf's names of the integer types, for messages ("an int32 field")
_TYPE_NAMES: dict[int, str] = {
    number: name.removeprefix("TYPE_").lower() for name, number in vars(FieldDescriptor).items()
    if name.startswith("TYPE_") and isinstance(number, int) and number in INT_RANGES}


#: the sequence batcher's strategy, a choice between the two messages of one ``oneof``
#: (``direct {}`` / ``oldest {}``): the one knob that is not a scalar field of the schema
#: (tracker/triton/sequence.py applies it)
SEQUENCE_STRATEGY = "sequence_batching.strategy"


@cache
def config_field(path: str) -> ConfigField | None:
    """The leaf field at ``path`` (dotted), or None when no scalar/enum field has that path."""
    if path == SEQUENCE_STRATEGY:
        return ConfigField(path=path, kind="enum", repeated=False,
                           enum_names=("DIRECT", "OLDEST"))
    try:
        field = resolve(path)
    except ConfigError:
        return None
    if field is None:
        return ConfigField(path=path, kind="param", repeated=False)
    return _leaf(path, field)


# ---- knobs kept in a model directory's JSON file, not in config.pbtxt --------------------------

#: between a file and a key: ``model.json:gpu_memory_utilization``
FILE_KNOB_SEP = ":"
FILE_KNOB_SUFFIX = ".json"


def file_knob(key: str) -> tuple[str, str] | None:
    """(file, key) of a knob that names a JSON file of the model directory and one of its
    top-level keys (``model.json:max_num_seqs``, ``1/model.json:max_num_seqs``); None for any
    other knob. Only the form is read here: :func:`file_knob_problem` says what is wrong with
    it, tracker/triton/formats/json_knobs.py finds the file and the key."""
    file, sep, name = key.partition(FILE_KNOB_SEP)
    if not sep:
        return None
    return file, name


def file_knob_problem(key: str) -> str | None:
    """Why ``key`` (a ``FILE:KEY`` knob) is not one, or None when its form is right."""
    found = file_knob(key)
    if found is None:
        return None
    file, name = found
    form = f"a file knob is 'FILE{FILE_KNOB_SUFFIX}:KEY' (e.g. 'model.json:max_num_seqs')"
    if not file.endswith(FILE_KNOB_SUFFIX) or file == FILE_KNOB_SUFFIX:
        return f"{form}, a JSON file of the model directory, but the file part is {file!r}"
    if not name:
        return f"{form}, but the key part is empty"
    parts = file.split("/")
    if file.startswith("/") or any(p in ("", ".", "..") for p in parts):
        return (f"{form}, the file relative to the model directory without '.' or '..', but "
                f"got {file!r}")
    return None
