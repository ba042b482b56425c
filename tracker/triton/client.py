"""A thin, typed wrapper over ``tritonclient``: readiness, model control, statistics, metrics.

Readiness is polled over HTTP with the standard library (a gRPC channel that is created before
the server listens backs off for a second or more, which would blur start-up timings); model
control, statistics and inference go over gRPC. Every tritonclient failure
(``InferenceServerException``, a gRPC ``RpcError``, a socket error) becomes ours in one place,
:func:`triton_errors`: a :class:`ServerError` or, when Triton refuses a model configuration, a
:class:`ModelLoadError`, whose message is Triton's own. Nothing above this module touches
``tritonclient.grpc`` for server calls.
"""

from __future__ import annotations

import contextlib
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from tracker.errors import ModelLoadError, ServerError, TrackerError
from tracker.triton.endpoints import Endpoints
from tracker.triton.infer import Request
from tracker.triton.statistics import ServerStats, stats_from_proto

if TYPE_CHECKING:
    from tritonclient.grpc import InferenceServerClient
    from tritonclient.grpc.model_config_pb2 import ModelConfig


# config data type -> (Triton wire datatype, numpy dtype); the one table the package uses
DTYPES: dict[str, tuple[str, Any]] = {
    "TYPE_BOOL": ("BOOL", np.bool_), "TYPE_UINT8": ("UINT8", np.uint8),
    "TYPE_UINT16": ("UINT16", np.uint16), "TYPE_UINT32": ("UINT32", np.uint32),
    "TYPE_UINT64": ("UINT64", np.uint64), "TYPE_INT8": ("INT8", np.int8),
    "TYPE_INT16": ("INT16", np.int16), "TYPE_INT32": ("INT32", np.int32),
    "TYPE_INT64": ("INT64", np.int64), "TYPE_FP16": ("FP16", np.float16),
    "TYPE_FP32": ("FP32", np.float32), "TYPE_FP64": ("FP64", np.float64),
    "TYPE_BF16": ("BF16", np.uint16),  # numpy has no bfloat16: its 2-byte pattern
    "TYPE_STRING": ("BYTES", np.object_),
}


def example_inputs(config: ModelConfig, batch_size: int = 1,
                   seed: int = 0) -> dict[str, tuple[str, np.ndarray[Any, Any]]]:
    """Random inputs that match ``config``: name -> (Triton datatype, array). Variable dims
    (-1) become 1; the batch dimension is added when ``max_batch_size > 0``."""
    from tritonclient.grpc import model_config_pb2

    rng = np.random.default_rng(seed)
    out: dict[str, tuple[str, np.ndarray[Any, Any]]] = {}
    for inp in config.input:
        type_name = model_config_pb2.DataType.Name(inp.data_type)
        if type_name not in DTYPES:
            raise ServerError(f"input {inp.name!r} has data type {type_name}, which example "
                              "inputs cannot be made for")
        triton_type, np_type = DTYPES[type_name]
        shape = [d if d > 0 else 1 for d in inp.dims]
        if config.max_batch_size > 0:
            shape = [batch_size, *shape]
        if np_type is np.object_:
            data = np.array([b"x"] * int(np.prod(shape)), dtype=np.object_).reshape(shape)
        elif np_type is np.bool_:
            data = rng.integers(0, 2, size=shape).astype(np.bool_)
        elif np.issubdtype(np_type, np.integer):
            data = rng.integers(0, 4, size=shape).astype(np_type)
        else:
            data = rng.random(size=shape).astype(np_type)
        out[inp.name] = (triton_type, data)
    return out


def response_outputs(result: Any, request: Request) -> dict[str, np.ndarray[Any, Any]]:
    """Each of ``request.outputs`` from tritonclient's ``result`` (gRPC or HTTP) by name;
    ServerError when one is missing or malformed."""
    got: dict[str, np.ndarray[Any, Any]] = {}
    for out in request.outputs:
        try:
            value = result.as_numpy(out)
        except ValueError as exc:  # e.g. an empty tensor where a shape was promised
            raise ServerError(f"output {out!r} of {request.model!r} is malformed: {exc}") \
                from exc
        if value is None:
            raise ServerError(f"output {out!r} of {request.model!r} is missing from the "
                              "response")
        got[out] = value
    return got


@contextlib.contextmanager
def triton_errors(what: str = "", error: type[ServerError] = ServerError) -> Iterator[None]:
    """The one choke point for tritonclient's exceptions: anything the block raises that is
    not already ours becomes ``error("<what>: <Triton's message>")``."""
    try:
        yield
    except TrackerError:
        raise
    except Exception as exc:  # InferenceServerException, grpc.RpcError, OSError, ...
        text = _triton_message(exc)
        raise error(f"{what}: {text}" if what else text) from exc


class TritonClient:
    """Talks to one Triton server. Cheap to create; not shared between threads (make one per
    thread: tritonclient's gRPC client is not documented as thread-safe)."""

    def __init__(self, endpoints: Endpoints, *, timeout_s: float = 30.0) -> None:
        self.endpoints = endpoints
        self.timeout_s = timeout_s
        self._grpc: InferenceServerClient | None = None
        self._headers = endpoints.security.http_headers() or None
        self._call = {"client_timeout": timeout_s, "headers": self._headers}  # every call's

    # -- connection ----------------------------------------------------------------------
    @property
    def grpc(self) -> InferenceServerClient:
        """The underlying ``tritonclient.grpc.InferenceServerClient`` (created on first use)."""
        if self._grpc is None:
            import tritonclient.grpc as grpcclient

            self._grpc = grpcclient.InferenceServerClient(
                self.endpoints.grpc, **self.endpoints.security.grpc_client_kwargs())
        return self._grpc

    def close(self) -> None:
        if self._grpc is not None:
            self._grpc.close()
            self._grpc = None

    def __enter__(self) -> TritonClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- health --------------------------------------------------------------------------
    def is_ready(self) -> bool:
        """True when the server answers READY (all loaded models ready); never raises."""
        if self.endpoints.http is not None:
            url = self.endpoints.http + "/v2/health/ready"
            try:
                with self.endpoints.security.urlopen(url, 1.0) as resp:
                    return bool(resp.status == 200)
            except (OSError, urllib.error.URLError):
                return False
        try:
            with triton_errors():
                return bool(self.grpc.is_server_ready(headers=self._headers,
                                                      client_timeout=1.0))
        except ServerError:
            return False

    def wait_ready(self, timeout_s: float, interval_s: float = 0.02) -> None:
        """Block until READY; :class:`ServerError` after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while not self.is_ready():
            if time.monotonic() > deadline:
                raise ServerError(f"server at {self.endpoints.grpc} not READY after "
                                  f"{timeout_s:g} s")
            time.sleep(interval_s)

    def model_ready(self, name: str, version: int | None = None) -> bool:
        """Whether model ``name`` (``version``, or any version when None) is READY."""
        with triton_errors(f"cannot ask {self.endpoints.grpc} whether model {name!r} is ready"):
            return bool(self.grpc.is_model_ready(name, "" if version is None else str(version),
                                                 **self._call))

    @property
    def address(self) -> str:
        """The gRPC ``host:port``, for messages (as :class:`HttpTritonClient` has one)."""
        return self.endpoints.grpc

    def version_ready(self, name: str, version: int | None) -> bool:
        """Whether ``version`` of ``name`` (any version when None) is READY (the deploy
        transport's name for :meth:`model_ready`)."""
        return self.model_ready(name, version)

    def infer_tensors(self, request: Request) -> dict[str, np.ndarray[Any, Any]]:
        """One request (:class:`~tracker.triton.infer.Request`): its outputs by name.
        Raises :class:`ServerError` with Triton's message."""
        import tritonclient.grpc as grpcclient

        inputs = []
        for inp_name, (datatype, array) in request.tensors.items():
            tensor = grpcclient.InferInput(inp_name, list(array.shape), datatype)
            tensor.set_data_from_numpy(array)
            inputs.append(tensor)
        wanted = [grpcclient.InferRequestedOutput(o) for o in request.outputs]
        with triton_errors(f"inference on {request.model!r} failed"):
            result = self.grpc.infer(request.model, inputs, model_version="" if request.version
                                     is None else str(request.version),
                                     outputs=wanted or None, **self._call, **request.sequence())
        return response_outputs(result, request)

    def stream_tensors(self, request: Request) -> list[dict[str, np.ndarray[Any, Any]]]:
        """One request to a decoupled model, its whole response stream (stream_probe.py)."""
        from tracker.triton.stream_probe import stream_tensors

        return stream_tensors(self.endpoints, request, self.timeout_s)

    # -- model control -------------------------------------------------------------------
    def load_model(self, name: str, config: ModelConfig | None = None) -> None:
        """Load (or reload) ``name``; with ``config`` the server uses it instead of the
        repository's config.pbtxt. Raises :class:`ModelLoadError` with Triton's message."""
        from google.protobuf import json_format

        override = None
        if config is not None:
            override = json_format.MessageToJson(config, preserving_proto_field_name=True)
        with triton_errors(error=ModelLoadError):
            self.grpc.load_model(name, config=override, headers=self._headers,
                                 client_timeout=None)

    def unload_model(self, name: str, wait_s: float = 30.0) -> None:
        """Unload ``name`` and wait (up to ``wait_s``) until Triton has finished unloading it
        (its instances gone: the server is not READY while a model is UNLOADING)."""
        with triton_errors(f"unloading model {name!r} failed"):
            self.grpc.unload_model(name, **self._call)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            states = {m.get("state") for m in self.repository_index() if m.get("name") == name}
            if not states & {"READY", "LOADING", "UNLOADING"}:
                return
            time.sleep(0.02)
        raise ServerError(f"model {name!r} still unloading after {wait_s:g} s")

    def repository_index(self) -> list[dict[str, str]]:
        """The server's model repository index: dicts with name, version, state, reason."""
        with triton_errors("reading the repository index failed"):
            index = self.grpc.get_model_repository_index(as_json=True, **self._call)
        return [dict(m) for m in index.get("models", [])]

    def model_config(self, name: str) -> ModelConfig:
        """The configuration the server is using for ``name``."""
        with triton_errors(f"reading the config of model {name!r} failed"):
            return self.grpc.get_model_config(name, **self._call).config

    # -- numbers -------------------------------------------------------------------------
    def statistics(self, name: str) -> ServerStats:
        """Cumulative statistics of ``name`` (all versions summed)."""
        with triton_errors(f"statistics of model {name!r} failed"):
            resp = self.grpc.get_inference_statistics(name, **self._call)
        return stats_from_proto(resp, name)

    def server_metadata(self) -> dict[str, Any]:
        """The server's name, version and extensions (Triton's server metadata)."""
        with triton_errors("server metadata failed"):
            resp = self.grpc.get_server_metadata(**self._call)
        return {"name": resp.name, "version": resp.version,
                "extensions": list(resp.extensions)}

    def register_system_shm(self, name: str, key: str, byte_size: int) -> None:
        """Register the system shared-memory region ``key`` (in /dev/shm) as ``name``."""
        with triton_errors(f"registering shared memory {name!r} on {self.endpoints.grpc}"):
            self.grpc.register_system_shared_memory(name, key, byte_size, **self._call)

    def unregister_system_shm(self, name: str = "") -> None:
        """Unregister region ``name`` ("" : every system region of the server)."""
        with triton_errors(f"unregistering shared memory {name!r} on {self.endpoints.grpc}"):
            self.grpc.unregister_system_shared_memory(name, **self._call)

    def system_shm_regions(self) -> list[str]:
        """The names of the system shared-memory regions the server has registered."""
        with triton_errors(f"shared memory status of {self.endpoints.grpc}"):
            got = self.grpc.get_system_shared_memory_status(as_json=True, **self._call)
        return sorted(got.get("regions", {}))

    def metrics_text(self) -> str:
        """The Prometheus text from the metrics endpoint."""
        url = self.endpoints.metrics
        if url is None:
            raise ServerError("the metrics endpoint of this server is unknown (set "
                              "server.metrics_url for a remote server)")
        try:
            with urllib.request.urlopen(url, timeout=self.timeout_s) as resp:
                return str(resp.read().decode())
        except OSError as exc:
            raise ServerError(f"reading metrics from {url} failed: {exc}") from exc

    def infer(self, name: str, config: ModelConfig,
              inputs: Mapping[str, np.ndarray[Any, Any]] | None = None, *,
              version: int | None = None) -> dict[str, np.ndarray[Any, Any]]:
        """One inference on ``name`` (``version``, or the newest ready one when None) with
        ``inputs`` (random ones shaped after ``config`` where not given); returns every
        output declared in ``config``. ServerError with Triton's message when the request
        fails or an output is missing or malformed."""
        tensors = {k: (dt, np.asarray(inputs[k]) if inputs and k in inputs else data)
                   for k, (dt, data) in example_inputs(config).items()}
        return self.infer_tensors(Request(name, tensors, [o.name for o in config.output],
                                          version))

    infer_once = infer  # the name the server tests use


def _triton_message(exc: BaseException) -> str:
    """The server's own message from a tritonclient exception (without the gRPC status)."""
    message = getattr(exc, "message", None)
    text = message() if callable(message) else str(exc)
    text = str(text).strip()
    if text.startswith("[StatusCode."):
        text = text.split("]", 1)[-1].strip()
    return text or type(exc).__name__
