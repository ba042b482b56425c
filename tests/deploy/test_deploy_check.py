"""The deploy-side output check (tracker/deploy/verify.py) against a real Triton and a real
sqlite registry: a version whose artifact was altered after the study answers the study's
probes differently, so deploy refuses it with the reason; the version that served keeps
serving, the registry pointers stay on it, and the refused version is tagged."""

from __future__ import annotations

import json
from pathlib import Path

import mlflow
import numpy as np
import onnxruntime as ort
import pytest
from click.testing import CliRunner

from tests.support import models
from tests.support.deploy import NAME, V1, Study, spec_file, trial_model_dir
from tests.support.deploy import serving as serving  # the fixture, re-exported
from tracker import tags
from tracker.cli import cli
from tracker.deploy import service, verify
from tracker.deploy.settings import resolve_settings
from tracker.errors import DeployError
from tracker.outputs.probes import Answer, ProbeSet, Tolerance
from tracker.outputs.stored import store_reference
from tracker.tracking import flavor, registry
from tracker.triton.server.local import LocalTritonServer

pytestmark = pytest.mark.triton


def _reference(onnx_path: Path) -> ProbeSet:
    """The study's reference as the default configuration would have answered it."""
    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    inputs = [{"INPUT0": ("FP32", rng.random((1, 8), dtype=np.float32))} for _ in range(4)]
    answers: list[Answer] = [
        {"OUTPUT0": session.run(["OUTPUT0"], {"INPUT0": p["INPUT0"][1]})[0]} for p in inputs]
    return ProbeSet(inputs, ["OUTPUT0"], answers)


def test_an_altered_version_is_refused_and_the_old_one_keeps_serving(
        tmp_path: Path, mlflow_uri: str, serving: tuple[LocalTritonServer, Path]) -> None:
    server, _repo = serving
    onnx_path = models.dynamic_batch(tmp_path / "tiny.onnx")
    study = Study(tmp_path, onnx_path, mlflow_uri)
    client = mlflow.MlflowClient(mlflow_uri)
    parent = client.create_run(study.exp).info.run_id
    store_reference(study.study, client, parent, _reference(onnx_path), Tolerance(1e-4, 1e-5))
    study.add(V1, 100.0)
    first = CliRunner().invoke(cli, ["promote", str(spec_file(tmp_path, onnx_path,
                                                               study.storage, mlflow_uri))])
    assert first.exit_code == 0, first.output
    v1 = client.get_model_version("tiny-reg", "1")
    assert v1.tags[tags.CHECK_REFERENCE] == parent  # what deploy compares against
    assert json.loads(v1.tags[tags.CHECK_TOLERANCE])["rtol"] == 1e-4

    # version 2: the registered artifact altered after the study, the study's tags kept
    run2 = client.create_run(study.exp).info.run_id
    made = flavor.log_triton_model(
        trial_model_dir(tmp_path / "altered", models.negated(onnx_path, tmp_path / "alt.onnx"), V1),
        run2)
    registry.register_version(client, "tiny-reg", registry.VersionRequest(
        source=made.model_uri, run_id=run2, model_id=made.model_id,
        tags={tags.CHECK_REFERENCE: parent, tags.CHECK_TOLERANCE: v1.tags[tags.CHECK_TOLERANCE]}))
    with pytest.raises(DeployError) as refused:
        service.deploy(resolve_settings(), NAME, "models:/tiny-reg/2")
    message = str(refused.value)
    assert verify.STEP in message and "version 1 still serves" in message
    assert "output 'OUTPUT0' of probe 0" in message and "largest difference" in message
    v2 = client.get_model_version("tiny-reg", "2")
    assert v2.tags[registry.TAG_DEPLOY_STATUS] == "failed"
    assert verify.STEP in v2.tags[tags.DEPLOY_REFUSED]
    alias = registry.version_for_alias(client, "tiny-reg", "production")
    assert alias is not None and str(alias.version) == "1"
    ready = [(m["version"], m.get("state")) for m in server.client().repository_index()
             if m["name"] == NAME and m.get("state") == "READY"]
    assert ready == [("1", "READY")]
    answer = server.client().infer(NAME, server.client().model_config(NAME))
    assert answer["OUTPUT0"].shape == (1, 4)
