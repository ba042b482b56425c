"""One request to a decoupled (streaming) model, its whole response stream read back: what a
probe of such a model gets (:func:`tracker.triton.infer.answer` with ``stream``).

Each call opens its own gRPC client and stream (a tritonclient stream belongs to one client,
and probes sent together run in threads of their own), asks for an empty final response
(``enable_empty_final_response``) so the end of the stream is known even when the model sends
its last data without the final flag, and returns every response's outputs in order, the
empty final one left out. A stream that fails or does not end in time is cancelled, so the
call returns within its timeout whatever the model does.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from tracker.errors import ServerError
from tracker.triton.endpoints import Endpoints

if TYPE_CHECKING:
    from tracker.triton.infer import Request

Array = np.ndarray[Any, Any]
FINAL = "triton_final_response"


def stream_tensors(endpoints: Endpoints, request: Request,
                   timeout_s: float = 30.0) -> list[dict[str, Array]]:
    """Send ``request`` to its decoupled model over gRPC and read the stream to the end: each
    response's ``request.outputs`` by name. ServerError with Triton's message when the
    request or a response fails, or the stream does not end within ``timeout_s``."""
    import tritonclient.grpc as grpcclient

    got: queue.Queue[tuple[Any, Any]] = queue.Queue()
    name, security = request.model, endpoints.security
    client = grpcclient.InferenceServerClient(endpoints.grpc, **security.grpc_client_kwargs())
    ended = False
    try:
        try:
            client.start_stream(callback=lambda result, error: got.put((result, error)),
                                headers=security.http_headers() or None)
            inputs = []
            for inp_name, (datatype, array) in request.tensors.items():
                tensor = grpcclient.InferInput(inp_name, list(array.shape), datatype)
                tensor.set_data_from_numpy(array)
                inputs.append(tensor)
            client.async_stream_infer(
                name, inputs, model_version="" if request.version is None
                else str(request.version), enable_empty_final_response=True,
                outputs=[grpcclient.InferRequestedOutput(o) for o in request.outputs] or None,
                **request.sequence())
        except Exception as exc:  # InferenceServerException, grpc.RpcError, OSError, ...
            raise ServerError(f"streaming inference on {name!r} failed: {exc}") from exc
        answers = _read(got, name, request.outputs, time.monotonic() + timeout_s, timeout_s)
        ended = True
        return answers
    finally:
        try:  # a stream that did not end is cancelled: closing it waits for it otherwise
            client.stop_stream(cancel_requests=not ended)
        finally:
            client.close()


def _read(got: queue.Queue[tuple[Any, Any]], name: str, outputs: Sequence[str],
          deadline: float, timeout_s: float) -> list[dict[str, Array]]:
    answers: list[dict[str, Array]] = []
    while True:
        try:
            result, error = got.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise ServerError(f"the response stream of {name!r} did not end within "
                              f"{timeout_s:g} s ({len(answers)} responses)") from None
        if error is not None:
            raise ServerError(f"streaming inference on {name!r} failed: {error}")
        response = result.get_response()
        if response.outputs:
            answers.append({o: _output(result, name, o) for o in outputs})
        final = response.parameters.get(FINAL)
        if final is not None and final.bool_param:
            return answers


def _output(result: Any, name: str, out: str) -> Array:
    value = result.as_numpy(out)
    if value is None:
        raise ServerError(f"output {out!r} of {name!r} is missing from a streamed response")
    return np.asarray(value)
