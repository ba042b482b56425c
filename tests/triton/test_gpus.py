"""A server's GPUs by identity: CUDA_VISIBLE_DEVICES (ordinals in CUDA_DEVICE_ORDER, GPU-
prefixes, MIG- instances), Docker device requests, Triton's reported GPUs; and the errors for a
GPU the machine does not have. NVML is the stand-in of tests/support/nvml.py (no GPU here)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.nvml import METRICS as BASE_METRICS
from tests.support.nvml import MIG_UUIDS, UUIDS, Dev, StandInNvml, four_gpus, serve_text
from tracker.errors import GpuError, ServerError, TrackerError
from tracker.spec import ServerSection
from tracker.triton.gpus import Gpu, GpuSet
from tracker.triton.server.docker import DockerTritonServer, device_requests
from tracker.triton.server.gpu_sets import cuda_gpu_set, docker_gpu_set, reported_gpu_set
from tracker.triton.server.local import LocalTritonServer
from tracker.triton.server.remote import RemoteTritonServer


def uuids(found: GpuSet) -> list[str]:
    return [g.uuid for g in found]


def cuda(value: str | None, order: str | None = None, nvml: StandInNvml | None = None
         ) -> GpuSet:
    env = {} if value is None else {"CUDA_VISIBLE_DEVICES": value}
    if order is not None:
        env["CUDA_DEVICE_ORDER"] = order
    return cuda_gpu_set(env, nvml or four_gpus())


def test_cuda_visible_devices_entries_map_to_identities() -> None:
    nvml = four_gpus()
    assert uuids(cuda("1", nvml=nvml)) == [UUIDS[1]]
    assert uuids(cuda("2,0", nvml=nvml)) == [UUIDS[2], UUIDS[0]]  # CUDA keeps the listed order
    assert uuids(cuda("GPU-5e6f", nvml=nvml)) == [UUIDS[2]]  # a unique prefix, as CUDA takes
    assert uuids(cuda(f" {MIG_UUIDS[0]} ", nvml=nvml)) == [MIG_UUIDS[0]]
    assert uuids(cuda("0,-1,2", nvml=nvml)) == [UUIDS[0]]  # a negative ordinal hides the rest
    assert uuids(cuda("", nvml=nvml)) == [] and uuids(cuda("-1", nvml=nvml)) == []
    # unset: every device; GPU 3 is in MIG mode, so its instances stand for it
    assert uuids(cuda(None, nvml=nvml)) == [*UUIDS[:3], *MIG_UUIDS]
    assert nvml.inits == 0  # every session shut NVML down again
    one = cuda("1", nvml=nvml).gpus[0]
    assert (one.index, one.name, one.memory_total_mb, one.label) == (
        1, "NVIDIA H100 80GB HBM3", 80_000.0, "gpu1")
    assert one.pci_bus_id == "00000000:2A:00.0"  # bytes from NVML, text here
    mig = cuda(MIG_UUIDS[1], nvml=nvml).gpus[0]
    assert (mig.index, mig.parent_uuid, mig.mig_index, mig.label, mig.memory_total_mb) == (
        3, UUIDS[3], 1, "gpu3_mig1", 40_000.0)


def mixed_machine(nvml_order_is_pci: bool = True) -> StandInNvml:
    """A T4 on PCI bus 18 and an A100 on bus 3B (NVML index order = PCI order, or reversed)."""
    t4 = Dev("GPU-aaaa0000-0000-4000-8000-000000000000", name="Tesla T4", bus_id="00000000:18:00.0",
             cc=(7, 5))
    a100 = Dev("GPU-bbbb0000-0000-4000-8000-000000000000", name="NVIDIA A100-SXM4-40GB",
               bus_id="00000000:3B:00.0", cc=(8, 0))
    return StandInNvml([t4, a100] if nvml_order_is_pci else [a100, t4])


def test_cuda_device_order() -> None:
    # one model: FASTEST_FIRST (the default) keeps PCI bus order, as PCI_BUS_ID does
    for order in (None, "FASTEST_FIRST", "PCI_BUS_ID", "pci_bus_id"):
        assert uuids(cuda("1,0", order)) == [UUIDS[1], UUIDS[0]]
    # PCI_BUS_ID counts by bus id, whatever order NVML lists the devices in
    for nvml_pci in (True, False):
        got = cuda("1", "PCI_BUS_ID", mixed_machine(nvml_pci)).gpus[0]
        assert got.name == "NVIDIA A100-SXM4-40GB" and got.pci_bus_id == "00000000:3B:00.0"
    # mixed models under FASTEST_FIRST: CUDA's speed ranking is undocumented, so no guess
    with pytest.raises(GpuError, match=r"CUDA_DEVICE_ORDER=PCI_BUS_ID .* or name the GPUs by"):
        cuda("0", None, mixed_machine())
    # ... but UUIDs need no order
    assert uuids(cuda("GPU-bbbb", None, mixed_machine())) == [
        "GPU-bbbb0000-0000-4000-8000-000000000000"]
    with pytest.raises(GpuError, match="CUDA_DEVICE_ORDER must be FASTEST_FIRST or PCI_BUS_ID"):
        cuda("0", "SLOWEST_FIRST")


@pytest.mark.parametrize(("value", "message"), [
    ("7", r"entry '7': this machine has 4 GPUs \(CUDA ordinals 0\.\.3\)"),
    ("GPU-ffff", r"'GPU-ffff' is not a device of this machine \(its GPUs: GPU-1a2b3c4d"),
    ("GPU-1a2b", r"'GPU-1a2b' matches 2 devices .*: give more of the UUID"),
    ("MIG-0000", r"'MIG-0000' is not a device of this machine \(its MIG instances: MIG-0f1e"),
    ("MIG-GPU-9c8d0000/1/0", r"old MIG-GPU-<uuid>/<gi>/<ci> form is not supported"),
    ("3", r"is GPU 3 \(GPU-9c8d.*\), which is in MIG mode: name one of its MIG instances"),
    ("1,,2", r"has an empty entry"),
    ("gpu1", r"'gpu1' is not a CUDA ordinal, GPU-<uuid> or MIG-<uuid>"),
])
def test_cuda_visible_devices_naming_no_device_is_an_error(value: str, message: str) -> None:
    with pytest.raises(GpuError, match=message) as caught:
        cuda(value)
    assert isinstance(caught.value, TrackerError)  # the CLI shows it as a message


def test_docker_device_requests() -> None:
    nvml = four_gpus()
    assert uuids(docker_gpu_set(device_requests([2, 0]), nvml)) == [UUIDS[2], UUIDS[0]]
    assert uuids(docker_gpu_set(device_requests("all"), nvml)) == [*UUIDS[:3], *MIG_UUIDS]
    assert uuids(docker_gpu_set(device_requests(None), nvml)) == []
    raw = [{"Driver": "", "Count": 0, "DeviceIDs": ["3:1", MIG_UUIDS[0], UUIDS[1]],
            "Capabilities": [["gpu"]]}]
    assert uuids(docker_gpu_set(raw, nvml)) == [MIG_UUIDS[1], MIG_UUIDS[0], UUIDS[1]]
    assert uuids(docker_gpu_set([{"Count": 2, "Capabilities": [["gpu"]]}], nvml)) == UUIDS[:2]
    with pytest.raises(GpuError, match=r"'9' \(a Docker device id\): this machine has 4 GPUs"):
        docker_gpu_set(device_requests([9]), nvml)
    with pytest.raises(GpuError, match="GPU 0 has no MIG instance 1"):
        docker_gpu_set([{"DeviceIDs": ["0:1"], "Capabilities": [["gpu"]]}], nvml)
    with pytest.raises(GpuError, match="which is in MIG mode"):
        docker_gpu_set(device_requests([3]), nvml)


def test_no_nvml_here_means_an_empty_set_that_says_why() -> None:
    found = cuda("1", nvml=four_gpus(fail_init=True))
    assert not found and "NVML unavailable here" in found.source
    real = cuda_gpu_set({"CUDA_VISIBLE_DEVICES": "0"})  # the real pynvml, on this machine
    assert not real or real.gpus[0].index == 0


METRICS = BASE_METRICS + 'nv_gpu_utilization{gpu_uuid="GPU-elsewhere"} 0.5\n'


def test_triton_reported_gpus() -> None:
    found = reported_gpu_set(METRICS, four_gpus())
    assert uuids(found) == [*UUIDS, "GPU-elsewhere"]
    assert found.gpus[1].index == 1 and found.gpus[4] == Gpu(uuid="GPU-elsewhere")
    assert uuids(reported_gpu_set(METRICS, four_gpus(fail_init=True)))[0] == UUIDS[0]
    assert not reported_gpu_set("nv_cpu_utilization 0.2\n")


@pytest.fixture()
def metrics_url() -> Iterator[str]:
    with serve_text(METRICS) as url:
        yield url


def test_every_server_says_which_gpus_it_was_given(monkeypatch: pytest.MonkeyPatch,
                                                   metrics_url: str) -> None:
    nvml = four_gpus()
    local = LocalTritonServer(ServerSection(gpus=[1]))
    assert local.gpu_env() == {"CUDA_VISIBLE_DEVICES": "1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    assert uuids(local.gpu_set(nvml)) == [UUIDS[1]]
    # spec indices are nvidia-smi's on a mixed machine too (PCI_BUS_ID is set for them)
    assert local.gpu_set(mixed_machine()).gpus[0].name == "NVIDIA A100-SXM4-40GB"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", MIG_UUIDS[0])
    inherits = LocalTritonServer()
    assert local.gpu_env()["CUDA_VISIBLE_DEVICES"] == "1" and inherits.gpu_env() == {}
    assert uuids(inherits.gpu_set(nvml)) == [MIG_UUIDS[0]]
    assert uuids(LocalTritonServer(ServerSection(gpus="all")).gpu_set(nvml)) == [MIG_UUIDS[0]]
    assert uuids(DockerTritonServer(ServerSection(gpus=[2])).gpu_set(nvml)) == [UUIDS[2]]
    assert uuids(DockerTritonServer().gpu_set(nvml)) == []
    remote = RemoteTritonServer("127.0.0.1:1", metrics_url=metrics_url)
    assert uuids(remote.gpu_set(nvml))[:4] == UUIDS
    assert "metrics endpoint is unknown" in RemoteTritonServer("127.0.0.1:1").gpu_set().source
    gone = RemoteTritonServer("127.0.0.1:1", metrics_url="http://127.0.0.1:9/metrics").gpu_set()
    assert not gone and "unreadable" in gone.source
    with pytest.raises(GpuError, match="this machine has 4 GPUs"):
        LocalTritonServer(ServerSection(gpus=[4])).gpu_set(nvml)
    with pytest.raises(ServerError):  # a Docker request of nonsense is refused before NVML
        DockerTritonServer(ServerSection.model_construct(gpus="two"))  # past the spec's check


def test_nvml_failing_to_list_devices_is_a_clear_error() -> None:
    nvml = four_gpus()

    def lost(h: object) -> str:
        raise nvml.NVMLError("GPU is lost")

    nvml.nvmlDeviceGetUUID = lost  # type: ignore[method-assign]
    with pytest.raises(GpuError, match="NVML could not list this machine's GPUs: GPU is lost"):
        cuda("1", nvml=nvml)
    assert nvml.inits == 0
