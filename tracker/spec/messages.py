"""Turn pydantic's validation errors into one plain line per problem.

Each line names the field path as the user wrote it (``load.concurrency[2]``,
``search.space.instance_group.count``) and the bad value, and an unknown key gets the closest
valid one. Pydantic's own text (URLs, "Input should be ...") never reaches the user.

Validators of the sections (tracker/spec/sections.py and the modules beside it) report
problems that need their own sub-paths, or several at once, by raising :class:`Problems`.
"""

from __future__ import annotations

import types
from collections.abc import Mapping, Sequence
from inspect import isclass
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, Tag, ValidationError
from pydantic_core import ErrorDetails

from tracker.spec.fields import closest

# Tags of the discriminated unions in the sections start with this; they are not user-visible keys.
TAG_PREFIX = "@"

#: fields that were renamed, old path -> new path: a spec that still writes the old name is
#: told the new one (an error, never a silent alias)
RENAMED: dict[str, str] = {"server.backend": "server.serving"}


class Problems(ValueError):
    """Raised by a validator: one or more (sub-path, message) pairs under the validated field.

    An empty sub-path means the field itself; ``"url"`` means ``<field>.url``.
    """

    def __init__(self, items: Sequence[tuple[str, str]]) -> None:
        self.items = list(items)
        super().__init__("; ".join(f"{p}: {m}" if p else m for p, m in self.items))


def problem(message: str, sub: str = "") -> Problems:
    """A single problem, at the validated field or at ``sub`` below it."""
    return Problems([(sub, message)])


def show(value: object, limit: int = 80) -> str:
    """A value the way a YAML writer would read it, cut to ``limit`` characters."""
    if value is None:
        text = "null"
    elif isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, str):
        text = repr(value)
    else:
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _is_tag(elem: object) -> bool:
    return isinstance(elem, str) and (elem.startswith(TAG_PREFIX) or elem == "[key]")


def field_path(loc: Sequence[int | str]) -> str:
    """``("load", "concurrency", "@list", 2)`` -> ``load.concurrency[2]``."""
    out = ""
    for elem in loc:
        if _is_tag(elem):
            continue
        if isinstance(elem, int):
            out += f"[{elem}]"
        else:
            out += ("." if out else "") + str(elem)
    return out


def _unwrap(tp: Any) -> Any:
    while get_origin(tp) is Annotated:
        tp = get_args(tp)[0]
    return tp


def _tag_of(tp: Any) -> str | None:
    if get_origin(tp) is Annotated:
        for meta in get_args(tp)[1:]:
            if isinstance(meta, Tag):
                return meta.tag
    return None


def _step(tp: Any, elem: int | str) -> Any:
    """The type found one location element below ``tp`` (None when unknown)."""
    tp = _unwrap(tp)
    if get_origin(tp) in (Union, types.UnionType):
        members = [m for m in get_args(tp) if m is not type(None)]
        if isinstance(elem, str) and elem.startswith(TAG_PREFIX):
            return next((m for m in members if _tag_of(m) == elem), None)
        for member in members:
            found = _step(member, elem)
            if found is not None:
                return found
        return None
    tp = _unwrap(tp)
    if isclass(tp) and issubclass(tp, BaseModel):
        field = tp.model_fields.get(str(elem))
        return field.annotation if field is not None else None
    origin = get_origin(tp)
    if origin in (dict, Mapping) and isinstance(elem, str):
        return get_args(tp)[1]
    if origin in (list, tuple, Sequence) and isinstance(elem, int):
        return get_args(tp)[0]
    return None


def model_at(root: type[BaseModel], loc: Sequence[int | str]) -> type[BaseModel] | None:
    """The pydantic model class found by following ``loc`` from ``root``."""
    tp: Any = root
    for elem in loc:
        if elem == "[key]":
            continue
        tp = _step(tp, elem)
        if tp is None:
            return None
    if get_origin(tp) in (Union, types.UnionType):
        tp = next((m for m in get_args(tp) if isclass(_unwrap(m))
                   and issubclass(_unwrap(m), BaseModel)), None)
    tp = _unwrap(tp)
    return tp if isclass(tp) and issubclass(tp, BaseModel) else None


def _unknown_field(root: type[BaseModel], loc: Sequence[int | str]) -> str:
    model = model_at(root, loc[:-1])
    names = list(model.model_fields) if model is not None else []
    guess = closest(str(loc[-1]), names) if names else None
    if guess:
        return f"unknown field; did you mean {guess!r}?"
    if names:
        return "unknown field; valid fields: " + ", ".join(names)
    return "unknown field"


_KIND = {
    "int_type": "an integer", "int_parsing": "an integer", "int_from_float": "an integer",
    "float_type": "a number", "float_parsing": "a number", "finite_number": "a finite number",
    "bool_type": "true or false", "bool_parsing": "true or false",
    "string_type": "a string", "path_type": "a file path",
    "dict_type": "a mapping (key: value)", "model_type": "a mapping (key: value)",
    "model_attributes_type": "a mapping (key: value)",
    "list_type": "a list", "tuple_type": "a list",
}
_BOUND = {"greater_than": ("gt", ">"), "greater_than_equal": ("ge", ">="),
          "less_than": ("lt", "<"), "less_than_equal": ("le", "<=")}


def _describe(err: ErrorDetails) -> str:
    kind = err["type"]
    ctx: dict[str, Any] = dict(err.get("ctx") or {})
    got = show(err.get("input"))
    if kind == "missing":
        return "required field is missing"
    if kind in _KIND:
        return f"must be {_KIND[kind]}, but got {got}"
    if kind == "literal_error":
        return f"must be {ctx.get('expected')}, but got {got}"
    if kind in _BOUND:
        key, sign = _BOUND[kind]
        return f"must be {sign} {ctx.get(key)}, but got {got}"
    if kind == "too_short":
        if ctx.get("min_length") == 1:
            return "must not be empty"
        return f"needs at least {ctx.get('min_length')} entries, but got {ctx.get('actual_length')}"
    if kind == "too_long":
        return f"takes at most {ctx.get('max_length')} entries, but got {ctx.get('actual_length')}"
    if kind == "string_too_short":
        return "must not be empty"
    if kind in ("value_error", "assertion_error"):
        return str(ctx.get("error"))
    return f"{err['msg'][0].lower()}{err['msg'][1:]}, but got {got}"


def join_path(path: str, sub: str) -> str:
    """``join_path('search.space.x', '[1]')`` -> ``search.space.x[1]``; else joined by a dot."""
    if not path or not sub:
        return path or sub
    return path + sub if sub.startswith("[") else f"{path}.{sub}"


def messages(exc: ValidationError, root: type[BaseModel]) -> list[str]:
    """One line per problem in ``exc``, each starting with the field path."""
    out: list[str] = []
    for err in exc.errors():
        loc = err["loc"]
        path = field_path(loc) or "(top level)"
        cause = (err.get("ctx") or {}).get("error")
        if err["type"] == "value_error" and isinstance(cause, Problems):
            for sub, text in cause.items:
                full = join_path(field_path(loc), sub) or "(top level)"
                out.append(f"{full}: {text}")
            continue
        text = _unknown_field(root, loc) if err["type"] == "extra_forbidden" else _describe(err)
        line = f"{path}: {text}"
        if err["type"] == "extra_forbidden" and path in RENAMED:
            line = f"{path} was renamed {RENAMED[path]} (the same values)"
        if line not in out:
            out.append(line)
    return out
