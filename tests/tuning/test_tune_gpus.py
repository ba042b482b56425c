"""A study on a real tritonserver pinned to GPU 1 of the four-GPU NVML stand-in (in place of
pynvml): the trial's gpu_used_memory is the server's own processes' memory on GPU 1, so a
memory constraint that GPU 1's other tenants would break holds; the trial and parent runs
carry the machine tags and the Triton version."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import psutil
import pytest
from mlflow import MlflowClient

from tests.support.nvml import UUIDS, Proc, four_gpus
from tests.support.tune import build_quickstart, write_spec
from tracker.invocation.session import TuneOptions
from tracker.measure import host
from tracker.tracking import runs
from tracker.tuning.tune import tune

pytestmark = pytest.mark.triton


def servers_here() -> list[Proc]:
    """Our tritonserver processes hold 500 MB on GPU 1 (as CUDA would have put them there)."""
    out = []
    for proc in psutil.Process(os.getpid()).children(recursive=True):
        try:
            if proc.name() == "tritonserver" and \
                    proc.environ().get("CUDA_VISIBLE_DEVICES") == "1":
                out.append(Proc(proc.pid, 500.0))
        except psutil.Error:
            continue
    return out


def test_trial_measures_its_servers_gpu_only(mlflow_uri: str, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = four_gpus(own={UUIDS[1]: servers_here})
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    model = build_quickstart(tmp_path)
    spec = write_spec(tmp_path, model, {"max_batch_size": [4]}, n_trials=1,
                      load={"concurrency": [2]}, server={"gpus": [1]},
                      constraints={"gpu_used_memory": {"max": 1000}})
    result = tune(spec, TuneOptions(bar=False, store_model=False))
    client = MlflowClient(mlflow_uri)
    parent = client.get_run(result.parent_run_id)
    (kid,) = [r for r in client.search_runs([parent.info.experiment_id])
              if r.data.tags.get(runs.PARENT_TAG) == parent.info.run_id]
    assert kid.info.status == "FINISHED"
    # GPU 1's device total is 23,000 MB (a foreign process holds most of it): not ours
    assert kid.data.metrics["gpu_used_memory"] == pytest.approx(500.0)
    assert kid.data.metrics["gpu_utilization"] == pytest.approx(20.0)
    assert kid.data.metrics["gpu_power_usage"] == pytest.approx(220.0)
    assert kid.data.tags[runs.FEASIBLE] == "true"
    assert not [k for k in kid.data.metrics if k.endswith(("gpu0", "gpu2", "gpu3_mig0"))]
    for run in (kid, parent):
        tags = run.data.tags
        assert tags[host.GPU_UUIDS] == UUIDS[1] and tags[host.GPU_COUNT] == "1"
        assert tags[host.GPU_DRIVER] == "550.54.15" and tags[host.GPU_CUDA] == "12.4"
        assert tags[host.HOST_CPU] and tags[host.VERSION + "mlflow"]
        assert re.fullmatch(r"\d+\.\d+\.\d+", tags[host.TRITON_VERSION])
    assert kid.data.tags[host.GPU_MEMORY_SCOPE] == "processes"
    assert nvml.inits == 0
