"""Streaming requests to a decoupled model: each request one gRPC bidirectional stream.

A decoupled model (``model_transaction_policy { decoupled: true }``) answers one request with
any number of responses, so it is reached through Triton's ``ModelStreamInfer`` rather than
``ModelInfer`` (which refuses decoupled models). Each request opens its own stream on the
shared channel, writes one pre-serialized ``ModelInferRequest`` that asks for Triton's empty
final response (``triton_enable_empty_final_response``), half-closes, and reads responses
until the one flagged ``triton_final_response``; the server then ends the stream.

Per request the call returns :class:`StreamRecord`: when the first and the last response
that carried tokens arrived, when the final flag arrived, and how many tokens came. What
counts as a token is :class:`TokenCount`'s rule: each response that carries outputs is one
token (``responses``), or the element count of one named output summed over the responses
(a model that sends several tokens per response). A response that carries Triton's error
message fails the request, as a gRPC error does.

One stream per request, on one ``grpc.aio`` channel: HTTP/2 streams are cheap, and gRPC's
default limit on concurrent streams per connection is far above any concurrency a Python
client drives (benchmarks/streaming_client.py measures it against tritonclient's own
``stream_infer``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from tracker.errors import MeasurementError

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

    from tracker.spec.sections import LoadSection

STREAM_METHOD = "/inference.GRPCInferenceService/ModelStreamInfer"
FINAL = "triton_final_response"
EMPTY_FINAL = "triton_enable_empty_final_response"
RESPONSES = "responses"


class StreamRecord(NamedTuple):
    """What one streamed request saw (``perf_counter_ns`` instants; 0: no token came)."""

    first_ns: int
    last_ns: int
    final_ns: int
    tokens: int


class StreamFailed(Exception):
    """A stream response carried an error message (Triton's text)."""


@dataclass(frozen=True)
class TokenCount:
    """What counts as one token: ``responses`` (each response with outputs), or the name of
    an output whose element count per response is the number of tokens it carries."""

    tokens: str = RESPONSES

    @property
    def output(self) -> str | None:
        return None if self.tokens == RESPONSES else self.tokens


def check_tokens(count: TokenCount, outputs: Sequence[str]) -> None:
    """The named output must be one of the model's outputs."""
    if count.output is not None and count.output not in outputs:
        raise MeasurementError(
            f"load.stream.tokens names output {count.output!r}, but the model's outputs are "
            f"{list(outputs)}; give one of them, or 'responses' (one token per response)")


def stream_rule(config: ModelConfig, load: LoadSection) -> TokenCount | None:
    """How tokens are counted when ``config``'s model is streamed (each request one gRPC
    stream), or None for unary requests: a decoupled model is always streamed
    (``load.stream.enabled: auto``), any other only with ``enabled: true``."""
    decoupled = bool(config.model_transaction_policy.decoupled)
    enabled = load.stream.enabled
    if enabled is False and decoupled:
        raise MeasurementError(f"load.stream.enabled is false, but model {config.name!r} is "
                               "decoupled (model_transaction_policy { decoupled: true }): it "
                               "answers over gRPC streams only; use 'auto' or true")
    if not decoupled and enabled is not True:
        return None
    count = TokenCount(load.stream.tokens)
    check_tokens(count, [o.name for o in config.output])
    return count


def with_final_flag(payload: bytes) -> bytes:
    """A serialized ``ModelInferRequest`` that also asks for the empty final response."""
    from tritonclient.grpc import service_pb2

    req = service_pb2.ModelInferRequest.FromString(payload)
    req.parameters[EMPTY_FINAL].bool_param = True
    return bytes(req.SerializeToString())


def _count_outputs(name: str) -> Any:
    def count(response: Any) -> int:
        for out in response.outputs:
            if out.name == name:
                n = 1
                for d in out.shape:
                    n *= d
                return int(n)
        return 0
    return count


def _count_responses(response: Any) -> int:
    return 1 if response.outputs else 0


class StreamCaller:
    """The per-request call of a streaming transport: open a stream, send, read to the end."""

    def __init__(self, channel: Any, count: TokenCount, timeout_s: float,
                 metadata: tuple[tuple[str, str], ...] | None = None) -> None:
        from tritonclient.grpc import service_pb2

        self._open = channel.stream_stream(STREAM_METHOD)  # bytes in, bytes out
        self._parse = service_pb2.ModelStreamInferResponse.FromString
        self._count = (_count_responses if count.output is None
                       else _count_outputs(count.output))
        self.timeout_s = timeout_s
        self.metadata = metadata  # the server's headers (server.headers)

    async def __call__(self, payload: bytes) -> StreamRecord:
        now, parse, count = time.perf_counter_ns, self._parse, self._count
        first = last = final = tokens = 0
        call = self._open(iter((payload,)), timeout=self.timeout_s, metadata=self.metadata)
        async for raw in call:  # read to the stream's end: the server closes it after final
            t = now()
            msg = parse(raw)
            if msg.error_message:
                raise StreamFailed(msg.error_message)
            response = msg.infer_response
            n = count(response)
            if n:
                if not first:
                    first = t
                last = t
                tokens += n
            flag = response.parameters.get(FINAL)
            if flag is not None and flag.bool_param and not final:
                final = t
        return StreamRecord(first, last, final or now(), tokens)
