"""Monitors sampled while a level is measured: GPUs through NVML, Triton's metrics endpoint,
and the local server's process tree (psutil).

Every monitor answers :meth:`Monitor.sample` with the metrics it could read just now; a metric
it cannot read is absent, never a zero. Names are DESIGN.md's: ``gpu_used_memory`` (MB),
``gpu_utilization`` (%), ``gpu_power_usage`` (W), ``cpu_used_ram`` (MB), ``cpu_utilization``
(% of the host's CPU capacity). GPU figures are about the server's own GPUs only (its
:class:`~tracker.triton.gpus.GpuSet`): totals over them (memory, power) or their mean
(utilization), with per-GPU values under ``NAME.gpuN`` (NVML index; ``gpuN_migK`` for a MIG
instance) or ``NAME.<uuid>`` (Triton's metrics). The sampler that polls them while a level
is measured: tracker/measure/monitor_sampler.py.
"""

from __future__ import annotations

import logging
import re
import urllib.request
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Sequence
from typing import Any

import psutil

from tracker.measure.cache_metrics import CacheRates
from tracker.triton.gpus import Gpu, GpuSet

log = logging.getLogger(__name__)

MB = 1e6


class Monitor(ABC):
    """One source of metrics. ``sample`` must be cheap and must not raise for a metric that
    is unavailable: it leaves it out."""

    name = "monitor"

    @abstractmethod
    def sample(self) -> dict[str, float]:
        """The metrics readable now."""

    def close(self) -> None:  # noqa: B027 - optional hook, most monitors hold nothing
        """Release what the monitor holds."""


def close_monitors(monitors: Sequence[Monitor]) -> None:
    """Close each monitor (``sweep`` leaves them open for the caller); never raises."""
    for monitor in monitors:
        try:
            monitor.close()
        except Exception as exc:  # closing must not hide the measurement's own outcome
            log.debug("closing monitor %s failed: %s", monitor.name, exc)


def memory_scope(monitors: Sequence[Monitor]) -> str | None:
    """Whose memory ``gpu_used_memory`` was: ``processes`` (the server's own processes, NVML's
    accounting), ``device`` (each GPU's whole used memory), ``processes+device`` (some GPUs
    each way); from the first monitor that read it (the one whose figure the sampler keeps).
    None when no monitor read GPU memory."""
    for monitor in monitors:
        scopes = getattr(monitor, "memory_scopes", None)
        if scopes:
            return "+".join(sorted(scopes, reverse=True))
    return None


def _gpu_totals(per_gpu: dict[int | str, dict[str, float]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for metric in ("gpu_used_memory", "gpu_power_usage", "gpu_utilization"):
        values = [v[metric] for v in per_gpu.values() if metric in v]
        if values:  # totals, except utilization: the mean over the GPUs
            total = sum(values)
            out[metric] = total / len(values) if metric == "gpu_utilization" else total
    for key, readings in per_gpu.items():
        label = key if isinstance(key, str) else f"gpu{key}"
        out.update({f"{m}.{label}": v for m, v in readings.items()})
    return out


class NvmlMonitor(Monitor):
    """GPU memory, utilization and power of a server's GPUs through NVML (``nvidia-ml-py``'s
    ``pynvml``), each device found by its UUID.

    ``gpu_used_memory`` is the memory of the server's own processes on each GPU (NVML's
    per-process accounting, the processes of ``pids`` and their descendants; for a MIG
    instance, those on that instance) where NVML tells it and its pids are this machine's,
    else the device's whole used memory;
    :attr:`memory_scopes` says which was read (``processes`` / ``device``). A MIG instance
    has no utilization or power of its own in NVML: those are absent for it, not its parent's.

    ``nvml`` is the pynvml module or an object with the same functions (tests pass a stand-in).
    Use :meth:`create`, which returns None where NVML does not work or knows none of the GPUs.
    """

    name = "nvml"

    def __init__(self, nvml: Any, gpus: GpuSet,
                 pids: Sequence[int] | Callable[[], Sequence[int]] | None = None) -> None:
        self.nvml = nvml
        self._pids = pids
        self.memory_scopes: set[str] = set()
        nvml.nvmlInit()
        self.handles: dict[str, tuple[Gpu, Any]] = {}
        for gpu in gpus:
            if gpu.index is None:  # not a device of this machine (a remote server's GPU)
                continue
            handle = self._read(nvml.nvmlDeviceGetHandleByUUID, gpu.uuid)
            if handle is not None:
                self.handles[gpu.label] = (gpu, handle)

    @classmethod
    def create(cls, gpus: GpuSet, nvml: Any = None,
               pids: Sequence[int] | Callable[[], Sequence[int]] | None = None
               ) -> NvmlMonitor | None:
        if not gpus:
            return None
        if nvml is None:
            try:
                import pynvml
            except ImportError:
                return None
            nvml = pynvml
        try:
            monitor = cls(nvml, gpus, pids)
        except Exception as exc:  # NVMLError and its many subclasses: NVML does not work here
            log.debug("NVML unavailable: %s", exc)
            return None
        if not monitor.handles:
            monitor.close()
            return None
        return monitor

    @staticmethod
    def _read(fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except Exception:  # NVMLError_NotSupported etc.: that metric is absent
            return None

    def _tree(self) -> set[int] | None:
        """The server's pids and their descendants; None when the server's pids are unknown."""
        if self._pids is None:
            return None
        roots = list(self._pids() if callable(self._pids) else self._pids)
        if not roots:
            return None
        found = set(roots)
        for pid in roots:
            try:
                found.update(c.pid for c in psutil.Process(pid).children(recursive=True))
            except psutil.Error:
                continue
        return found

    def _own_memory(self, handle: Any, tree: set[int] | None) -> float | None:
        """MB used by the server's processes on this device; None where NVML cannot say."""
        if tree is None:
            return None
        procs = self._read(self.nvml.nvmlDeviceGetComputeRunningProcesses, handle)
        if procs is None:
            return None
        if procs and not any(psutil.pid_exists(int(p.pid)) for p in procs):
            return None  # NVML's pids are another PID namespace's (a tracker in a container)
        used = 0.0
        for proc in procs:
            if int(proc.pid) in tree:
                if proc.usedGpuMemory is None:  # not available (e.g. without permission)
                    return None
                used += float(proc.usedGpuMemory)
        return used / MB

    def sample(self) -> dict[str, float]:
        n = self.nvml
        tree = self._tree()
        per_gpu: dict[int | str, dict[str, float]] = {}
        for label, (_gpu, h) in self.handles.items():
            values: dict[str, float] = {}
            own = self._own_memory(h, tree)
            if own is not None:
                values["gpu_used_memory"] = own
                self.memory_scopes.add("processes")
            else:
                mem = self._read(n.nvmlDeviceGetMemoryInfo, h)
                if mem is not None:
                    values["gpu_used_memory"] = float(mem.used) / MB
                    self.memory_scopes.add("device")
            util = self._read(n.nvmlDeviceGetUtilizationRates, h)
            if util is not None:
                values["gpu_utilization"] = float(util.gpu)
            power = self._read(n.nvmlDeviceGetPowerUsage, h)
            if power is not None:
                values["gpu_power_usage"] = float(power) / 1000.0  # mW -> W
            per_gpu[label] = values
        return _gpu_totals(per_gpu)

    def close(self) -> None:
        self._read(self.nvml.nvmlShutdown)


_METRIC_LINE = re.compile(r'^(nv_[a-z_]+)(?:\{([^}]*)\})?\s+([-+0-9.eE]+|NaN)\s*$')
_UUID = re.compile(r'gpu_uuid="([^"]+)"')


def parse_triton_metrics(text: str, uuids: Collection[str] | None = None) -> dict[str, float]:
    """Our metric names from Triton's Prometheus text (``nv_gpu_*`` per GPU, ``nv_cpu_*``).
    ``uuids``: only the ``nv_gpu_*`` series whose ``gpu_uuid`` is one of them (a server's
    GPUs); None: every series."""
    per_gpu: dict[int | str, dict[str, float]] = {}
    out: dict[str, float] = {}
    gpu_map = {"nv_gpu_utilization": ("gpu_utilization", 100.0),
               "nv_gpu_memory_used_bytes": ("gpu_used_memory", 1 / MB),
               "nv_gpu_power_usage": ("gpu_power_usage", 1.0)}
    for line in text.splitlines():
        m = _METRIC_LINE.match(line.strip())
        if not m or m.group(3) == "NaN":
            continue
        name, labels, value = m.group(1), m.group(2) or "", float(m.group(3))
        if name in gpu_map:
            found = _UUID.search(labels)
            uuid = found.group(1) if found else "gpu"
            if uuids is not None and uuid not in uuids:
                continue  # another server's GPU (or an unlabelled series)
            metric, scale = gpu_map[name]
            per_gpu.setdefault(uuid, {})[metric] = value * scale
        elif name == "nv_cpu_utilization":
            out["cpu_utilization"] = value * 100.0
        elif name == "nv_cpu_memory_used_bytes":
            out["cpu_used_ram"] = value / MB
    out.update(_gpu_totals(per_gpu))
    return out


class TritonMetricsMonitor(Monitor):
    """Triton's metrics endpoint (docker and remote servers, or any server with metrics on).
    ``uuids``: the server's GPUs; only their ``nv_gpu_*`` series count (there
    ``gpu_used_memory`` is each device's whole used memory: Triton does not split it by
    process). An unreachable endpoint yields no metrics for that sample."""

    name = "triton_metrics"

    def __init__(self, url: str, uuids: Collection[str], timeout_s: float = 2.0) -> None:
        self.url, self.timeout_s = url, timeout_s
        self.uuids = frozenset(uuids)
        self.memory_scopes: set[str] = set()
        self.cache = CacheRates()  # the response cache's hits and times (cache_metrics.py)

    def sample(self) -> dict[str, float]:
        try:
            with urllib.request.urlopen(self.url, timeout=self.timeout_s) as resp:
                text = resp.read().decode(errors="replace")
        except OSError as exc:
            log.debug("metrics endpoint %s unreadable: %s", self.url, exc)
            return {}
        out = {**parse_triton_metrics(text, self.uuids), **self.cache.update(text)}
        if "gpu_used_memory" in out:
            self.memory_scopes.add("device")
        return out


class ProcessMonitor(Monitor):
    """CPU and resident memory of a local server's process tree (the pids and their
    children). ``pids`` is a list or a callable returning the current list."""

    name = "process"

    def __init__(self, pids: Sequence[int] | Callable[[], Sequence[int]]) -> None:
        self._pids = pids
        self._procs: dict[int, psutil.Process] = {}
        self._cpus = psutil.cpu_count() or 1
        self.sample()  # primes cpu_percent, whose first reading is meaningless

    def _tree(self) -> list[psutil.Process]:
        roots = self._pids() if callable(self._pids) else self._pids
        found: dict[int, psutil.Process] = {}
        for pid in roots:
            try:
                root = self._procs.get(pid) or psutil.Process(pid)
                found[pid] = root
                for child in root.children(recursive=True):
                    found[child.pid] = self._procs.get(child.pid, child)
            except psutil.Error:
                continue
        return list(found.values())

    def sample(self) -> dict[str, float]:
        cpu, rss, measured = 0.0, 0.0, False
        seen: dict[int, psutil.Process] = {}
        for proc in self._tree():
            try:
                with proc.oneshot():
                    pct = proc.cpu_percent(None)
                    rss += proc.memory_info().rss
            except psutil.Error:
                continue
            if proc.pid in self._procs:  # a new process's first reading is meaningless
                cpu += pct
                measured = True
            seen[proc.pid] = proc
        self._procs = seen
        if not seen:
            return {}
        out = {"cpu_used_ram": rss / MB}
        if measured:
            out["cpu_utilization"] = cpu / self._cpus
        return out


def default_monitors(gpus: GpuSet, metrics_url: str | None = None,
                     pids: Sequence[int] | Callable[[], Sequence[int]] | None = None,
                     nvml: Any = None) -> list[Monitor]:
    """The monitors that work here, for the server whose GPUs are ``gpus`` (its
    ``gpu_set()``; required: an empty set means the server has no GPU): the process tree when
    pids are known (local and docker servers), NVML on those GPUs when it works, and the
    metrics endpoint (only those GPUs' series) when its URL is known, in that order."""
    if not isinstance(gpus, GpuSet):
        raise TypeError(f"default_monitors needs the server's GpuSet (server.gpu_set()), "
                        f"but got {type(gpus).__name__}")
    out: list[Monitor] = []
    if pids is not None:
        out.append(ProcessMonitor(pids))
    gpu = NvmlMonitor.create(gpus, nvml=nvml, pids=pids)
    if gpu is not None:
        out.append(gpu)
    if metrics_url:
        out.append(TritonMetricsMonitor(metrics_url, gpus.uuids))
    return out
