"""``load.sequence``: the sequences sent to a stateful model (docs/stateful.md).

A model with a sequence batcher is sent sequences: each load slot runs one sequence after
another, every request carrying the sequence's correlation ID and its start/end flags. The
length of a sequence (its number of requests) is a fixed number or a uniform ``{low, high}``
range drawn per sequence from ``seed`` (the study's ``search.seed`` when this one is not set,
else 0). ``ids`` says which kind of correlation ID to send (``auto``: what the model's CORRID
control takes). A ``load.input_data`` file in perf_analyzer's sequence layout (each entry of
``data`` a list of steps) gives the sequences themselves instead, and then their lengths.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BeforeValidator, Field

from tracker.spec.messages import problem
from tracker.spec.model_section import SpecModel
from tracker.spec.streaming import TokenLength

PosInt = Annotated[int, Field(ge=1)]

#: perf_analyzer's default --sequence-length
DEFAULT_LENGTH = 20
#: perf_analyzer's default --num-of-sequences (sequences kept open in request-rate mode)
DEFAULT_ACTIVE = 4


def _as_length(value: object) -> object:
    """``8`` stands for ``{low: 8, high: 8}``; a length below 1 is refused with its value."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 1:
            raise problem(f"a sequence length must be >= 1 (requests per sequence), but got "
                          f"{value}")
        return {"low": value, "high": value}
    if isinstance(value, dict) and "mean" in value:
        raise problem("a sequence length is a number or {low, high}, but got a {mean, stddev}")
    return value


SequenceLength = Annotated[TokenLength, BeforeValidator(_as_length)]


class SequenceSection(SpecModel):
    """How a stateful model's sequences are made (``load.sequence``)."""

    length: SequenceLength = Field(
        default_factory=lambda: TokenLength(low=DEFAULT_LENGTH, high=DEFAULT_LENGTH))
    """Steps per sequence: a number, or {low, high} drawn per sequence."""
    seed: Annotated[int, Field(ge=0)] | None = None
    """The seed of the drawn lengths (default: search.seed, else 0)."""
    active: PosInt = DEFAULT_ACTIVE
    """Request-rate mode: sequences open at once (perf_analyzer's --num-of-sequences)."""
    ids: Literal["auto", "uint", "string"] = "auto"
    """Correlation ID kind: auto (what the model's CORRID control takes), uint or string."""
