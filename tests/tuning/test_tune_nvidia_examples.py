"""NVIDIA's own example models, unchanged, taken through the whole flow as a user would:
`tracker check`, `tracker tune`, `tracker promote`, then the promoted version answers on a
serving Triton (one for the module).

- python_backend's `batch_auto_complete` (projects/auto_complete): no config.pbtxt at all, its
  configuration completed by Triton (tracker/triton/autocomplete.py), every trial built on it;
- the server repository's `simple_sequence` and `simple_dyna_sequence` (tests/support/nvidia):
  stateful ONNX models; the promoted version answers a whole sequence as its graph computes it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import mlflow
import numpy as np
import pytest
from click.testing import CliRunner

from tests.support.deploy import module_server as module_server  # the fixtures, re-exported
from tests.support.deploy import shared_serving as shared_serving
from tracker import tags
from tracker.cli import cli
from tracker.measure.sequence_steps import run_sequence
from tracker.triton import model_config
from tracker.triton.client import TritonClient
from tracker.triton.endpoints import Endpoints
from tracker.triton.infer import Request
from tracker.triton.server.local import LocalTritonServer

pytestmark = pytest.mark.triton

ROOT = Path(__file__).resolve().parents[2]
AUTO = ROOT / "projects" / "auto_complete" / "batch_auto_complete"
NVIDIA = ROOT / "tests" / "support" / "nvidia"
CORRID = 4242
#: what each graph answers for the steps 5, 7, 9, 11 of sequence CORRID (START on the first
#: step, END on the last, READY on all): simple_sequence READY * (INPUT + START),
#: simple_dyna_sequence READY * (INPUT + START + END * CORRID)
SEQUENCE_ANSWERS = {"simple_sequence": [6, 7, 9, 11],
                    "simple_dyna_sequence": [6, 7, 9, 11 + CORRID]}


def _spec(tmp: Path, name: str, model_dir: Path, uri: str, load: str, space: str) -> Path:
    path = tmp / "study.yaml"
    path.write_text(f"""
model: {{name: {name}, path: {model_dir}}}
load: {{concurrency: [1, 4], window_ms: 300, max_tries: 4, warmup_requests: 5{load}}}
search:
  sampler: grid
  n_trials: 3
  storage: sqlite:///{tmp / 'optuna.db'}
  space: {space}
mlflow: {{tracking_uri: "{uri}", registered_model: {name}-reg}}
confirm: {{enabled: false}}
""")
    return path


def _trial_configs(uri: str, name: str, tmp: Path) -> list[model_config.ModelConfig]:
    client = mlflow.MlflowClient(uri)
    exp = client.get_experiment_by_name(name)
    runs = [r for r in client.search_runs([exp.experiment_id])
            if r.data.tags.get("mlflow.parentRunId") and r.info.status == "FINISHED"
            and r.data.tags.get(tags.DUPLICATE_OF) is None]
    return [model_config.parse(Path(client.download_artifacts(
        r.info.run_id, "config.pbtxt", str(tmp / r.info.run_id))).read_text()) for r in runs]


def _tune_and_promote(spec: Path) -> CliRunner:
    runner = CliRunner()
    tuned = runner.invoke(cli, ["tune", str(spec), "--no-bar"])
    assert tuned.exit_code == 0, tuned.output
    promoted = runner.invoke(cli, ["promote", str(spec)])
    assert promoted.exit_code == 0, promoted.output
    return runner


def test_auto_complete_example_without_config_is_tuned_promoted_and_answers(
        tmp_path: Path, mlflow_uri: str,
        shared_serving: tuple[LocalTritonServer, Path]) -> None:
    server, repo = shared_serving
    model_dir = tmp_path / "user" / "batch_auto_complete"
    shutil.copytree(AUTO, model_dir)  # model.py only, as NVIDIA ships it
    spec = _spec(tmp_path, "batch_auto_complete", model_dir, mlflow_uri, "",
                 "{instance_group.count: [1, 2]}")

    checked = CliRunner().invoke(cli, ["check", str(spec)])
    assert checked.exit_code == 0, checked.output
    assert "INPUT0" in checked.output and "OUTPUT1" in checked.output  # read from Triton

    _tune_and_promote(spec)
    configs = _trial_configs(mlflow_uri, "batch_auto_complete", tmp_path)
    assert len(configs) >= 2  # the default and the trials, each built on the completion
    for cfg in configs:
        assert [t.name for t in cfg.input] == ["INPUT0", "INPUT1"]
        assert cfg.max_batch_size == 4 and cfg.HasField("dynamic_batching")
    assert 2 in {cfg.instance_group[0].count for cfg in configs if cfg.instance_group}
    assert not (model_dir / "config.pbtxt").exists()  # the user's folder is left as it was

    served = model_config.load(repo / "batch_auto_complete" / "config.pbtxt")
    assert [t.name for t in served.input] == ["INPUT0", "INPUT1"]
    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    b = np.full((2, 4), 0.5, dtype=np.float32)
    with TritonClient(Endpoints.from_urls(server.endpoints.grpc)) as triton:
        out = triton.infer_tensors(Request("batch_auto_complete",
                                           {"INPUT0": ("FP32", a), "INPUT1": ("FP32", b)},
                                           ("OUTPUT0", "OUTPUT1")))
    np.testing.assert_allclose(out["OUTPUT0"], a + b)
    np.testing.assert_allclose(out["OUTPUT1"], a - b)


@pytest.mark.parametrize("name", sorted(SEQUENCE_ANSWERS))
def test_nvidia_sequence_model_is_tuned_promoted_and_answers_a_whole_sequence(
        tmp_path: Path, mlflow_uri: str,
        shared_serving: tuple[LocalTritonServer, Path], name: str) -> None:
    server, repo = shared_serving
    model_dir = tmp_path / "user" / name
    shutil.copytree(NVIDIA / name, model_dir)
    spec = _spec(tmp_path, name, model_dir, mlflow_uri,
                 ", sequence: {length: 3}", "{instance_group.count: [1, 2]}")

    _tune_and_promote(spec)
    configs = _trial_configs(mlflow_uri, name, tmp_path)
    assert len(configs) >= 2 and all(c.HasField("sequence_batching") for c in configs)

    served = model_config.load(repo / name / "config.pbtxt")
    assert served.HasField("sequence_batching")
    url = server.endpoints.grpc
    steps = [{"INPUT": np.array([[v]], dtype=np.int32)} for v in (5, 7, 9, 11)]
    answers = run_sequence(url, name, steps, corrid=CORRID)
    assert [int(a["OUTPUT"].reshape(-1)[0]) for a in answers] == SEQUENCE_ANSWERS[name]
