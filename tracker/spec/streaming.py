"""``load.stream``: how a streaming (decoupled) model is measured, and the lengths of what it
is sent and asked to generate (docs/streaming.md).

A decoupled model (``model_transaction_policy { decoupled: true }``) is streamed whatever this
section says (``enabled: auto``); the section says what a token is and, optionally, draws the
length of a prompt input and of an output-length input per request, the way AIPerf's
``--synthetic-input-tokens-mean/-stddev`` and ``--output-tokens-mean/-stddev`` do: a fixed
number, a uniform ``{low, high}`` range, or a normal ``{mean, stddev}`` (rounded, at least 1).
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

import numpy as np
from pydantic import BeforeValidator, Field, model_validator

from tracker.spec.messages import problem, show
from tracker.spec.model_section import SpecModel

PosInt = Annotated[int, Field(ge=1)]


def _as_length(value: object) -> object:
    """``128`` stands for ``{low: 128, high: 128}`` (a fixed length)."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 1:
            raise problem(f"a length must be >= 1, but got {value}")
        return {"low": value, "high": value}
    return value


class TokenLength(SpecModel):
    """A length per request: ``128``, ``{low: 32, high: 256}`` or ``{mean: 128, stddev: 16}``."""

    low: PosInt | None = None
    """A uniform range's smallest length."""
    high: PosInt | None = None
    """A uniform range's largest length."""
    mean: Annotated[float, Field(gt=0)] | None = None
    """A normal length's mean (rounded, at least 1)."""
    stddev: Annotated[float, Field(ge=0)] | None = None
    """A normal length's standard deviation."""

    @model_validator(mode="after")
    def _one_form(self) -> TokenLength:
        ranged = self.low is not None or self.high is not None
        normal = self.mean is not None or self.stddev is not None
        if ranged == normal:
            raise problem("must be a number, {low, high} (uniform) or {mean, stddev} "
                          f"(normal), but got {show(self.model_dump(exclude_none=True))}")
        if ranged and (self.low is None or self.high is None):
            raise problem("a range needs both `low` and `high`")
        if ranged and self.low is not None and self.high is not None and self.low > self.high:
            raise problem(f"`low <= high` must hold, but got (low={self.low}, high={self.high})")
        if normal and self.mean is None:
            raise problem("a normal length needs `mean` (and `stddev`, default 0)")
        return self

    @property
    def largest(self) -> int:
        """The longest length it can draw (a normal one: mean + 4 stddev)."""
        if self.high is not None:
            return self.high
        return max(1, round((self.mean or 1) + 4 * (self.stddev or 0)))

    def words(self) -> str:
        if self.low is not None and self.low == self.high:
            return str(self.low)
        if self.low is not None:
            return f"{self.low}-{self.high}"
        return f"{self.mean:g}±{self.stddev or 0:g}"

    def draw(self, rng: np.random.Generator, n: int) -> list[int]:
        """``n`` lengths."""
        if self.low is not None and self.high is not None:
            return [int(v) for v in rng.integers(self.low, self.high + 1, size=n)]
        values = rng.normal(self.mean or 1.0, self.stddev or 0.0, size=n)
        return [max(1, round(float(v))) if math.isfinite(v) else 1 for v in values]


Length = Annotated[TokenLength, BeforeValidator(_as_length)]


class LengthInput(SpecModel):
    """Which model input carries a drawn length: ``{input: PROMPT, length: 128}``. For the
    prompt, the input's variable dimension (-1) gets that many token ids (a string input: that
    many words); for the output length, the input holds the number itself."""

    input: Annotated[str, Field(min_length=1)]
    """The model input that carries the length."""
    length: Length
    """A number, {low, high} (uniform) or {mean, stddev} (normal)."""


class StreamSection(SpecModel):
    """How a streaming model is measured (``load.stream``)."""

    # auto: stream when the model is decoupled; true: stream any model over gRPC streams
    enabled: bool | Literal["auto"] = "auto"
    """auto: stream decoupled models; true: stream any model over gRPC streams; false."""
    # what counts as a token: "responses" (each response with outputs), or an output's name
    # (its element count per response)
    tokens: Annotated[str, Field(min_length=1)] = "responses"
    """What counts as a token: responses (each response with outputs), or an output's name (its
    element count per response)."""
    input_tokens: LengthInput | None = None
    """Draw each request's prompt length into this input."""
    output_tokens: LengthInput | None = None
    """Draw each request's output length into this input."""
    samples: PosInt = 100
    """Requests drawn (and cycled) when lengths are drawn."""
    seed: Annotated[int, Field(ge=0)] = 0
    """Seed of the drawn lengths."""

    @model_validator(mode="after")
    def _distinct(self) -> StreamSection:
        if (self.input_tokens is not None and self.output_tokens is not None
                and self.input_tokens.input == self.output_tokens.input):
            raise problem("input_tokens.input and output_tokens.input must name different "
                          f"inputs, but both are {show(self.input_tokens.input)}")
        return self

    @property
    def drawn(self) -> dict[str, LengthInput]:
        """``{"input_tokens": ..., "output_tokens": ...}`` for the lengths that are set."""
        out = {}
        if self.input_tokens is not None:
            out["input_tokens"] = self.input_tokens
        if self.output_tokens is not None:
            out["output_tokens"] = self.output_tokens
        return out
