"""A deployment that reuses the serving version's number (a fixed ``version`` setting): the
serving folder stays in place until the new files have passed, a failure puts it back and the
serving version keeps answering (it is reloaded, never unloaded), and a success serves the new
files. Real Triton (one per module), real sqlite MLflow."""

from __future__ import annotations

from pathlib import Path

import mlflow
import pytest

from tests.support import models
from tests.support.deploy import V1, V2, trial_model_dir
from tests.support.deploy import module_server as module_server  # the fixtures, re-exported
from tests.support.deploy import shared_serving as shared_serving
from tracker.deploy import service
from tracker.deploy.settings import resolve_settings
from tracker.errors import DeployError
from tracker.tracking import flavor
from tracker.triton.server.local import LocalTritonServer

pytestmark = pytest.mark.triton


def _logged(tmp: Path, onnx: Path, values: dict[str, object], *, broken: bool = False) -> str:
    client = mlflow.MlflowClient()
    exp = client.get_experiment_by_name("same") or None
    exp_id = exp.experiment_id if exp else client.create_experiment("same")
    run = client.create_run(exp_id).info.run_id
    n = len(list(tmp.glob("trial*")))
    return flavor.log_triton_model(
        trial_model_dir(tmp / f"trial{n}", onnx, values, broken=broken), run).model_uri


def test_a_failed_redeploy_of_the_serving_number_keeps_the_serving_files_and_version(
        tmp_path: Path, shared_serving: tuple[LocalTritonServer, Path]) -> None:
    server, repo = shared_serving
    onnx = models.dynamic_batch(tmp_path / "tiny.onnx")
    settings = resolve_settings("triton", {"version": "1"})
    service.deploy(settings, "same", _logged(tmp_path, onnx, V1))
    served_file = repo / "same" / "1" / "model.onnx"
    before = served_file.read_bytes()
    with pytest.raises(DeployError, match="version 1 still serves"):
        service.deploy(settings, "same", _logged(tmp_path, onnx, V2, broken=True))
    assert served_file.read_bytes() == before
    assert [m["version"] for m in server.client().repository_index()
            if m["name"] == "same" and m.get("state") == "READY"] == ["1"]
    assert server.client().model_config("same").max_batch_size == 8  # V1's, still loaded
    assert server.client().infer("same", server.client().model_config("same"))["OUTPUT0"] \
        .shape == (1, 4)

    service.deploy(settings, "same", _logged(tmp_path, onnx, V2))  # the same number, new files
    assert server.client().model_config("same").max_batch_size == 16
    assert not [p for p in (repo / "same").iterdir() if p.name.startswith(".staging")]
