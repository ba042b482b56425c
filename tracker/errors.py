"""The exceptions users see.

Every failure a user can cause or meet (bad spec, refused config, server that will not start,
unreachable daemon, ...) is a :class:`TrackerError`. The CLI turns it into a message and exit
status 1; anything else is a bug and keeps its traceback. Library errors are wrapped with
``raise XError(...) from exc`` so the cause stays visible under ``--debug``.
"""

from __future__ import annotations

from collections.abc import Sequence


class TrackerError(Exception):
    """Base of every user-facing failure. ``str(err)`` is the message shown to the user."""


class SpecError(TrackerError):
    """The study spec is invalid. ``messages`` holds one line per problem, each naming the
    field path and the bad value."""

    def __init__(self, messages: Sequence[str], source: str | None = None) -> None:
        self.messages = list(messages)
        self.source = source
        head = f"invalid study spec {source}" if source else "invalid study spec"
        super().__init__(head + ":\n" + "\n".join(f"  - {m}" for m in self.messages))


class ConfigError(TrackerError):
    """A model configuration (config.pbtxt or a field-path assignment) is impossible."""


class ModelError(TrackerError):
    """The model file cannot be read or built (missing ONNX file, unsupported data type)."""


class ServerError(TrackerError):
    """A Triton server could not be started, stopped, reached or driven."""

    def __init__(self, message: str, log_tail: str = "") -> None:
        self.reason = message
        self.log_tail = log_tail
        text = message
        if log_tail:
            text += "\n--- last lines of the server log ---\n" + log_tail.rstrip()
        super().__init__(text)


class ServerStartError(ServerError):
    """The server did not become READY: ``reason`` says why, ``log_tail`` shows its log."""


class ModelLoadError(ServerError):
    """Triton refused to load a model configuration; the message is Triton's own."""


class MeasurementError(TrackerError):
    """A measurement could not be made or is invalid (errors above the threshold, timeout)."""


class StudyError(TrackerError):
    """The Optuna study or its storage cannot be used as asked."""


class TrackingError(TrackerError):
    """MLflow refused a write (tracking server down, database locked, bad experiment)."""


class DeployError(TrackerError):
    """Registering, promoting or deploying a model version failed."""


class GpuError(TrackerError):
    """A server was given a GPU that this machine does not have (an index, UUID or MIG
    instance NVML does not know), or one whose identity cannot be decided."""
