"""The configs model_config derives and changes are ones a real Triton server accepts.

The wheel's tritonserver has only the Python backend, so each config is served with
`backend: "python"` and a do-nothing model.py: what is checked is that Triton parses and
accepts the inputs/outputs, dims, reshapes, batching and instance settings as written.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support import models
from tracker.spec import ServerSection
from tracker.triton import model_config
from tracker.triton.formats.onnx import from_onnx
from tracker.triton.server.local import LocalTritonServer

NULL_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([]) for _ in requests]
"""

CASES: dict[str, tuple[Callable[[Path], Path], dict[str, object]]] = {
    "dynamic_default": (models.dynamic_batch, {}),
    "dynamic_tuned": (models.dynamic_batch, {
        "max_batch_size": 16, "instance_group.count": 2, "instance_group.kind": "CPU",
        "dynamic_batching.preferred_batch_size": [4, 8],
        "dynamic_batching.max_queue_delay_microseconds": 100}),
    "dynamic_unbatched": (models.dynamic_batch, {"max_batch_size": 0}),
    "fixed": (models.fixed_batch, {"instance_group.count": 2}),
    "batch_only": (models.batch_only, {}),
    "batch_only_unbatched": (models.batch_only, {"max_batch_size": 0}),
    "multi_input": (models.multi_input, {}),
    "int64_input": (models.int64_input, {}),
    "fp16_output": (models.fp16_output, {}),
}


@pytest.mark.triton
def test_triton_accepts_derived_and_applied_configs(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    expected = {}
    for name, (write, values) in CASES.items():
        info = from_onnx(write(tmp_path / f"{name}.onnx"), name)
        cfg = model_config.apply(info, values)
        expected[name] = cfg
        served = model_config.apply(cfg, {"platform": "", "backend": "python"},
                                    supports_batching=info.supports_batching)
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "1" / "model.py").write_text(NULL_MODEL)
        model_config.save(served, repo / name / "config.pbtxt")
    with LocalTritonServer(ServerSection(startup_timeout_s=60)) as server:
        server.start(repo)
        base = server.endpoints.http
        assert base is not None
        for name, cfg in expected.items():
            with urllib.request.urlopen(f"{base}/v2/models/{name}/config", timeout=10) as resp:
                loaded = json.load(resp)
            assert loaded["max_batch_size"] == cfg.max_batch_size, name
            assert [i["dims"] for i in loaded["input"]] == [list(t.dims) for t in cfg.input]
            assert ("dynamic_batching" in loaded) == cfg.HasField("dynamic_batching"), name
            if cfg.instance_group:
                assert loaded["instance_group"][0]["count"] == cfg.instance_group[0].count
