"""The client a deployment talks to Triton with: gRPC (:class:`TritonClient`, our default) or
HTTP (:class:`HttpTritonClient`, for an ``http[s]://`` url such as NVIDIA's ``TRITON_URL``).
Both have the methods of :class:`ControlClient`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from tracker.deploy.settings import TargetSettings
from tracker.triton.client import TritonClient
from tracker.triton.endpoints import Endpoints
from tracker.triton.http_client import HttpTritonClient

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

Array = np.ndarray[Any, Any]


class ControlClient(Protocol):
    """What publishing, listing and predicting need from a Triton client."""

    timeout_s: float

    @property
    def address(self) -> str: ...

    def repository_index(self) -> list[dict[str, str]]: ...

    def load_model(self, name: str) -> None: ...

    def unload_model(self, name: str, wait_s: float = 30.0) -> None: ...

    def model_config(self, name: str) -> ModelConfig: ...

    def model_ready(self, name: str) -> bool: ...

    def version_ready(self, name: str, version: int | None) -> bool: ...

    def infer_tensors(self, name: str, tensors: Mapping[str, tuple[str, Array]], *,
                      version: int | None = None,
                      outputs: Sequence[str] = (),
                      sequence_id: int | str = 0, sequence_start: bool | None = None,
                      sequence_end: bool | None = None) -> dict[str, Array]: ...

    def stream_tensors(self, name: str, tensors: Mapping[str, tuple[str, Array]], *,
                       version: int | None = None, outputs: Sequence[str] = (),
                       sequence_id: int | str = 0, sequence_start: bool = False,
                       sequence_end: bool = False) -> list[dict[str, Array]]: ...

    def close(self) -> None: ...


def make_client(settings: TargetSettings) -> TritonClient | HttpTritonClient:
    """The client for ``settings.url`` over its protocol (use it as a context manager)."""
    timeout_s = min(settings.timeout_s, 60)
    if settings.protocol == "http":
        return HttpTritonClient(settings.url, ssl=settings.ssl, timeout_s=timeout_s,
                                security=settings.security)
    return TritonClient(Endpoints.from_urls(settings.url, security=settings.security),
                        timeout_s=timeout_s)
