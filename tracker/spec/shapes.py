"""The value shapes of the study spec: a concurrency range (``{start, stop}``), a constraint's
bound (``{max, min}``), a search range (``{low, high, step, log}``), and the choice between a
list (or one value) and a range that ``load.concurrency`` and ``search.space`` share."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, TypeAlias

from pydantic import BaseModel, BeforeValidator, Field, model_validator

from tracker.spec.messages import problem
from tracker.spec.model_section import SpecModel
from tracker.spec.space_rules import check_range, parse_number

PosInt = Annotated[int, Field(ge=1)]
PosFloat = Annotated[float, Field(gt=0)]
Scalar: TypeAlias = bool | int | float | str


def list_or_range(value: object) -> str:
    """The tag of a list-or-range value: ``@range`` for a mapping, else ``@list``."""
    return "@range" if isinstance(value, Mapping | BaseModel) else "@list"


def as_list(value: object) -> object:
    """A single scalar stands for a one-element list (a pinned value)."""
    return value if isinstance(value, list | Mapping | BaseModel) else [value]


class ConcurrencyRange(SpecModel):
    """``{start: 1, stop: 64}``: start, doubling while <= stop (1, 2, 4, ..., 64)."""

    start: PosInt = 1
    """The first level."""
    stop: PosInt
    """The last level at most: levels double from start while not above stop."""

    @model_validator(mode="after")
    def _order(self) -> ConcurrencyRange:
        if self.start > self.stop:
            raise problem(f"`start <= stop` must hold, but got (start={self.start}, "
                          f"stop={self.stop})")
        return self

    def levels(self) -> list[int]:
        out, level = [], self.start
        while level <= self.stop:
            out.append(level)
            level *= 2
        return out


class Bound(SpecModel):
    """A constraint on one metric: ``{max: 10}``, ``{min: 100}`` or both."""

    max: float | None = None
    """The metric's largest allowed value."""
    min: float | None = None
    """The metric's smallest allowed value."""

    @model_validator(mode="after")
    def _some(self) -> Bound:
        if self.max is None and self.min is None:
            raise problem("needs `max` or `min` (or both), e.g. {max: 10}")
        if self.max is not None and self.min is not None and self.min > self.max:
            raise problem(f"`min <= max` must hold, but got (min={self.min:g}, max={self.max:g})")
        return self


class Range(SpecModel):
    """A numeric search range: ``{low: 1, high: 64, step: 1, log: false}``."""

    low: Annotated[int | float, BeforeValidator(parse_number)]
    """The smallest value."""
    high: Annotated[int | float, BeforeValidator(parse_number)]
    """The largest value (low <= high)."""
    step: Annotated[int | float | None, BeforeValidator(parse_number)] = None
    """The spacing of the values (high - low a multiple of it); none: every integer, or continuous
    for a float range."""
    log: bool = False
    """Sample on a log scale (low > 0, no step)."""

    @model_validator(mode="after")
    def _valid(self) -> Range:
        check_range(self.low, self.high, self.step, self.log)
        return self

    @property
    def is_int(self) -> bool:
        """True when low, high and step are all integers (an integer range)."""
        return all(isinstance(v, int) for v in (self.low, self.high, self.step)
                   if v is not None)
