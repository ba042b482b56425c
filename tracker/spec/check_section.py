"""``check``: how a configuration's answers are compared with the default configuration's
(docs/output-check.md).

``check.outputs`` is ``{rtol, atol, ignore, probes, timeout_s}`` or ``false`` (no check at
all). Integer, bool and string outputs must be equal; a floating output ``got`` passes
against the default's ``expected`` when ``|got - expected| <= atol + rtol * |expected|``
element by element (numpy's ``allclose``). ``ignore`` names outputs that are not compared (a
timestamp, a sampled token); whether each names an output of the model is checked against the
model (``tracker check``). A probe not answered within ``timeout_s`` fails the check.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BeforeValidator, Field

from tracker.spec.model_section import SpecModel
from tracker.spec.shapes import PosFloat

#: measured on ONNX Runtime CPU (docs/tuning.md): instance counts, thread counts and batch
#: sizes moved float32 outputs by at most ~1e-6 relative; these leave a wide margin
DEFAULT_RTOL = 1e-4
DEFAULT_ATOL = 1e-5
DEFAULT_PROBES = 4  # each costs one inference per trial: a DenseNet on 2 cores, ~0.3 s
#: a probe is a configuration's first inference: longer than a load request's deadline, for
#: what a backend does on its first call (an execution provider building its engine)
DEFAULT_PROBE_TIMEOUT_S = 30.0


class OutputsCheck(SpecModel):
    """The tolerances of the output check, the outputs it leaves out, how many probes."""

    enabled: bool = True
    """False: no output check."""
    rtol: Annotated[float, Field(ge=0, strict=False)] = DEFAULT_RTOL
    """Relative tolerance of a floating output: ``|got - expected| <= atol + rtol x |expected|``."""
    atol: Annotated[float, Field(ge=0, strict=False)] = DEFAULT_ATOL
    """Absolute tolerance of a floating output (see rtol)."""
    ignore: list[str] = Field(default_factory=list)
    """Outputs not compared (not deterministic: `tracker check --outputs` names them)."""
    probes: Annotated[int, Field(ge=1, le=64)] = DEFAULT_PROBES
    """How many probes at most: rows of load.input_data, else inputs drawn from the seed."""
    timeout_s: PosFloat = DEFAULT_PROBE_TIMEOUT_S
    """A probe not answered in this many seconds fails the check."""


def _outputs(value: object) -> object:
    """``false`` turns the check off; ``true`` is the defaults."""
    if value is False:
        return {"enabled": False}
    if value is True or value is None:
        return {}
    return value


class CheckSection(SpecModel):
    """``check.outputs``: see the module doc."""

    outputs: Annotated[OutputsCheck, BeforeValidator(_outputs)] = Field(
        default_factory=OutputsCheck)
    """Each configuration answers the default's probes as it does before it is measured."""
