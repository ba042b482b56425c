"""Model control and inference over Triton's HTTP endpoint, for servers reached by their HTTP
address only (NVIDIA's mlflow-triton plugin settings name the HTTP endpoint, ``TRITON_URL``).

:class:`HttpTritonClient` has the methods of :class:`tracker.triton.client.TritonClient` that a
deployment uses (:class:`tracker.triton.infer.ControlClient`), with the same errors: a
:class:`ServerError`, or a :class:`ModelLoadError` whose message is Triton's own.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import numpy as np

from tracker.errors import ModelLoadError, ServerError
from tracker.triton.client import response_outputs, triton_errors
from tracker.triton.infer import Request
from tracker.triton.tls import Security

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig
    from tritonclient.http import InferenceServerClient

Array = np.ndarray[Any, Any]


class HttpTritonClient:
    """Talks to one Triton server over HTTP (``ssl``: HTTPS). Not shared between threads."""

    def __init__(self, host_port: str, *, ssl: bool = False, timeout_s: float = 30.0,
                 security: Security | None = None) -> None:
        self.host_port = host_port
        self.ssl = ssl
        self.security = security or Security(tls=ssl)
        self._headers = self.security.http_headers() or None
        self.timeout_s = timeout_s
        self._http: InferenceServerClient | None = None

    @property
    def address(self) -> str:
        """``http[s]://host:port``, for messages."""
        return f"{'https' if self.ssl else 'http'}://{self.host_port}"

    @property
    def http(self) -> InferenceServerClient:
        if self._http is None:
            import tritonclient.http as httpclient

            sec = self.security
            self._http = httpclient.InferenceServerClient(
                self.host_port, ssl=self.ssl, connection_timeout=self.timeout_s,
                ssl_context_factory=(lambda: sec.ssl_context()) if self.ssl else None,
                network_timeout=max(self.timeout_s, 600.0))  # a load may take minutes
        return self._http

    def close(self) -> None:
        if self._http is not None:
            self._http.close()
            self._http = None

    def __enter__(self) -> HttpTritonClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def repository_index(self) -> list[dict[str, str]]:
        with triton_errors(f"reading the repository index from {self.address} failed"):
            index = self.http.get_model_repository_index(headers=self._headers)
        return [{k: str(v) for k, v in m.items()} for m in index]

    def load_model(self, name: str) -> None:
        with triton_errors("", ModelLoadError):
            self.http.load_model(name, headers=self._headers)

    def unload_model(self, name: str, wait_s: float = 30.0) -> None:
        """Unload ``name`` and wait (up to ``wait_s``) until Triton has finished unloading it."""
        with triton_errors(f"unloading model {name!r} failed"):
            self.http.unload_model(name, headers=self._headers)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            states = {m.get("state") for m in self.repository_index() if m.get("name") == name}
            if not states & {"READY", "LOADING", "UNLOADING"}:
                return
            time.sleep(0.02)
        raise ServerError(f"model {name!r} still unloading after {wait_s:g} s")

    def model_config(self, name: str) -> ModelConfig:
        from google.protobuf import json_format
        from tritonclient.grpc.model_config_pb2 import ModelConfig

        with triton_errors(f"reading the config of model {name!r} failed"):
            raw = self.http.get_model_config(name, headers=self._headers)
        try:
            return json_format.ParseDict(raw, ModelConfig(), ignore_unknown_fields=True)
        except json_format.ParseError as exc:
            raise ServerError(f"the config of model {name!r} that {self.address} returned "
                              f"does not parse: {exc}") from exc

    def model_ready(self, name: str) -> bool:
        return self.version_ready(name, None)

    def version_ready(self, name: str, version: int | None) -> bool:
        with triton_errors(f"cannot ask {self.address} whether model {name!r} is ready"):
            return bool(self.http.is_model_ready(name, "" if version is None else str(version),
                                                 headers=self._headers))

    def stream_tensors(self, request: Request) -> list[dict[str, Array]]:
        """A decoupled model's response stream: not over HTTP (ServerError)."""
        raise ServerError(f"model {request.model!r} is decoupled: its responses stream over "
                          f"gRPC only, but this client speaks HTTP to {self.address} (use "
                          "protocol grpc)")

    def infer_tensors(self, request: Request) -> dict[str, Array]:
        """One request (:class:`~tracker.triton.infer.Request`): its outputs by name.
        Raises :class:`ServerError` with Triton's message."""
        import tritonclient.http as httpclient

        inputs = []
        for inp_name, (datatype, array) in request.tensors.items():
            tensor = httpclient.InferInput(inp_name, list(array.shape), datatype)
            tensor.set_data_from_numpy(array, binary_data=True)
            inputs.append(tensor)
        wanted = [httpclient.InferRequestedOutput(o, binary_data=True) for o in request.outputs]
        with triton_errors(f"inference on {request.model!r} failed"):
            result = self.http.infer(request.model, inputs, model_version="" if request.version
                                     is None else str(request.version), outputs=wanted or None,
                                     headers=self._headers, **request.sequence())
        return response_outputs(result, request)
