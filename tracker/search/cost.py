"""Replicas and cost at a configuration's capacity (the spec's ``capacity`` section).

Pure arithmetic: the replicas that serve ``target_rps`` with ``headroom_pct`` spare when each
holds ``capacity`` requests/s, and what a million inferences cost on one replica running at
its capacity (``price_per_hour`` / inferences per hour x 10^6; an inference is one item of a
batch, so a request of ``batch_size`` 4 is 4 inferences)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from tracker.errors import StudyError

if TYPE_CHECKING:
    from tracker.spec.capacity import CapacitySection


def replicas(target_rps: float, capacity_rps: float, headroom_pct: float = 0.0) -> int:
    """Servers needed for ``target_rps`` plus ``headroom_pct`` at ``capacity_rps`` each."""
    if capacity_rps <= 0:
        raise StudyError(f"`capacity > 0` must hold to size replicas, but got {capacity_rps}")
    need = target_rps * (1 + headroom_pct / 100) / capacity_rps
    return max(1, math.ceil(need - 1e-9))


def cost_per_million(price_per_hour: float, capacity_rps: float, batch_size: int = 1) -> float:
    """What a million inferences cost on one replica at ``capacity_rps`` requests/s."""
    if capacity_rps <= 0:
        raise StudyError(f"`capacity > 0` must hold to price inferences, but got {capacity_rps}")
    return price_per_hour / (capacity_rps * batch_size * 3600) * 1e6


def deployment(section: CapacitySection | None, capacity_rps: float,
               batch_size: int = 1) -> dict[str, float]:
    """``replicas`` and ``cost_per_million`` (the catalog's names) for a trial of capacity
    ``capacity_rps``: those the section asks for; none at capacity 0 or without a section."""
    if section is None or capacity_rps <= 0:
        return {}
    out: dict[str, float] = {}
    if section.target_rps is not None:
        out["replicas"] = float(replicas(section.target_rps, capacity_rps,
                                         section.headroom_pct))
    if section.price_per_hour is not None:
        out["cost_per_million"] = cost_per_million(section.price_per_hour, capacity_rps,
                                                   batch_size)
    return out
