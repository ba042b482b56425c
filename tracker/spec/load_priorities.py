"""``load.priorities``: the share of requests the load sends at each of Triton's request
priority levels (the request parameter ``priority``; docs/server-options.md, "Request priorities").
Which request goes at which level: tracker/measure/priorities.py. Whether the model has those
levels (``dynamic_batching.priority_levels``) is checked against its config and the search
space at ``tracker check`` (tracker/search/knob_rules.py)."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field

from tracker.spec.messages import problem, show
from tracker.spec.shapes import PosInt

#: how far the shares may sum from 1 (written as decimals, 0.1 + 0.2 is not 0.3)
TOLERANCE = 1e-6


def _shares(value: dict[int, float]) -> dict[int, float]:
    if not value:
        raise problem("needs at least one level, e.g. {1: 0.2, 2: 0.8}, but got {}")
    total = sum(value.values())
    if abs(total - 1.0) > TOLERANCE:
        raise problem(f"the shares must sum to 1, but they sum to {total:g}: {show(value)}")
    return dict(sorted(value.items()))


Share = Annotated[float, Field(gt=0, le=1)]
#: ``{LEVEL: SHARE}``: levels from 1 (Triton's highest priority), shares summing to 1
PriorityShares = Annotated[dict[PosInt, Share], AfterValidator(_shares)]
