"""The ``model`` section of the study spec: which model (or repository of models) to tune.

Here beside the base model every section shares (:class:`SpecModel`) and the path rule
(relative paths from the spec file's folder); :mod:`tracker.spec.sections` holds the rest.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from tracker.spec.messages import Problems, problem, show

_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


class SpecModel(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, use_attribute_docstrings=True)


def resolve_path(value: Path | None, info: ValidationInfo) -> Path | None:
    """Relative paths are taken from the spec file's folder (context ``base_dir``)."""
    if value is None:
        return None
    value = value.expanduser()
    base = (info.context or {}).get("base_dir")
    if base is not None and not value.is_absolute():
        value = Path(base) / value
    return Path(os.path.normpath(value))


class ModelSection(SpecModel):
    """The model to tune: its Triton name, its file and, optionally, how to make it.

    ``path`` may be a Triton model repository (docs/pipelines.md): ``name`` is then the entry
    model (an ensemble, a BLS model, any model), or a list of independent entry models served
    together; ``composing`` lists the models a BLS entry calls (an ensemble's steps are read
    from its config)."""

    name: str | Annotated[list[str], Field(min_length=1)]
    """Triton model name (also the default study, experiment and registered model); a list:
    entry models measured together."""
    path: Annotated[Path, Field(strict=False)]
    """An .onnx file, a Triton model directory of any backend, or a model repository (a
    pipeline)."""
    config: Annotated[Path | None, Field(strict=False)] = None
    """A base config.pbtxt whose fields win over the defaults derived from the model."""
    build: Annotated[Path | None, Field(strict=False)] = None
    """A Python script run as `python BUILD OUTPUT_PATH` to make `path` when it is missing."""
    composing: list[str] = Field(default_factory=list)
    """With a repository: the models a BLS entry model calls (an ensemble's steps are read from its
    config)."""

    @field_validator("name", "composing")
    @classmethod
    def _name(cls, value: str | list[str]) -> str | list[str]:
        for one in [value] if isinstance(value, str) else value:
            if not _NAME.match(one):
                raise problem("must be a Triton model name (letters, digits, '_', '.', '-'), "
                              f"but got {show(one)}")
        if isinstance(value, list) and len(set(value)) != len(value):
            raise problem(f"must name each model once, but got {show(value)}")
        return value

    #: several independent entry models: each one's weight in the study's objective
    #: (weighted_gain, Model Analyzer's ``weighting``); unset: 1 each
    weights: dict[str, Annotated[float, Field(gt=0, allow_inf_nan=False)]] | None = None
    """Several entry models: each one's weight in weighted_gain (unset: 1 each)."""

    @model_validator(mode="after")
    def _entries(self) -> ModelSection:
        items: list[tuple[str, str]] = []
        if len(self.names) > 1 and self.composing:
            items.append(("composing", "lists the models one BLS entry calls, so it needs one "
                          f"entry model, but model.name gives {len(self.names)}: "
                          f"{show(self.name)}"))
        if self.weights is not None:
            if len(self.names) < 2:
                items.append(("weights", "weighs several entry models against each other; "
                              "give model.name as a list of them, or remove weights"))
            items.extend((f"weights.{k}", f"names no entry model (model.name: "
                          f"{show(self.names)})") for k in self.weights if k not in self.names)
        if items:
            raise Problems(items)
        return self

    @property
    def names(self) -> list[str]:
        """The entry models: one, or several served together."""
        return [self.name] if isinstance(self.name, str) else list(self.name)

    @property
    def label(self) -> str:
        """One name for the study: the model's, or the entries' joined with '+'."""
        return "+".join(self.names)

    @field_validator("path", "config", "build")
    @classmethod
    def _paths(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        value = resolve_path(value, info)
        if value is None:
            return None
        if info.field_name == "path" and value.is_file() and value.suffix != ".onnx":
            raise problem(f"must be an .onnx file or a Triton model directory, but got {value}")
        if info.field_name in ("config", "build") and not value.is_file():
            raise problem(f"file not found: {value}")
        return value
