"""A stand-in for NVML with pynvml's (nvidia-ml-py's) functions, for a machine without GPU.

It keeps pynvml's habits that the code relies on: every call before ``nvmlInit`` (or after the
last ``nvmlShutdown``) raises, a MIG instance reports no utilization or power, an empty MIG
slot raises NotFound, ``usedGpuMemory`` is None where the driver will not say, and the PCI
bus id comes as bytes.
"""

from __future__ import annotations

import contextlib
import http.server
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any


class NVMLError(Exception):
    pass


@dataclass
class Proc:
    pid: int
    used_mb: float | None  # None: NVML_VALUE_NOT_AVAILABLE


@dataclass
class Dev:
    uuid: str
    name: str = "NVIDIA H100 80GB HBM3"
    bus_id: str = ""
    total_mb: float = 80_000.0
    used_mb: float = 0.0
    util: int = 0
    power_w: float | None = 100.0
    cc: tuple[int, int] = (9, 0)
    procs: list[Proc] | Callable[[], list[Proc]] = field(default_factory=list)
    mig: dict[int, Dev] | None = None  # MIG mode on: slot -> instance


Handle = tuple[int, int | None]  # (NVML index, MIG slot or None)


class StandInNvml:
    """NVML of a machine whose GPUs are ``devices`` (in NVML index order)."""

    NVMLError = NVMLError

    def __init__(self, devices: list[Dev], *, driver: str = "550.54.15", cuda: int = 12040,
                 fail_init: bool = False, accounting: bool = True) -> None:
        self.devices = devices
        self.driver, self.cuda = driver, cuda
        self.fail_init, self.accounting = fail_init, accounting
        self.inits = 0

    # -- library -------------------------------------------------------------------------
    def nvmlInit(self) -> None:
        if self.fail_init:
            raise NVMLError("NVML Shared Library Not Found")
        self.inits += 1

    def nvmlShutdown(self) -> None:
        self._live()
        self.inits -= 1

    def _live(self) -> None:
        if self.inits <= 0:
            raise NVMLError("Uninitialized")

    def nvmlSystemGetDriverVersion(self) -> str:
        self._live()
        return self.driver

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._live()
        return self.cuda

    # -- handles ---------------------------------------------------------------------------
    def _dev(self, h: Handle) -> Dev:
        self._live()
        gpu = self.devices[h[0]]
        if h[1] is None:
            return gpu
        assert gpu.mig is not None
        return gpu.mig[h[1]]

    def nvmlDeviceGetCount(self) -> int:
        self._live()
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> Handle:
        self._live()
        if not 0 <= i < len(self.devices):
            raise NVMLError("Invalid Argument")
        return (i, None)

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> Handle:
        self._live()
        for i, gpu in enumerate(self.devices):
            if gpu.uuid == uuid:
                return (i, None)
            for slot, inst in (gpu.mig or {}).items():
                if inst.uuid == uuid:
                    return (i, slot)
        raise NVMLError("Not Found")

    def nvmlDeviceGetMigMode(self, h: Handle) -> tuple[int, int]:
        gpu = self._dev(h)
        if gpu.cc < (8, 0):
            raise NVMLError("Not Supported")
        return (1, 1) if gpu.mig is not None else (0, 0)

    def nvmlDeviceGetMaxMigDeviceCount(self, h: Handle) -> int:
        self._dev(h)
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: Handle, slot: int) -> Handle:
        gpu = self._dev(h)
        if gpu.mig is None or slot not in gpu.mig:
            raise NVMLError("Not Found")
        return (h[0], slot)

    # -- facts and readings --------------------------------------------------------------
    def nvmlDeviceGetUUID(self, h: Handle) -> str:
        return self._dev(h).uuid

    def nvmlDeviceGetName(self, h: Handle) -> str:
        return self._dev(h).name

    def nvmlDeviceGetPciInfo(self, h: Handle) -> Any:
        return SimpleNamespace(busId=self._dev(h).bus_id.encode())

    def nvmlDeviceGetCudaComputeCapability(self, h: Handle) -> tuple[int, int]:
        return self._dev(h).cc

    def nvmlDeviceGetMemoryInfo(self, h: Handle) -> Any:
        d = self._dev(h)
        used = d.used_mb if d.mig is None else sum(m.used_mb for m in d.mig.values())
        return SimpleNamespace(total=int(d.total_mb * 1e6), used=int(used * 1e6),
                               free=int((d.total_mb - used) * 1e6))

    def nvmlDeviceGetComputeRunningProcesses(self, h: Handle) -> list[Any]:
        d = self._dev(h)
        if not self.accounting:
            raise NVMLError("Not Supported")
        procs = d.procs() if callable(d.procs) else d.procs
        return [SimpleNamespace(pid=p.pid, usedGpuMemory=None if p.used_mb is None
                                else int(p.used_mb * 1e6)) for p in procs]

    def nvmlDeviceGetUtilizationRates(self, h: Handle) -> Any:
        d = self._dev(h)
        if h[1] is not None:
            raise NVMLError("Not Supported")  # a MIG instance has none of its own
        return SimpleNamespace(gpu=d.util, memory=0)

    def nvmlDeviceGetPowerUsage(self, h: Handle) -> int:
        d = self._dev(h)
        if h[1] is not None or d.power_w is None:
            raise NVMLError("Not Supported")
        return int(d.power_w * 1000)  # mW


# four H100s; GPU 3 in MIG mode with two instances. UUIDs of GPUs 0 and 1 share "GPU-1a2b".
UUIDS = ["GPU-1a2b3c4d-0000-4000-8000-000000000000", "GPU-1a2b7777-1111-4111-8111-111111111111",
         "GPU-5e6f0000-2222-4222-8222-222222222222", "GPU-9c8d0000-3333-4333-8333-333333333333"]
MIG_UUIDS = ["MIG-0f1e2d3c-4444-5444-9444-444444444444",
             "MIG-7a6b5c4d-5555-5555-9555-555555555555"]
FOREIGN_PID = 2 ** 22 + 17  # above the default pid_max: no process of this machine


Procs = list[Proc] | Callable[[], list[Proc]]


def four_gpus(own: dict[str, Procs] | None = None, **options: Any) -> StandInNvml:
    """Four GPUs with different memory use, utilization and power, each with a foreign
    process; ``own`` adds processes to a device by UUID (a server's; a callable is asked at
    each reading)."""
    mine = own or {}

    def procs(uuid: str, foreign_mb: float) -> Callable[[], list[Proc]]:
        def now() -> list[Proc]:
            extra = mine.get(uuid, [])
            return [Proc(FOREIGN_PID, foreign_mb), *(extra() if callable(extra) else extra)]
        return now

    devices = [Dev(UUIDS[i], bus_id=f"00000000:{bus}:00.0", used_mb=used, util=util,
                   power_w=power, procs=procs(UUIDS[i], used - 500))
               for i, (bus, used, util, power) in enumerate(
                   [("18", 11_000, 10, 110.0), ("2A", 23_000, 20, 220.0),
                    ("3D", 37_000, 30, 330.0), ("9B", 0, 40, 440.0)])]
    devices[3].mig = {
        0: Dev(MIG_UUIDS[0], name="NVIDIA H100 80GB HBM3 MIG 3g.40gb", total_mb=40_000,
               used_mb=7_000, procs=procs(MIG_UUIDS[0], 6_000)),
        1: Dev(MIG_UUIDS[1], name="NVIDIA H100 80GB HBM3 MIG 3g.40gb", total_mb=40_000,
               used_mb=9_000, procs=procs(MIG_UUIDS[1], 9_000))}
    return StandInNvml(devices, **options)


@contextlib.contextmanager
def serve_text(text: str) -> Iterator[str]:
    """An HTTP endpoint serving ``text`` (Triton's metrics format); yields its URL."""
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = text.encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/metrics"
    finally:
        httpd.shutdown()
        httpd.server_close()


#: Triton's metrics of a server that sees all four GPUs (the physical ones; DCGM has no MIG)
METRICS = "\n".join(
    ["# HELP nv_gpu_utilization GPU utilization rate [0.0 - 1.0)",
     "# TYPE nv_gpu_utilization gauge"]
    + [f'nv_gpu_utilization{{gpu_uuid="{u}"}} 0.{i + 1}' for i, u in enumerate(UUIDS)]
    + [f'nv_gpu_memory_used_bytes{{gpu_uuid="{u}"}} {(i + 1) * 10**9}'
       for i, u in enumerate(UUIDS)]
    + [f'nv_gpu_power_usage{{gpu_uuid="{u}"}} {(i + 1) * 50}.5' for i, u in enumerate(UUIDS)]
    + ['nv_inference_count{model="m",version="1"} 42', "nv_cpu_utilization 0.2"]) + "\n"
