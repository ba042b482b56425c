"""Each server's GPU figures are its own GPUs' only: two servers on one four-GPU machine (the
NVML stand-in), one on GPU 1, one on a MIG instance of GPU 3, each with a real process tree
whose GPU memory NVML accounts per process, and a Triton metrics endpoint with four gpu_uuid
series. Then the machine tags those runs carry, merged on a parent run in real MLflow."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest
from mlflow import MlflowClient

from tests.support.nvml import METRICS, MIG_UUIDS, UUIDS, Proc, StandInNvml, four_gpus, serve_text
from tracker.measure import host
from tracker.measure.monitor_sampler import Sampler
from tracker.measure.monitors import default_monitors, memory_scope
from tracker.spec import ServerSection
from tracker.tracking.machine import record_machine
from tracker.triton.gpus import Gpu, GpuSet
from tracker.triton.server.local import LocalTritonServer

CHILD = ("import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', "
         "'import time; time.sleep(60)']); print(p.pid, flush=True); time.sleep(60)")


class Tree:
    """A process with one child, as a server with a backend stub: ``root``, ``stub``."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE,
                                     text=True)
        assert self.proc.stdout is not None
        self.root, self.stub = self.proc.pid, int(self.proc.stdout.readline())

    def stop(self) -> None:
        subprocess.run(["kill", str(self.stub)], check=False)
        self.proc.kill()
        self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


@pytest.fixture()
def trees() -> Iterator[tuple[Tree, Tree]]:
    a, b = Tree(), Tree()
    try:
        yield a, b
    finally:
        a.stop()
        b.stop()


@pytest.fixture()
def metrics_url() -> Iterator[str]:
    with serve_text(METRICS) as url:
        yield url


def sample(gpus: GpuSet, url: str | None, pids: list[int] | None, nvml: StandInNvml
           ) -> tuple[dict[str, float], str | None]:
    mons = default_monitors(gpus, url, pids=pids, nvml=nvml)
    sampler = Sampler(mons)
    sampler.sample_once()
    scope = memory_scope(mons)
    sampler.close()
    return sampler.samples[-1][1], scope


def about(values: dict[str, float], uuids: list[str]) -> list[str]:
    return [k for k in values if any(u in k for u in uuids)]


def test_two_servers_each_see_only_their_own_gpus(trees: tuple[Tree, Tree], metrics_url: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = trees
    # the stubs (children of the servers' roots) hold GPU memory beside a foreign process
    nvml = four_gpus(own={UUIDS[1]: [Proc(a.stub, 700.0)], MIG_UUIDS[0]: [Proc(b.stub, 400.0)]})
    on_one = LocalTritonServer(ServerSection(gpus=[1]))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", MIG_UUIDS[0])
    on_mig = LocalTritonServer()

    s, scope = sample(on_one.gpu_set(nvml), metrics_url, [a.root], nvml)
    assert s["gpu_used_memory"] == pytest.approx(700.0)  # not GPU 1's 23,000, not the sum
    assert s["gpu_used_memory.gpu1"] == pytest.approx(700.0)
    assert (s["gpu_utilization"], s["gpu_power_usage"]) == pytest.approx((20.0, 220.0))
    # Triton's series of GPU 1 beside it (whole-device memory), and no other GPU's at all
    assert s[f"gpu_used_memory.{UUIDS[1]}"] == pytest.approx(2000.0)
    assert about(s, [UUIDS[0], UUIDS[2], UUIDS[3]]) == []
    assert not [k for k in s if k.startswith("gpu") and k.endswith(("gpu0", "gpu2", "mig0"))]
    assert scope == "processes"

    s, scope = sample(on_mig.gpu_set(nvml), metrics_url, [b.root], nvml)
    assert s["gpu_used_memory"] == pytest.approx(400.0)  # its instance, its processes
    assert s["gpu_used_memory.gpu3_mig0"] == pytest.approx(400.0)
    # a MIG instance has no utilization or power of its own; GPU 3's are not the server's
    assert "gpu_utilization" not in s and "gpu_power_usage" not in s
    assert about(s, UUIDS) == []
    assert scope == "processes"
    assert nvml.inits == 0  # every monitor and resolution shut NVML down


def test_whole_device_memory_when_nvml_cannot_split_it(trees: tuple[Tree, Tree]) -> None:
    a, b = trees
    gpus = LocalTritonServer(ServerSection(gpus=[1])).gpu_set(four_gpus())
    s, scope = sample(gpus, None, [a.root], four_gpus(accounting=False))
    assert (s["gpu_used_memory"], scope) == (pytest.approx(23_000.0), "device")
    hidden = four_gpus(own={UUIDS[1]: [Proc(a.stub, None)]})  # usedGpuMemory unavailable
    s, scope = sample(gpus, None, [a.root], hidden)
    assert (s["gpu_used_memory"], scope) == (pytest.approx(23_000.0), "device")
    s, scope = sample(gpus, None, None, four_gpus())  # the server's processes are unknown
    assert scope == "device"
    # NVML's pids are none of this machine's (the tracker in another PID namespace)
    s, scope = sample(gpus, None, [a.root], four_gpus())
    assert (s["gpu_used_memory"], scope) == (pytest.approx(23_000.0), "device")
    # the server's processes hold nothing on its GPU, another one here does: 0 MB is its
    # figure, not absent
    others = four_gpus(own={UUIDS[1]: [Proc(b.stub, 900.0)]})
    s, scope = sample(gpus, None, [a.root], others)
    assert (s["gpu_used_memory"], scope) == (0.0, "processes")


def test_triton_metrics_alone_give_the_servers_series(metrics_url: str) -> None:
    """No NVML here (a remote server, or a tracker without the driver): Triton's series of
    the server's GPUs, and only those."""
    gpus = GpuSet((Gpu(uuid=UUIDS[1]), Gpu(uuid=UUIDS[3])))
    s, scope = sample(gpus, metrics_url, None, four_gpus(fail_init=True))
    assert s["gpu_used_memory"] == pytest.approx(2000.0 + 4000.0)
    assert s["gpu_utilization"] == pytest.approx((20.0 + 40.0) / 2)
    assert s["gpu_power_usage"] == pytest.approx(100.5 + 200.5)
    assert about(s, [UUIDS[0], UUIDS[2]]) == [] and scope == "device"
    s, scope = sample(GpuSet(), metrics_url, None, four_gpus())  # no GPU: no GPU figure
    assert not [k for k in s if k.startswith("gpu")] and scope is None
    assert s["cpu_utilization"] == pytest.approx(20.0)


def test_machine_tags_describe_the_servers_gpus() -> None:
    nvml = four_gpus()
    tags = host.machine_tags(LocalTritonServer(ServerSection(gpus=[1])).gpu_set(nvml), nvml)
    assert tags[host.GPU_UUIDS] == UUIDS[1] and tags[host.GPU_COUNT] == "1"
    assert tags[host.GPU_NAMES] == "NVIDIA H100 80GB HBM3"
    assert tags[host.GPU_DEVICE + UUIDS[1]] == (
        "NVIDIA H100 80GB HBM3, 80000 MB, NVML index 1, PCI 00000000:2A:00.0")
    assert (tags[host.GPU_DRIVER], tags[host.GPU_CUDA]) == ("550.54.15", "12.4")
    assert tags[host.GPU_SOURCE] == "CUDA_VISIBLE_DEVICES=1, CUDA_DEVICE_ORDER=PCI_BUS_ID"
    assert not about(tags, [UUIDS[0], UUIDS[2], UUIDS[3]])
    import importlib.metadata as md

    import psutil
    assert tags[host.VERSION + "mlflow"] == md.version("mlflow")
    assert tags[host.VERSION + "optuna"] == md.version("optuna")
    assert tags[host.VERSION + "tritonclient"] == md.version("tritonclient")
    assert tags[host.VERSION + "onnxruntime"] == md.version("onnxruntime")
    assert tags[host.VERSION + "tracker"] == md.version("triton-tracker")
    assert tags[host.HOST_CPU_THREADS] == str(psutil.cpu_count())
    assert tags[host.HOST_CPU] and tags[host.HOST_CPU] != "unknown"
    assert all(k.startswith(("tracker.host.", "tracker.gpu.")) for k in tags)
    mig = host.gpu_tags(GpuSet((LocalTritonServer().gpu_set(nvml).gpus[3],)), nvml)
    assert mig[host.GPU_DEVICE + MIG_UUIDS[0]].endswith(f"MIG instance 0 of {UUIDS[3]}")
    none = host.gpu_tags(GpuSet(), four_gpus(fail_init=True))
    assert (none[host.GPU_COUNT], none[host.GPU_UUIDS]) == ("0", "none")
    assert host.GPU_DRIVER not in none  # NVML unavailable: unknown, left out


def test_parent_run_gathers_the_workers_machines(mlflow_uri: str,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = four_gpus()
    client = MlflowClient(mlflow_uri)
    run = client.create_run(client.create_experiment("machines")).info.run_id
    first = host.machine_tags(LocalTritonServer(ServerSection(gpus=[1])).gpu_set(nvml), nvml)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", MIG_UUIDS[0])
    second = host.machine_tags(LocalTritonServer().gpu_set(nvml), nvml)
    record_machine(client, run, first)
    record_machine(client, run, second)
    record_machine(client, run, second)  # again: nothing changes
    tags = client.get_run(run).data.tags
    assert tags[host.GPU_UUIDS] == f"{UUIDS[1]}, {MIG_UUIDS[0]}"
    assert tags[host.GPU_COUNT] == "2"
    assert tags[host.GPU_NAMES] == "NVIDIA H100 80GB HBM3, NVIDIA H100 80GB HBM3 MIG 3g.40gb"
    assert {host.GPU_DEVICE + UUIDS[1], host.GPU_DEVICE + MIG_UUIDS[0]} <= set(tags)
    assert host.HOST_MIXED not in tags  # one machine
    other = {**second, host.HOST_CPU: "Other CPU", host.GPU_DRIVER: "535.0"}
    record_machine(client, run, other)
    tags = client.get_run(run).data.tags
    assert tags[host.HOST_MIXED] == "true"
    assert tags[host.HOST_CPU] == f"{first[host.HOST_CPU]} | Other CPU"
    assert tags[host.GPU_DRIVER] == "550.54.15 | 535.0"
