"""What ``tracker check`` checks, and ``tracker tune`` before anything is measured: the spec
against the model (knobs, input data, streaming), then whether the server can serve it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tracker.errors import SpecError
from tracker.search.summary import check
from tracker.session.measured import check_servable
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
    refused = space_problems(spec.search.space, conf)
    if refused:
        raise SpecError(refused)
    text = check(spec, conf)
    check_servable(spec, conf, server)
    return text
