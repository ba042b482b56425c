"""How requests reach the server: gRPC (default) or HTTP, built once, sent many times.

The load generator's per-request cost is what limits it, so each request is serialized once
before the load starts (a ``ModelInferRequest`` in protobuf bytes, or tritonclient's HTTP body)
and sent as is; responses are not decoded (a failed request is a gRPC status or an HTTP error,
which is all the measurement needs). The gRPC path uses tritonclient's service definition and
its channel options; the HTTP path uses tritonclient's request body and aiohttp, as
``tritonclient.http.aio`` does.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import numpy as np

from tracker.errors import MeasurementError
from tracker.measure.inputs import Sample
from tracker.measure.stream import StreamCaller, StreamFailed, TokenCount, with_final_flag
from tracker.triton.statistics import (
    ServerStats,
    all_stats_from_json,
    all_stats_from_proto,
    stats_from_json,
    stats_from_proto,
)
from tracker.triton.tls import Security

INFER_METHOD = "/inference.GRPCInferenceService/ModelInfer"
STATS_METHOD = "/inference.GRPCInferenceService/ModelStatistics"

Payload = Any  # bytes (gRPC) or (body bytes, json header size | None) (HTTP)


class RequestFailed(Exception):
    """An HTTP request that the server answered with an error (the message is Triton's)."""


def raw_bytes(arr: np.ndarray[Any, Any], datatype: str) -> bytes:
    if datatype == "BYTES":
        from tritonclient.utils import serialize_byte_tensor

        ser = serialize_byte_tensor(arr)
        return bytes(ser.item()) if ser.size > 0 else b""
    return bytes(np.ascontiguousarray(arr).tobytes())


def describe_error(exc: BaseException) -> str:
    """A short, stable message for a failed request: gRPC code and details, or the text."""
    code = getattr(exc, "code", None)
    details = getattr(exc, "details", None)
    if callable(code) and callable(details):
        name = getattr(code(), "name", str(code()))
        return f"{name}: {details()}"
    if isinstance(exc, asyncio.TimeoutError):
        return "request timed out"
    if isinstance(exc, RequestFailed | StreamFailed):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


def grpc_payloads(model_name: str, samples: Sequence[Sample],
                  datatypes: dict[str, str]) -> list[bytes]:
    """One serialized ``ModelInferRequest`` per sample (raw input contents)."""
    from tritonclient.grpc import service_pb2

    out = []
    for sample in samples:
        req = service_pb2.ModelInferRequest(model_name=model_name)
        for name, arr in sample.items():
            tensor = req.inputs.add()
            tensor.name, tensor.datatype = name, datatypes[name]
            tensor.shape.extend(int(d) for d in arr.shape)
            req.raw_input_contents.append(raw_bytes(arr, datatypes[name]))
        out.append(req.SerializeToString())
    return out


def http_payloads(samples: Sequence[Sample],
                  datatypes: dict[str, str]) -> list[tuple[bytes, int | None]]:
    """One (body, JSON header size) per sample, built by tritonclient (binary tensors)."""
    from tritonclient.http import InferInput
    from tritonclient.http.aio import InferenceServerClient

    out = []
    for sample in samples:
        tensors = []
        for name, arr in sample.items():
            tensor = InferInput(name, list(arr.shape), datatypes[name])
            data = arr
            if datatypes[name] == "BF16":  # our bit patterns, as the dtype tritonclient wants
                import ml_dtypes

                data = np.ascontiguousarray(arr, dtype=np.uint16).view(ml_dtypes.bfloat16)
            tensor.set_data_from_numpy(data, binary_data=True)
            tensors.append(tensor)
        body, json_size = InferenceServerClient.generate_request_body(tensors)
        out.append((bytes(body), json_size))
    return out


class GrpcTransport:
    """gRPC over one ``grpc.aio`` channel (create it inside the event loop that uses it).
    With ``stream`` (a decoupled model) each request is one ``ModelStreamInfer`` stream whose
    call returns a :class:`~tracker.measure.stream.StreamRecord` (stream.py)."""

    protocol = "grpc"

    def __init__(self, url: str, model_name: str, timeout_s: float,
                 stream: TokenCount | None = None, security: Security | None = None) -> None:
        import grpc
        from tritonclient.grpc import MAX_GRPC_MESSAGE_SIZE, service_pb2

        self.url, self.model_name, self.timeout_s = url, model_name, timeout_s
        self.stream = stream
        self.security = sec = security or Security()
        self.metadata = sec.grpc_metadata()
        opts: list[tuple[str, Any]] = [
            ("grpc.max_send_message_length", MAX_GRPC_MESSAGE_SIZE),
            ("grpc.max_receive_message_length", MAX_GRPC_MESSAGE_SIZE), *sec.grpc_options()]
        self._channel = (grpc.aio.secure_channel(url, sec.grpc_credentials(), options=opts)
                         if sec.tls else grpc.aio.insecure_channel(url, options=opts))
        # bytes in, bytes out: no per-request (de)serialization in Python
        self._infer = self._channel.unary_unary(INFER_METHOD)
        self._stats = self._channel.unary_unary(
            STATS_METHOD, request_serializer=service_pb2.ModelStatisticsRequest.SerializeToString,
            response_deserializer=service_pb2.ModelStatisticsResponse.FromString)
        self._stats_request = service_pb2.ModelStatisticsRequest(name=model_name)
        self._all_stats_request = service_pb2.ModelStatisticsRequest(name="")

    def payloads(self, samples: Sequence[Sample], datatypes: dict[str, str]) -> list[Payload]:
        out = grpc_payloads(self.model_name, samples, datatypes)
        return [with_final_flag(p) for p in out] if self.stream is not None else list(out)

    def caller(self) -> Callable[[Payload], Awaitable[Any]]:
        """The per-request call: the channel's multicallable with the deadline bound (a
        stream's: :class:`~tracker.measure.stream.StreamCaller`)."""
        if self.stream is not None:
            return StreamCaller(self._channel, self.stream, self.timeout_s, self.metadata)
        if self.metadata:
            return functools.partial(self._infer, timeout=self.timeout_s,
                                     metadata=self.metadata)
        return functools.partial(self._infer, timeout=self.timeout_s)

    async def stats(self, timeout_s: float | None = None) -> ServerStats:
        response = await self._stats(self._stats_request, timeout=timeout_s or self.timeout_s,
                                     metadata=self.metadata)
        return stats_from_proto(response, self.model_name)

    async def all_stats(self, timeout_s: float | None = None) -> dict[str, ServerStats]:
        """Every model's counters from one request (the statistics API without a name)."""
        response = await self._stats(self._all_stats_request,
                                     timeout=timeout_s or self.timeout_s,
                                     metadata=self.metadata)
        return all_stats_from_proto(response)

    async def close(self) -> None:
        await self._channel.close()


class HttpTransport:
    """HTTP/REST with one aiohttp session (create it inside the event loop that uses it)."""

    protocol = "http"
    stream = None

    def __init__(self, url: str, model_name: str, timeout_s: float,
                 security: Security | None = None) -> None:
        import aiohttp

        self.security = sec = security or Security()
        base = url if "://" in url else f"{'https' if sec.tls else 'http'}://{url}"
        self._headers = sec.http_headers()
        self.url, self.model_name, self.timeout_s = base.rstrip("/"), model_name, timeout_s
        self._infer_url = f"{self.url}/v2/models/{model_name}/infer"
        self._stats_url = f"{self.url}/v2/models/{model_name}/stats"
        self._all_stats_url = f"{self.url}/v2/models/stats"
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._session = aiohttp.ClientSession(
            timeout=self._timeout, headers=self._headers,
            connector=aiohttp.TCPConnector(
                limit=0, ssl=sec.ssl_context() if base.startswith("https://") else True))

    def payloads(self, samples: Sequence[Sample], datatypes: dict[str, str]) -> list[Payload]:
        return http_payloads(samples, datatypes)

    def caller(self) -> Callable[[Payload], Awaitable[Any]]:
        return self._post

    async def _post(self, payload: Payload) -> None:
        body, json_size = payload
        headers = {"Inference-Header-Content-Length": str(json_size)} if json_size else None
        async with self._session.post(self._infer_url, data=body, headers=headers) as resp:
            data = await resp.read()
            if resp.status != 200:
                raise RequestFailed(f"HTTP {resp.status}: {_http_error(data)}")

    async def _get_stats(self, url: str, timeout_s: float | None) -> Any:
        import aiohttp

        timeout = aiohttp.ClientTimeout(total=timeout_s or self.timeout_s)
        async with self._session.get(url, timeout=timeout) as resp:
            if resp.status != 200:
                raise RequestFailed(f"HTTP {resp.status}: {_http_error(await resp.read())}")
            return await resp.json()

    async def stats(self, timeout_s: float | None = None) -> ServerStats:
        return stats_from_json(await self._get_stats(self._stats_url, timeout_s),
                               self.model_name)

    async def all_stats(self, timeout_s: float | None = None) -> dict[str, ServerStats]:
        """Every model's counters from one request (``/v2/models/stats``)."""
        return all_stats_from_json(await self._get_stats(self._all_stats_url, timeout_s))

    async def close(self) -> None:
        await self._session.close()


def _http_error(data: bytes) -> str:
    import json

    try:
        return str(json.loads(data.decode(errors="replace")).get("error", data[:200]))
    except (ValueError, AttributeError):
        return data[:200].decode(errors="replace")


Transport = GrpcTransport | HttpTransport


def make_transport(protocol: str, url: str, model_name: str, timeout_s: float,
                   stream: TokenCount | None = None,
                   security: Security | None = None) -> Transport:
    """The transport for ``protocol`` ("grpc": ``host:port``; "http": ``[http://]host:port``);
    ``stream``: each request one gRPC stream, tokens counted by that rule (gRPC only);
    ``security``: TLS and headers (tracker/triton/tls.py)."""
    if protocol == "grpc":
        return GrpcTransport(url, model_name, timeout_s, stream, security)
    if protocol == "http":
        if stream is not None:
            raise MeasurementError("load.protocol must be 'grpc' for a streaming (decoupled) "
                                   "model: Triton streams a request's responses over gRPC "
                                   "only, but got 'http'")
        return HttpTransport(url, model_name, timeout_s, security)
    raise MeasurementError(f"load.protocol must be 'grpc' or 'http', but got {protocol!r}")
