"""Monitors: NVML through a stand-in with pynvml's interface (no GPU here), Triton's metrics
text, a real process tree through psutil, and the sampler's aggregation."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Callable

import pytest

from tests.support.nvml import four_gpus
from tracker.measure.monitor_sampler import Sampler
from tracker.measure.monitors import (
    Monitor,
    NvmlMonitor,
    ProcessMonitor,
    default_monitors,
    parse_triton_metrics,
)
from tracker.triton.gpus import Gpu, GpuSet
from tracker.triton.server.gpu_sets import cuda_gpu_set


def test_nvml_monitor_reads_each_gpu_and_totals() -> None:
    fake = four_gpus()
    gpus = cuda_gpu_set({"CUDA_VISIBLE_DEVICES": "0,1"}, fake)
    fake.devices[1].power_w = None  # some boards cannot tell their power
    mon = NvmlMonitor.create(gpus, nvml=fake)  # no pids: each device's whole memory
    assert mon is not None
    s = mon.sample()
    assert s["gpu_used_memory"] == pytest.approx(34_000.0)  # 11,000 + 23,000 MB
    assert s["gpu_utilization"] == pytest.approx(15.0)  # mean of 10 and 20
    assert s["gpu_power_usage"] == pytest.approx(110.0)  # only GPU 0 can tell
    assert s["gpu_used_memory.gpu1"] == pytest.approx(23_000.0)
    assert "gpu_power_usage.gpu1" not in s  # absent, not zero
    assert mon.memory_scopes == {"device"}
    mon.close()
    assert fake.inits == 0


def test_no_nvml_means_no_monitor() -> None:
    gpus = cuda_gpu_set({"CUDA_VISIBLE_DEVICES": "1"}, four_gpus())
    assert NvmlMonitor.create(gpus, nvml=four_gpus(fail_init=True)) is None
    assert NvmlMonitor.create(GpuSet(), nvml=four_gpus()) is None  # the server has no GPU
    remote = GpuSet((Gpu(uuid="GPU-of-another-machine"),))
    assert NvmlMonitor.create(remote, nvml=four_gpus()) is None
    real = NvmlMonitor.create(gpus)  # the real pynvml: None on this GPU-less machine
    assert real is None or "gpu_used_memory" in real.sample()


METRICS = """# HELP nv_gpu_utilization GPU utilization rate [0.0 - 1.0)
# TYPE nv_gpu_utilization gauge
nv_gpu_utilization{gpu_uuid="GPU-aa"} 0.25
nv_gpu_utilization{gpu_uuid="GPU-bb"} 0.75
nv_gpu_memory_used_bytes{gpu_uuid="GPU-aa"} 2000000000
nv_gpu_memory_used_bytes{gpu_uuid="GPU-bb"} 1000000000
nv_gpu_power_usage{gpu_uuid="GPU-aa"} 70.5
nv_inference_count{model="m",version="1"} 42
nv_cpu_utilization 0.125
nv_cpu_memory_used_bytes 866041856
"""


def test_triton_metrics_text_maps_to_our_names() -> None:
    s = parse_triton_metrics(METRICS)
    assert s["gpu_utilization"] == pytest.approx(50.0)
    assert s["gpu_used_memory"] == pytest.approx(3000.0)
    assert s["gpu_power_usage"] == pytest.approx(70.5)
    assert s["gpu_utilization.GPU-bb"] == pytest.approx(75.0)
    assert s["cpu_utilization"] == pytest.approx(12.5)
    assert s["cpu_used_ram"] == pytest.approx(866.041856)
    cpu_only = parse_triton_metrics("nv_cpu_utilization 0.5\n")
    assert not any(k.startswith("gpu") for k in cpu_only)


def _until(predicate: Callable[[], bool], timeout_s: float = 20.0) -> bool:
    """Poll ``predicate`` until it holds or ``timeout_s`` passes (no fixed sleeps: a crowded
    machine only makes it take longer)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_process_monitor_sees_a_busy_process_tree() -> None:
    """An idle parent whose grandchild spins until killed: the monitor follows the tree (it
    sees the grandchild's CPU), and a tree that is gone reads as nothing."""
    import psutil

    code = "while True: pass\n"
    parent = subprocess.Popen([sys.executable, "-c",
                               f"import subprocess,sys; subprocess.run([sys.executable,'-c',"
                               f"{code!r}])"])
    tree: list[psutil.Process] = []
    try:
        assert _until(lambda: bool(psutil.Process(parent.pid).children(recursive=True)))
        tree = psutil.Process(parent.pid).children(recursive=True)
        mon = ProcessMonitor(lambda: [parent.pid])
        seen: dict[str, float] = {}

        def busy() -> bool:
            seen.update(mon.sample())
            return seen.get("cpu_utilization", 0.0) > 3.0

        # the spinning grandchild burns a core; an idle tree reads ~0, so a reading above 3%
        # shows the tree is followed (it comes sooner or later, however crowded the machine)
        assert _until(busy), seen
        assert seen["cpu_used_ram"] > 1.0
    finally:
        for proc in [psutil.Process(parent.pid), *tree]:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        parent.wait()
        psutil.wait_procs(tree, timeout=10)
    gone = ProcessMonitor([parent.pid])
    assert gone.sample() == {}  # nothing measurable: nothing reported


class Scripted(Monitor):
    name = "scripted"

    def __init__(self, values: list[dict[str, float]]) -> None:
        self.values = values

    def sample(self) -> dict[str, float]:
        return self.values.pop(0) if self.values else {}


class Broken(Monitor):
    def sample(self) -> dict[str, float]:
        raise RuntimeError("boom")


def test_sampler_means_and_peaks_over_a_span() -> None:
    first = Scripted([{"gpu_utilization": 10, "gpu_used_memory": 100},
                      {"gpu_utilization": 30, "gpu_used_memory": 300},
                      {"gpu_utilization": 20, "gpu_used_memory": 200}])
    second = Scripted([{"gpu_utilization": 99, "cpu_utilization": 5}] * 3)
    sampler = Sampler([Broken(), first, second])
    t0 = time.perf_counter_ns()
    for _ in range(3):
        sampler.sample_once()
    out = sampler.aggregate(t0, time.perf_counter_ns())
    assert out["gpu_utilization"] == pytest.approx(20.0)  # first monitor wins
    assert out["gpu_used_memory"] == 300  # peak
    assert out["cpu_utilization"] == 5
    assert sampler.aggregate(0, 1) != {}  # a tiny span takes the nearest sample


def test_sampler_thread_samples_and_stops() -> None:
    sampler = Sampler([Scripted([{"cpu_utilization": 1.0}] * 100)], interval_s=0.01)
    sampler.start()
    assert _until(lambda: len(sampler.samples) >= 3)
    sampler.stop()
    n = len(sampler.samples)
    time.sleep(0.05)  # five intervals: a thread still running would add samples
    assert len(sampler.samples) == n


def test_default_monitors_pick_what_works() -> None:
    gpus = cuda_gpu_set({"CUDA_VISIBLE_DEVICES": "1"}, four_gpus())
    mons = default_monitors(gpus, metrics_url="http://127.0.0.1:9/metrics", pids=[],
                            nvml=four_gpus())
    assert [m.name for m in mons] == ["process", "nvml", "triton_metrics"]
    assert mons[2].sample() == {}  # unreachable endpoint: no metrics, no error
    assert [m.name for m in default_monitors(gpus, nvml=four_gpus(fail_init=True))] == []
    assert [m.name for m in default_monitors(GpuSet(), nvml=four_gpus())] == []


def test_no_monitor_without_the_servers_gpu_set() -> None:
    with pytest.raises(TypeError):
        default_monitors(metrics_url="http://127.0.0.1:9/metrics")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="needs the server's GpuSet"):
        default_monitors([1], nvml=four_gpus())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="needs the server's GpuSet"):
        default_monitors(None, pids=[1])  # type: ignore[arg-type]
