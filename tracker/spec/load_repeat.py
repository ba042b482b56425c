"""``load.repeat``: a load whose requests repeat earlier ones, so that Triton's response cache
has something to hit (docs/measurement.md, "Repeated inputs"; the sequence is made by
tracker/measure/repeats.py)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from tracker.spec.model_section import SpecModel


class RepeatSection(SpecModel):
    """``{pct: 90}``: 90% of the requests repeat one of ``hot`` requests sent before; the
    others are distinct (``distinct`` of them per pass over the sequence: random data made
    that many times, or the rows of ``load.input_data`` after the first ``hot``)."""

    pct: Annotated[float, Field(ge=0, lt=100)]
    """The percent of requests that repeat a hot request."""
    hot: Annotated[int, Field(ge=1)] = 16
    """How many distinct requests are repeated."""
    distinct: Annotated[int, Field(ge=1)] = 20000
    """Distinct (never repeated) requests per pass over the sequence."""
    seed: Annotated[int, Field(ge=0)] = 0
    """Seed of the order in which repeats and distinct requests come."""
