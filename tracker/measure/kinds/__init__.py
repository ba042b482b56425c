"""Load kinds: the table, and which kinds an entry's load uses. The interface is in
load_kind.py (what a level is, how a slot issues requests, what it records, which metrics it
adds); a new kind is one module with a :class:`LoadKind` subclass and one entry in
:data:`KINDS`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tracker.errors import MeasurementError
from tracker.measure.kinds.concurrency import Concurrency
from tracker.measure.kinds.load_kind import LoadKind
from tracker.measure.kinds.priorities import Priorities
from tracker.measure.kinds.rate import RequestRate
from tracker.measure.kinds.sequences import Sequences
from tracker.measure.kinds.streaming import Streaming
from tracker.measure.kinds.trace import TraceReplay

if TYPE_CHECKING:
    from tracker.spec.sections import LoadSection
    from tracker.triton.model_config import ModelConfig

#: every load kind, in the order kinds_for asks them (a later level kind wins)
KINDS: dict[str, type[LoadKind]] = {
    kind.name: kind for kind in (Concurrency, RequestRate, TraceReplay, Sequences, Streaming,
                                 Priorities)}


def kinds_for(config: ModelConfig, load: LoadSection) -> tuple[LoadKind, ...]:
    """The kinds an entry's load uses: its level kind first, then its request kinds."""
    found = [k for k in (kind.of(config, load) for kind in KINDS.values()) if k is not None]
    levels = [k for k in found if k.level_key is not None]
    if not levels:
        raise MeasurementError(f"no load kind gives model {str(config.name)!r} its levels "
                               f"(kinds: {list(KINDS)})")
    return (levels[-1], *(k for k in found if k.level_key is None))


def level_kind(kinds: tuple[LoadKind, ...]) -> LoadKind:
    """The kind that says what a level is (the first of ``kinds``, by kinds_for's order)."""
    if not kinds or kinds[0].level_key is None:
        raise MeasurementError(f"a load needs a level kind first, but got "
                               f"{[k.name for k in kinds]}")
    return kinds[0]


__all__ = ["KINDS", "Concurrency", "LoadKind", "Priorities", "RequestRate", "Sequences",
           "Streaming", "TraceReplay", "kinds_for", "level_kind"]
