"""Closed-loop concurrency: a level is a number of slots, each sending its next request when
the last one returned (perf_analyzer's ``--concurrency-range``). The default level kind."""

from __future__ import annotations

from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from tracker.errors import MeasurementError
from tracker.measure.kinds.load_kind import Level, LoadKind, Slots, closed_slot

if TYPE_CHECKING:
    from tracker.spec.sections import LoadSection
    from tracker.triton.model_config import ModelConfig


@dataclass(frozen=True)
class Concurrency(LoadKind):
    name: ClassVar[str] = "concurrency"
    level_key: ClassVar[str | None] = "concurrency"

    @classmethod
    def of(cls, config: ModelConfig, load: LoadSection) -> LoadKind | None:
        return None if load.request_rate else cls()

    def levels(self, load: LoadSection, override: Sequence[float] | None) -> list[Level]:
        values = override if override is not None else load.concurrency_levels()
        out = []
        for c in values:
            if int(c) != c or c < 1:
                raise MeasurementError(f"a concurrency level must be an integer >= 1, but got "
                                       f"{c}")
            out.append(Level(concurrency=int(c)))
        return out

    def split(self, level: Level, parts: int) -> list[Level]:
        """The concurrency divided as evenly as possible."""
        total = int(level.concurrency or 0)
        return [Level(concurrency=total // parts + (1 if k < total % parts else 0),
                      seed=level.seed + k) for k in range(parts)]

    def slots(self, gen: Slots, level: Level) -> list[Coroutine[Any, Any, None]]:
        slots = int(level.concurrency or 0)
        return [closed_slot(gen, k, slots) for k in range(slots)]
