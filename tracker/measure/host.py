"""What a measurement was made on: the machine and the server's GPUs, as MLflow tags.

Results from different machines must never be compared blindly (a T4's best config is not an
H100's), so every trial run and the study's parent run carry these tags. All their names are
in tracker/tags.py. :func:`machine_tags` describes this host and a server's :class:`GpuSet`;
:func:`server_tags` the running server (its Triton version); :func:`measured_tags` what only
a measurement knows (whose GPU memory was read); :func:`merge_tags` folds one worker's tags
into a parent run's that other workers (maybe on other machines) wrote too.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import platform
from collections.abc import Mapping, Sequence
from typing import Any

import psutil

from tracker.errors import TrackerError
from tracker.measure.monitors import Monitor, memory_scope
from tracker.tags import (  # the machine's tag names
    GPU_COUNT,
    GPU_CUDA,
    GPU_DEVICE,
    GPU_DRIVER,
    GPU_MEMORY_SCOPE,
    GPU_NAMES,
    GPU_SOURCE,
    GPU_UUIDS,
    HOST_CPU,
    HOST_CPU_CORES,
    HOST_CPU_THREADS,
    HOST_MEMORY,
    HOST_MIXED,
    HOST_OS,
    HOST_PYTHON,
    TRITON_VERSION,
    VERSION,
)
from tracker.triton.client import TritonClient
from tracker.triton.endpoints import Endpoints
from tracker.triton.gpus import GpuSet, nvml_session

PACKAGES = {"tracker": ("triton-tracker",), "onnxruntime": ("onnxruntime", "onnxruntime-gpu"),
            "mlflow": ("mlflow", "mlflow-skinny"), "optuna": ("optuna",),
            "tritonclient": ("tritonclient",), "nvidia_pytriton": ("nvidia-pytriton",)}
#: parent-run tags whose values are lists: workers' values are united, not a conflict
_LISTS = {GPU_UUIDS: ", ", GPU_NAMES: ", ", GPU_SOURCE: "; "}
_PER_WORKER = {GPU_COUNT}  # recomputed from the united UUIDs on the parent


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith(("model name", "hardware", "cpu model")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def _version(names: Sequence[str]) -> str | None:
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


@functools.lru_cache(maxsize=1)
def host_tags() -> dict[str, str]:
    """This machine and the versions of what measures on it (cached: they do not change)."""
    tags = {HOST_CPU: _cpu_model(),
            HOST_CPU_CORES: str(psutil.cpu_count(logical=False) or "unknown"),
            HOST_CPU_THREADS: str(psutil.cpu_count() or os.cpu_count() or "unknown"),
            HOST_MEMORY: f"{psutil.virtual_memory().total / 1e9:.1f}",
            HOST_OS: f"{platform.system()} {platform.release()} {platform.machine()}",
            HOST_PYTHON: platform.python_version()}
    for key, names in PACKAGES.items():
        found = _version(names)
        if found is not None:
            tags[VERSION + key] = found
    return tags


def _cuda(version: int) -> str:
    return f"{version // 1000}.{version % 1000 // 10}"  # 12040 -> 12.4


def gpu_tags(gpus: GpuSet, nvml: Any = None) -> dict[str, str]:
    """The server's GPUs: count, UUIDs, names, one description per GPU, and (when NVML works
    here) the driver and its CUDA version."""
    tags = {GPU_COUNT: str(len(gpus)), GPU_SOURCE: gpus.source or "unknown",
            GPU_UUIDS: ", ".join(g.uuid for g in gpus) or "none",
            GPU_NAMES: ", ".join(g.name or "unknown" for g in gpus) or "none"}
    for gpu in gpus:
        parts = [gpu.name or "unknown model"]
        if gpu.memory_total_mb is not None:
            parts.append(f"{gpu.memory_total_mb:.0f} MB")
        if gpu.index is not None:
            parts.append(f"NVML index {gpu.index}")
        if gpu.pci_bus_id:
            parts.append(f"PCI {gpu.pci_bus_id}")
        if gpu.parent_uuid:
            parts.append(f"MIG instance {gpu.mig_index} of {gpu.parent_uuid}")
        tags[GPU_DEVICE + gpu.uuid] = ", ".join(parts)
    with nvml_session(nvml) as n:
        if n is not None:
            driver = _try(n.nvmlSystemGetDriverVersion)
            if driver is not None:
                tags[GPU_DRIVER] = driver.decode() if isinstance(driver, bytes) else str(driver)
            cuda = _try(n.nvmlSystemGetCudaDriverVersion)
            if cuda is not None:
                tags[GPU_CUDA] = _cuda(int(cuda))
    return tags


def _try(fn: Any) -> Any:
    try:
        return fn()
    except Exception:  # NVMLError: unknown, left out
        return None


def machine_tags(gpus: GpuSet, nvml: Any = None) -> dict[str, str]:
    """Every tag about the machine and the server's GPUs (for trial and parent runs)."""
    return {**host_tags(), **gpu_tags(gpus, nvml)}


def measured_tags(monitors: Sequence[Monitor]) -> dict[str, str]:
    """What a measurement adds: whose memory ``gpu_used_memory`` is (when a GPU's memory was
    read at all)."""
    scope = memory_scope(monitors)
    return {GPU_MEMORY_SCOPE: scope} if scope is not None else {}


def server_tags(endpoints: Endpoints) -> dict[str, str]:
    """The Triton version from the running server's metadata ({} if it will not say)."""
    try:
        with TritonClient(endpoints, timeout_s=5.0) as client:
            version = str(client.server_metadata()["version"])
    except TrackerError:  # the tag is left out, the measurement stands
        return {}
    return {TRITON_VERSION: version} if version else {}


def merge_tags(old: Mapping[str, str], new: Mapping[str, str]) -> dict[str, str]:
    """The tags to set on a run that holds ``old`` so that it also describes ``new`` (another
    worker's): list tags united, a differing machine fact kept as ``a | b`` and flagged with
    :data:`HOST_MIXED`. Only the keys that change are returned."""
    out: dict[str, str] = {}
    for key, value in new.items():
        before = old.get(key)
        if before is None or key in _PER_WORKER:
            out[key] = value
        elif key in _LISTS:
            sep = _LISTS[key]
            items = [i for i in before.split(sep) if i and i != "none"]
            items += [i for i in value.split(sep) if i and i != "none" and i not in items]
            out[key] = sep.join(items) or "none"
        elif value not in before.split(" | "):
            out[key] = f"{before} | {value}"
            out[HOST_MIXED] = "true"
    if GPU_UUIDS in out or GPU_COUNT in new:
        united = out.get(GPU_UUIDS, old.get(GPU_UUIDS, ""))
        out[GPU_COUNT] = str(len([u for u in united.split(", ") if u and u != "none"]))
    return {k: v for k, v in out.items() if old.get(k) != v}
