"""The study spec's fields as table rows, read from its pydantic models (tracker/cli/reference.py
puts them into docs/spec.md): each field's type, default, allowed values and description (the
docstring under the field)."""

from __future__ import annotations

import types
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import annotated_types as at
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

Row = tuple[str, str, str, str, str]
NAMES = {int: "integer", float: "number", str: "string", bool: "boolean", Path: "path",
         type(None): "none", object: "any"}


def _bounds(meta: object) -> list[str]:
    """Allowed values a constraint object says (``Field(ge=1)``, ``annotated_types.Gt``)."""
    if isinstance(meta, FieldInfo):
        return [b for m in meta.metadata for b in _bounds(m)]
    for kind, attr, sign in ((at.Ge, "ge", ">="), (at.Gt, "gt", ">"), (at.Le, "le", "<="),
                             (at.Lt, "lt", "<")):
        if isinstance(meta, kind):
            return [f"{sign} {getattr(meta, attr)}"]
    if isinstance(meta, at.MinLen) and meta.min_length > 0:
        return [f"at least {meta.min_length} {'entry' if meta.min_length == 1 else 'entries'}"]
    return []


class Walk:
    """Walks one field's type; collects the model classes it reaches (each gets a table)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.models: list[tuple[str, type[BaseModel]]] = []

    def words(self, tp: Any, where: str) -> tuple[str, list[str]]:
        """(type in words, allowed values) of ``tp``; ``where`` is the path of a value of it."""
        origin, args = get_origin(tp), get_args(tp)
        if origin is Annotated:
            text, allowed = self.words(args[0], where)
            bounds = [b for m in args[1:] for b in _bounds(m)]
            if args[0] is str:  # a string's minimum length
                bounds = ["not empty" if b.startswith("at least 1 ") else b for b in bounds]
            return text, allowed + bounds
        if origin in (Union, types.UnionType):
            parts = [self.words(a, where) for a in args if a is not type(None)]
            texts = list(dict.fromkeys(t for t, _ in parts))
            return " or ".join(texts), [a for _, allowed in parts for a in allowed]
        if origin is Literal:
            kinds = list(dict.fromkeys(NAMES.get(type(a), type(a).__name__) for a in args))
            return " or ".join(kinds), [", ".join(f"`{_value(a)}`" for a in args)]
        if origin is list:
            inner, allowed = self.words(args[0], where + "[]")
            return f"list of {inner}", [f"each {a}" for a in allowed]
        if origin is dict:
            key, _ = self.words(args[0], where)
            inner, allowed = self.words(args[1], where + ".<key>")
            return f"mapping of {key} to {inner}", [f"each value {a}" for a in allowed]
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            self.models.append((where, tp))
            return ("{" + ", ".join(f.alias or n for n, f in tp.model_fields.items()) + "}",
                    [f"see `{where}`"])
        if isinstance(tp, type) and issubclass(tp, Path):
            return "path", []
        return NAMES.get(tp, getattr(tp, "__name__", str(tp))), []


def _value(value: object) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, BaseModel):
        return _value(value.model_dump(exclude_defaults=True)) if value.model_fields_set else "{}"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, float) and value == int(value):
        return str(int(value))
    return str(value)


def _default(field: FieldInfo) -> str:
    if field.is_required():
        return "required"
    value = field.get_default(call_default_factory=True, validated_data={})
    if isinstance(value, BaseModel):
        return "the defaults below"
    if value is None:
        return "none"
    return f"`{_value(value)}`" if value is not PydanticUndefined else ""


def field_row(name: str, field: FieldInfo, walk: Walk) -> Row:
    where = f"{walk.path}.{name}" if walk.path else name
    text, allowed = walk.words(field.annotation, where)
    bounds = [b for m in field.metadata for b in _bounds(m)]
    if field.annotation is str:
        bounds = ["not empty" if b.startswith("at least 1 ") else b for b in bounds]
    if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
        text = "section"
    return (f"`{name}`", text, _default(field), "; ".join(dict.fromkeys(allowed + bounds)),
            " ".join((field.description or "").split()))


def spec_tables(root: type[BaseModel]) -> list[tuple[str, list[Row]]]:
    """(path, rows) for ``root`` (path ``(top level)``) and every model class it reaches, each
    once, in the order first reached; a class reached again keeps its first path."""
    todo: list[tuple[str, type[BaseModel]]] = [("", root)]
    table_of: dict[type[BaseModel], str] = {}
    reached: list[tuple[str, type[BaseModel]]] = []
    out = []
    while todo:
        path, model = todo.pop(0)
        if model in table_of:
            continue
        table_of[model] = path
        rows, found = [], []
        for name, field in model.model_fields.items():
            walk = Walk(path)
            rows.append(field_row(field.alias or name, field, walk))  # as the YAML spells it
            found.extend(walk.models)
        out.append((path or "(top level)", rows))
        reached.extend(found)
        todo[:0] = found
    # a class reached again is described once: "see" names the table it has
    moved = {f"see `{where}`": f"see `{table_of[tp]}`" for where, tp in reached
             if table_of[tp] != where}
    return [(path, [(*row[:3], _see(row[3], moved), row[4]) for row in rows])
            for path, rows in out]


def _see(allowed: str, moved: dict[str, str]) -> str:
    for old, new in moved.items():
        allowed = allowed.replace(old, new)
    return allowed


def undocumented(root: type[BaseModel]) -> list[str]:
    """The spec paths of fields without a description (a docstring under the field)."""
    return [f"{path}.{row[0].strip('`')}" if path != "(top level)" else row[0].strip("`")
            for path, rows in spec_tables(root) for row in rows if not row[4]]
