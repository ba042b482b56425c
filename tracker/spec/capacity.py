"""``capacity``: what a deployment at a configuration's capacity takes (docs/capacity.md).

``{target_rps: 3000, price_per_hour: 2.9, headroom_pct: 20}``: each trial measured for
``objectives: {perf_capacity: maximize}`` gets the replicas that serve ``target_rps`` with
``headroom_pct`` to spare, and the cost per million inferences of one replica at its capacity
(tracker/search/cost.py). Without a price, capacity and replicas alone."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from tracker.spec.model_section import SpecModel


class CapacitySection(SpecModel):
    """The traffic a deployment must serve and what a replica costs."""

    target_rps: Annotated[float, Field(gt=0)] | None = None
    """Requests per second the deployment must serve (sets the replicas)."""
    price_per_hour: Annotated[float, Field(ge=0)] | None = None
    """The price of one replica per hour, in your currency."""
    headroom_pct: Annotated[float, Field(ge=0, le=1000)] = 20.0
    """Capacity kept spare on top of target_rps, in percent."""
