"""The GPUs of this machine as NVML sees them, by identity (UUID), never by a guessed index.

:class:`Gpu` is one GPU or MIG instance, :class:`GpuSet` the GPUs of one server (with where
that set came from), :class:`Inventory` what NVML lists (``nvidia-ml-py``'s ``pynvml``, or any
object with the same functions: tests pass a stand-in). Where NVML does not work (no driver,
no GPU) :func:`nvml_session` gives None. Which of these GPUs a server was given, from the names
the server uses: tracker/triton/server/gpu_sets.py.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from tracker.errors import GpuError

log = logging.getLogger(__name__)

MB = 1e6
NVML_MIG_ENABLED = 1  # pynvml.NVML_DEVICE_MIG_ENABLE


@dataclass(frozen=True)
class Gpu:
    """One GPU (or MIG instance) a server uses. ``index`` is NVML's index of the physical GPU
    (a MIG instance's parent), None when this machine's NVML does not know the device (a
    remote server's GPU); ``parent_uuid`` and ``mig_index`` are set for a MIG instance."""

    uuid: str
    index: int | None = None
    name: str | None = None
    memory_total_mb: float | None = None
    parent_uuid: str | None = None
    mig_index: int | None = None
    pci_bus_id: str | None = None

    @property
    def is_mig(self) -> bool:
        return self.parent_uuid is not None

    @property
    def label(self) -> str:
        """The suffix of its per-GPU metrics: ``gpu1``, ``gpu3_mig0``, or the UUID."""
        if self.index is None:
            return self.uuid
        return f"gpu{self.index}" + (f"_mig{self.mig_index}" if self.is_mig else "")


@dataclass(frozen=True)
class GpuSet:
    """The GPUs of one server (empty: none, or none that can be known here). ``source`` says
    where the set came from, in words (logged as a tag)."""

    gpus: tuple[Gpu, ...] = ()
    source: str = ""

    def __iter__(self) -> Iterator[Gpu]:
        return iter(self.gpus)

    def __len__(self) -> int:
        return len(self.gpus)

    def __bool__(self) -> bool:
        return bool(self.gpus)

    @property
    def uuids(self) -> frozenset[str]:
        return frozenset(g.uuid for g in self.gpus)


@dataclass(frozen=True)
class Inventory:
    """What NVML sees: physical GPUs in NVML index order, and the MIG instances of each GPU
    in MIG mode (by the parent's UUID)."""

    physical: tuple[Gpu, ...]
    mig: Mapping[str, tuple[Gpu, ...]] = field(default_factory=dict)
    capability: Mapping[str, tuple[int, int]] = field(default_factory=dict)

    def everything(self) -> tuple[Gpu, ...]:
        """Every device a process given all GPUs can use: each GPU, or its MIG instances."""
        out: list[Gpu] = []
        for gpu in self.physical:
            out.extend(self.mig.get(gpu.uuid) or (gpu,))
        return tuple(out)

    def migs(self) -> tuple[Gpu, ...]:
        return tuple(m for ms in self.mig.values() for m in ms)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _try(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception:  # NVMLError_NotSupported and friends: that fact is unknown
        return None


@contextlib.contextmanager
def nvml_session(nvml: Any = None) -> Iterator[Any | None]:
    """NVML initialized for the block (pynvml unless ``nvml`` is given), or None where it
    does not work; shut down (NVML counts inits) on the way out."""
    if nvml is None:
        try:
            import pynvml
        except ImportError:
            yield None
            return
        nvml = pynvml
    try:
        nvml.nvmlInit()
    except Exception as exc:  # NVMLError: no driver / no GPU on this machine
        log.debug("NVML unavailable: %s", exc)
        yield None
        return
    try:
        yield nvml
    finally:
        _try(nvml.nvmlShutdown)


def _device(nvml: Any, handle: Any, index: int, parent: str | None = None,
            mig_index: int | None = None) -> Gpu:
    mem = _try(nvml.nvmlDeviceGetMemoryInfo, handle)
    pci = None if parent else _try(nvml.nvmlDeviceGetPciInfo, handle)
    name = _try(nvml.nvmlDeviceGetName, handle)
    return Gpu(uuid=_text(nvml.nvmlDeviceGetUUID(handle)), index=index,
               name=_text(name) if name is not None else None,
               memory_total_mb=float(mem.total) / MB if mem is not None else None,
               parent_uuid=parent, mig_index=mig_index,
               pci_bus_id=_text(pci.busId).upper() if pci is not None else None)


def inventory(nvml: Any) -> Inventory:
    """Read the devices of an initialized NVML (:class:`GpuError` when NVML fails at it)."""
    try:
        return _inventory(nvml)
    except Exception as exc:  # NVMLError (a GPU fallen off the bus, a driver mismatch, ...)
        raise GpuError(f"NVML could not list this machine's GPUs: {exc}") from exc


def _inventory(nvml: Any) -> Inventory:
    physical: list[Gpu] = []
    mig: dict[str, tuple[Gpu, ...]] = {}
    capability: dict[str, tuple[int, int]] = {}
    for i in range(int(nvml.nvmlDeviceGetCount())):
        handle = nvml.nvmlDeviceGetHandleByIndex(i)
        gpu = _device(nvml, handle, i)
        physical.append(gpu)
        cc = _try(nvml.nvmlDeviceGetCudaComputeCapability, handle)
        if cc is not None:
            capability[gpu.uuid] = (int(cc[0]), int(cc[1]))
        mode = _try(nvml.nvmlDeviceGetMigMode, handle)
        if mode is None or int(mode[0]) != NVML_MIG_ENABLED:
            continue
        instances = []
        for j in range(int(_try(nvml.nvmlDeviceGetMaxMigDeviceCount, handle) or 0)):
            mig_handle = _try(nvml.nvmlDeviceGetMigDeviceHandleByIndex, handle, j)
            if mig_handle is not None:  # NotFound: an empty slot
                instances.append(_device(nvml, mig_handle, i, parent=gpu.uuid, mig_index=j))
        mig[gpu.uuid] = tuple(instances)
    return Inventory(tuple(physical), mig, capability)
