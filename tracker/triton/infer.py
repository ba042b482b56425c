"""One inference request (:class:`Request`), the client Protocol every caller sends it through
(:class:`InferClient`: the output check's probes, the deploy's first request and predictions;
:class:`~tracker.triton.client.TritonClient` and
:class:`~tracker.triton.http_client.HttpTritonClient` have its methods), the deploy's model
control on top of it (:class:`ControlClient`), and a request sent the way a model takes it:
streamed to a decoupled model, its responses joined into one answer (:func:`answer`), as the
steps of one sequence to a stateful one (:func:`sequence_answers`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

Array = np.ndarray[Any, Any]
Tensors = Mapping[str, tuple[str, Array]]  # input name -> (Triton datatype, array)


@dataclass(frozen=True)
class Request:
    """One request to ``model``: ``tensors`` are its inputs; every name in ``outputs`` must
    come back; ``version`` None: the server's choice. With ``sequence_id`` (a stateful
    model) it is a step of that sequence, its flags as given (unset: on, a one-step
    sequence)."""

    model: str
    tensors: Tensors
    outputs: Sequence[str] = ()
    version: int | None = None
    sequence_id: int | str = 0
    sequence_start: bool | None = None
    sequence_end: bool | None = None

    def sequence(self) -> dict[str, Any]:
        """tritonclient's sequence arguments: the ID, and each flag as given, else on for a
        step of a sequence (a one-step sequence), off for any other request."""
        on = bool(self.sequence_id)
        return {"sequence_id": self.sequence_id,
                "sequence_start": on if self.sequence_start is None else self.sequence_start,
                "sequence_end": on if self.sequence_end is None else self.sequence_end}


class InferClient(Protocol):
    """A client that answers a :class:`Request`; its failures are ServerErrors with Triton's
    message."""

    def infer_tensors(self, request: Request) -> dict[str, Array]:
        """One request, one response: each of ``request.outputs`` by name."""

    def stream_tensors(self, request: Request) -> list[dict[str, Array]]:
        """One request to a decoupled model, read to the end of its stream: each response's
        outputs by name, in order."""


class ControlClient(InferClient, Protocol):
    """What publishing, listing and predicting need of a Triton client besides inference."""

    timeout_s: float

    @property
    def address(self) -> str: ...

    def repository_index(self) -> list[dict[str, str]]: ...

    def load_model(self, name: str) -> None: ...

    def unload_model(self, name: str, wait_s: float = 30.0) -> None: ...

    def model_config(self, name: str) -> ModelConfig: ...

    def model_ready(self, name: str) -> bool: ...

    def version_ready(self, name: str, version: int | None) -> bool: ...

    def close(self) -> None: ...


def joined(responses: Sequence[Mapping[str, Array]], outputs: Sequence[str]) -> dict[str, Array]:
    """A stream's responses as one answer: each output's values of every response stacked on
    a first axis (responses of one shape), else flattened end to end; so the number of
    responses and every value are compared."""
    out: dict[str, Array] = {}
    for name in outputs:
        parts = [np.asarray(r[name]) for r in responses]
        if not parts:
            out[name] = np.empty((0,))
        elif len({p.shape for p in parts}) == 1:
            out[name] = np.stack(parts)
        else:
            out[name] = np.concatenate([p.ravel() for p in parts])
    return out


def answer(client: InferClient, request: Request, stream: bool = False) -> dict[str, Array]:
    """The outputs of one request; ``stream`` (a decoupled model): its whole response stream
    as one answer (:func:`joined`)."""
    if stream:
        return joined(client.stream_tensors(request), request.outputs)
    return client.infer_tensors(request)


def sequence_answers(client: InferClient, request: Request, steps: Sequence[Tensors],
                     stream: bool = False) -> list[dict[str, Array]]:
    """The answer (:func:`answer`) to each of ``steps`` sent as one sequence under
    ``request.sequence_id``: the start flag on the first step, the end flag on the last."""
    return [answer(client, dataclasses.replace(
        request, tensors=step, sequence_start=j == 0, sequence_end=j == len(steps) - 1),
        stream) for j, step in enumerate(steps)]
