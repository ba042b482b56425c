"""The client a deployment talks to Triton with: gRPC (:class:`TritonClient`, our default) or
HTTP (:class:`HttpTritonClient`, for an ``http[s]://`` url such as NVIDIA's ``TRITON_URL``).
Both have the methods of :class:`tracker.triton.infer.ControlClient`."""

from __future__ import annotations

from tracker.deploy.settings import TargetSettings
from tracker.triton.client import TritonClient
from tracker.triton.endpoints import Endpoints
from tracker.triton.http_client import HttpTritonClient


def make_client(settings: TargetSettings) -> TritonClient | HttpTritonClient:
    """The client for ``settings.url`` over its protocol (use it as a context manager)."""
    timeout_s = min(settings.timeout_s, 60)
    if settings.protocol == "http":
        return HttpTritonClient(settings.url, ssl=settings.ssl, timeout_s=timeout_s,
                                security=settings.security)
    return TritonClient(Endpoints.from_urls(settings.url, security=settings.security),
                        timeout_s=timeout_s)
