"""What ``tracker check`` checks, and ``tracker tune`` before anything is measured: the spec
against the model (knobs, input data, streaming), then whether the server can serve it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tracker.candidate.measurement import check_servable
from tracker.errors import SpecError, TrackerError
from tracker.measure.kinds.trace import trace_of
from tracker.search import capacity
from tracker.search.summary import check
from tracker.triton.autocomplete import space_problems

if TYPE_CHECKING:
    from tracker.spec import StudySpec
    from tracker.triton.configuration import Configuration
    from tracker.triton.server.base import TritonServer


def check_study(spec: StudySpec, conf: Configuration, server: TritonServer) -> str:
    """What ``tracker check`` checks, and ``tracker tune`` before anything is measured: the
    spec against the model (knobs, input data, streaming), then whether ``server`` (not
    started) can serve it. SpecError or ModelError (the CLI prints it and exits 1); else the
    study in words, as ``tracker check`` prints it."""
    refused = [*space_problems(spec.search.space, conf), *capacity.problems(spec, conf),
               *_trace_problems(spec)]
    if refused:
        raise SpecError(refused)
    text = check(spec, conf)
    check_servable(spec, conf, server)
    return text + capacity_lines(spec)


def _trace_problems(spec: StudySpec) -> list[str]:
    """A trace whose requests the load cannot build (tracker/measure/kinds/trace.py)."""
    if spec.load.trace is None:
        return []
    try:
        trace_of(spec.load)
    except TrackerError as err:
        return [str(err)]
    return []


def capacity_lines(spec: StudySpec) -> str:
    """How a capacity study searches, as ``tracker check`` says it ("" for other studies)."""
    if not capacity.wanted(spec):
        return ""
    load, deploy = spec.load, spec.capacity
    text = (f"\ncapacity: the highest {load.arrival if load.trace is None else 'trace'} "
            f"open-loop rate holding the constraints, bracketed within "
            f"{load.capacity_tolerance_pct:g}% in at most {load.capacity_max_probes} rates "
            f"after a closed-loop probe at concurrency {max(load.concurrency_levels())}")
    if deploy is not None and deploy.target_rps is not None:
        text += (f"; replicas for {deploy.target_rps:g} requests/s with "
                 f"{deploy.headroom_pct:g}% headroom")
    if deploy is not None and deploy.price_per_hour is not None:
        text += f"; cost per million inferences at {deploy.price_per_hour:g}/hour"
    return text
