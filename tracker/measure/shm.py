"""System shared memory for the load's inputs and outputs (``load.shared_memory: system``),
as perf_analyzer's ``--shared-memory system`` does it.

Every sample's inputs are written once into one region (the server only reads it, so all
requests in flight share it); each output gets one region that every request names as its
destination (the load never reads responses, so requests in flight may overwrite each
other's results there, as with perf_analyzer). A request then carries region names, sizes and
offsets instead of tensor bytes: the client neither copies nor sends them, the server reads
them from /dev/shm. The server must run on this machine (the spec refuses it otherwise).

:func:`system_regions` creates and registers the regions and, whatever happens, unregisters
and unlinks them on the way out; an ``atexit`` hook unlinks what an abrupt exit left.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from tracker.errors import MeasurementError
from tracker.measure.inputs import Sample
from tracker.measure.transport import Payload, raw_bytes
from tracker.triton.client import DTYPES, TritonClient
from tracker.triton.endpoints import Endpoints

if TYPE_CHECKING:
    from tracker.spec.sections import LoadSection
    from tracker.triton.model_config import ModelConfig

PREFIX = "tracker_shm_"
VARIABLE_OUTPUT_BYTES = 1 << 20  # an output whose size the config does not fix
_LIVE: set[str] = set()  # keys of regions this process created and has not yet removed


@dataclass(frozen=True)
class _Region:
    name: str
    key: str
    size: int


def _unlink(key: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink("/dev/shm" + key)
    _LIVE.discard(key)


@atexit.register
def _unlink_all() -> None:
    for key in list(_LIVE):
        _unlink(key)


def output_bytes(config: ModelConfig, batch: int) -> dict[str, int]:
    """Bytes of each output for a request of ``batch`` (a fixed size when the config says)."""
    from tritonclient.grpc import model_config_pb2

    out = {}
    for o in config.output:
        np_type = DTYPES.get(model_config_pb2.DataType.Name(o.data_type), ("", np.object_))[1]
        dims = [batch, *o.dims] if config.max_batch_size > 0 else list(o.dims)
        fixed = np_type is not np.object_ and all(d > 0 for d in dims)
        out[o.name] = (int(np.prod(dims)) * np.dtype(np_type).itemsize if fixed
                       else VARIABLE_OUTPUT_BYTES)
    return out


def pa_output_bytes(config: ModelConfig, load: LoadSection) -> int:
    """perf_analyzer's ``--output-shared-memory-size``: the largest output (0: no shm)."""
    if load.shared_memory == "none":
        return 0
    return max(output_bytes(config, load.batch_size).values(), default=0)


def _grpc_request(model: str, inputs: list[tuple[str, str, list[int], int, int]],
                  region: str, outputs: dict[str, _Region]) -> bytes:
    from tritonclient.grpc import service_pb2

    req = service_pb2.ModelInferRequest(model_name=model)
    for name, datatype, shape, offset, size in inputs:
        t = req.inputs.add()
        t.name, t.datatype = name, datatype
        t.shape.extend(shape)
        t.parameters["shared_memory_region"].string_param = region
        t.parameters["shared_memory_byte_size"].int64_param = size
        t.parameters["shared_memory_offset"].int64_param = offset
    for name, out in outputs.items():
        o = req.outputs.add()
        o.name = name
        o.parameters["shared_memory_region"].string_param = out.name
        o.parameters["shared_memory_byte_size"].int64_param = out.size
    return bytes(req.SerializeToString())


def _http_request(inputs: list[tuple[str, str, list[int], int, int]], region: str,
                  outputs: dict[str, _Region]) -> tuple[bytes, None]:
    body = {"inputs": [{"name": n, "datatype": d, "shape": s, "parameters": {
        "shared_memory_region": region, "shared_memory_byte_size": size,
        "shared_memory_offset": off}} for n, d, s, off, size in inputs],
            "outputs": [{"name": n, "parameters": {"shared_memory_region": r.name,
                                                   "shared_memory_byte_size": r.size}}
                        for n, r in outputs.items()]}
    return json.dumps(body).encode(), None


def _create(region: _Region, chunks: Sequence[bytes]) -> Any:
    """Create the region (a new /dev/shm file) with ``chunks`` written one after another."""
    import tritonclient.utils.shared_memory as shm

    handle = shm.create_shared_memory_region(region.name, region.key, region.size,
                                             create_only=True)
    _LIVE.add(region.key)
    offset = 0
    for chunk in chunks:
        if chunk:
            shm.set_shared_memory_region(handle, [np.frombuffer(chunk, dtype=np.uint8)],
                                         offset=offset)
        offset += len(chunk)
    return handle


def _destroy(handle: Any, key: str) -> None:
    import tritonclient.utils.shared_memory as shm

    with contextlib.suppress(Exception):
        shm.destroy_shared_memory_region(handle)  # unmaps and unlinks (its last handle)
    _unlink(key)


@contextlib.contextmanager
def system_regions(client: TritonClient, protocol: str, model: str, config: ModelConfig,
                   samples: Sequence[Sample], datatypes: dict[str, str],
                   batch: int) -> Iterator[list[Payload]]:
    """The requests of ``samples`` over shared memory; the regions live inside the block."""
    tag = f"{_mine()}{uuid.uuid4().hex[:8]}"
    layout: list[list[tuple[str, str, list[int], int, int]]] = []
    chunks: list[bytes] = []
    offset = 0
    for sample in samples:
        one = []
        for name, arr in sample.items():
            data = raw_bytes(arr, datatypes[name])
            one.append((name, datatypes[name], [int(d) for d in arr.shape], offset, len(data)))
            chunks.append(data)
            offset += len(data)
        layout.append(one)
    if offset == 0:
        raise MeasurementError(f"load.shared_memory: model {model!r} has no input bytes to "
                               "place in shared memory")
    regions = [_Region(f"{tag}_in", f"/{tag}_in", offset)]
    outs = {n: _Region(f"{tag}_out{i}", f"/{tag}_out{i}", size)
            for i, (n, size) in enumerate(output_bytes(config, batch).items())}
    regions += outs.values()
    handles: list[tuple[Any, str]] = []
    registered: list[_Region] = []
    try:
        for region in regions:
            handles.append((_create(region, chunks if region is regions[0] else []),
                            region.key))
            client.register_system_shm(region.name, region.key, region.size)
            registered.append(region)
        if protocol == "grpc":
            yield [_grpc_request(model, one, regions[0].name, outs) for one in layout]
        else:
            yield [_http_request(one, regions[0].name, outs) for one in layout]
    finally:
        for region in registered:
            with contextlib.suppress(Exception):
                client.unregister_system_shm(region.name)
        for handle, key in handles:
            _destroy(handle, key)


def leftovers() -> list[str]:
    """Regions this process made that are still in /dev/shm (for tests and checks). Another
    process's are its own: a second study or test run on the machine has its regions open
    while it measures."""
    with contextlib.suppress(OSError):
        return sorted(p for p in os.listdir("/dev/shm") if p.startswith(_mine()))
    return []


def _mine() -> str:
    """How this process's region names begin (:data:`PREFIX`, then its PID)."""
    return f"{PREFIX}{os.getpid()}_"


def shared_payloads(stack: contextlib.ExitStack, endpoints: Endpoints, load: LoadSection,
                    model: str, config: ModelConfig, samples: Sequence[Sample],
                    datatypes: dict[str, str]) -> list[Payload] | None:
    """With ``load.shared_memory`` "system": the requests over regions that live until
    ``stack`` closes; with "none": None (the transport's own requests)."""
    memory = load.shared_memory
    if memory == "none":
        return None
    if memory != "system":
        raise MeasurementError(f"load.shared_memory must be 'none' or 'system', but got "
                               f"{memory!r}")
    if endpoints.host not in ("127.0.0.1", "localhost", "::1"):
        raise MeasurementError(f"load.shared_memory 'system' needs the server on this machine, "
                               f"but it is at {endpoints.grpc}")
    client = stack.enter_context(TritonClient(endpoints))
    return stack.enter_context(system_regions(client, load.protocol, model, config, samples,
                                              datatypes, load.batch_size))
