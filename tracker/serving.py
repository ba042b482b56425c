"""How a server serves an ONNX model: the one name and type for it (spec, repository, deploy).

An ONNX model runs either on Triton's ``onnxruntime`` backend (as the production config says)
or, where the server has no such backend (the nvidia-pytriton wheel's server), on the
``python`` backend through the onnxruntime shim. ``auto`` asks the server. Only ONNX models
have this choice: every other format is served by the backend its config names.

The same three words everywhere: ``server.serving`` in the study spec, ``--serving`` and
``TRACKER_TRITON_SERVING`` for deployments, ``TrialRepository.serving``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from tracker.errors import ConfigError

#: how an ONNX model is served once decided
Serving = Literal["onnxruntime", "python"]
#: what a user may ask for (``auto``: the server's onnxruntime backend when it has one)
ServingChoice = Literal["auto", "onnxruntime", "python"]
CHOICES: tuple[str, ...] = ("auto", "onnxruntime", "python")
NATIVE: Serving = "onnxruntime"
SHIM: Serving = "python"


def check_choice(wanted: str, field: str = "serving") -> ServingChoice:
    """``wanted`` when it is one of :data:`CHOICES`, else ConfigError naming ``field``."""
    if wanted == "auto":
        return "auto"
    if wanted == "onnxruntime":
        return "onnxruntime"
    if wanted == "python":
        return "python"
    raise ConfigError(f"{field} must be one of {list(CHOICES)}, but got {wanted!r}")


def serving_choices(wanted: str, has_native: Callable[[], bool | None]) -> list[Serving]:
    """The ways to serve an ONNX model, to try in order. ``has_native()`` says whether the
    server has the onnxruntime backend (asked only for ``auto``; None: not known, so
    onnxruntime first and the shim as the fallback)."""
    choice = check_choice(wanted)
    if choice != "auto":
        return [choice]
    known = has_native()
    if known is None:
        return [NATIVE, SHIM]
    return [NATIVE] if known else [SHIM]
