"""The deployment pieces that need no server: target settings, input conversion for predict,
name/path validation, promotion's choice of trial (real Optuna and MLflow sqlite stores)."""

from __future__ import annotations

from pathlib import Path

import mlflow
import numpy as np
import optuna
import pandas as pd
import pytest
from tritonclient.grpc.model_config_pb2 import ModelConfig

from tracker.deploy import promote as promote_mod
from tracker.deploy.inference import to_arrays
from tracker.deploy.publish import Publisher
from tracker.deploy.settings import resolve_settings
from tracker.errors import DeployError
from tracker.spec import Bound
from tracker.tracking import flavor
from tracker.trial_record import Attr
from tracker.triton import model_config
from tracker.triton.client import TritonClient
from tracker.triton.endpoints import Endpoints


def test_settings_come_from_config_then_target_uri_then_environment(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TRACKER_TRITON_REPOSITORY", str(tmp_path))
    monkeypatch.setenv("TRACKER_TRITON_URL", "envhost:7001")
    assert resolve_settings().url == "envhost:7001"
    assert resolve_settings("triton:/urihost:9001").url == "urihost:9001"
    s = resolve_settings("triton:/urihost:9001", {"url": "cfg:1", "serving": "python",
                                                  "timeout_s": "12", "version": "4"})
    assert (s.url, s.repository, s.serving, s.timeout_s, s.version) == \
        ("cfg:1", tmp_path, "python", 12.0, 4)


@pytest.mark.parametrize(("config", "rule"), [
    ({"repositry": "/x"}, r"unknown triton target config 'repositry' \(did you mean "
                          r"'repository'\?\)"),
    ({"url": "nohostport"}, r"url must be the server's endpoint host:port \(gRPC\) or "
                            r"http\[s\]://host:port \(HTTP\), but config 'url' is 'nohostport'"),
    ({"serving": "gpu"}, r"serving must be one of \['auto', 'onnxruntime', 'python'\], "
                         r"but got 'gpu'"),
    ({"timeout_s": "soon"}, "timeout_s must be a number of seconds, but got 'soon'"),
    ({"timeout_s": "0"}, "timeout_s must be > 0"),
    ({"version": "0"}, "version must be a positive integer"),
])
def test_bad_settings_name_the_rule_and_the_value(config: dict[str, str], rule: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRACKER_TRITON_REPOSITORY", "/tmp")
    with pytest.raises(DeployError, match=rule):
        resolve_settings("triton", config)


def test_the_repository_is_required(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRACKER_TRITON_REPOSITORY", raising=False)
    monkeypatch.delenv("TRITON_MODEL_REPO", raising=False)
    with pytest.raises(DeployError, match="TRACKER_TRITON_REPOSITORY"):
        resolve_settings()


def config(max_batch_size: int = 8) -> ModelConfig:
    return model_config.parse(f"""name: "m" max_batch_size: {max_batch_size}
input {{ name: "a" data_type: TYPE_FP32 dims: [2, 2] }}
input {{ name: "b" data_type: TYPE_INT64 dims: [-1] }}
output {{ name: "y" data_type: TYPE_FP32 dims: [4] }}""")


def one_input(max_batch_size: int = 8) -> ModelConfig:
    cfg = config(max_batch_size)
    del cfg.input[1]
    return cfg


def test_a_dataframe_with_input_columns_holds_one_item_per_row() -> None:
    df = pd.DataFrame({"a": [[[1, 2], [3, 4]], [[5, 6], [7, 8]]], "b": [[1, 2, 3], [4, 5, 6]]})
    got = to_arrays(config(), df)
    assert got["a"].shape == (2, 2, 2) and got["a"].dtype == np.float32
    assert got["b"].shape == (2, 3) and got["b"].dtype == np.int64


def test_a_plain_dataframe_feeds_a_single_input_row_by_row() -> None:
    got = to_arrays(one_input(), pd.DataFrame([[1, 2, 3, 4], [5, 6, 7, 8], [0, 0, 0, 1]]))
    assert got["a"].shape == (3, 2, 2)
    np.testing.assert_array_equal(got["a"][1], [[5, 6], [7, 8]])
    # without batching, the whole array is the tensor
    assert to_arrays(one_input(0), pd.DataFrame([[1, 2, 3, 4]]))["a"].shape == (2, 2)


def test_a_stateful_models_rows_are_the_steps_of_its_sequence() -> None:
    """`mlflow deployments predict --input-path steps.json` on a stateful model without
    batching (docs/stateful.md): the JSON's rows are the sequence's steps, so the input keeps
    a leading axis it would not have as a plain model's whole tensor."""
    import io

    stateful = model_config.parse(
        'name: "counter" backend: "python" max_batch_size: 0\n'
        'sequence_batching { max_sequence_idle_microseconds: 1000000 }\n'
        'input [{ name: "INPUT0" data_type: TYPE_INT32 dims: [1] }]\n'
        'output [{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [1] }]\n')
    steps = to_arrays(stateful, pd.read_json(io.StringIO('{"INPUT0": [[1], [2], [3]]}')))
    assert steps["INPUT0"].shape == (3, 1) and steps["INPUT0"].dtype == np.int32
    plain = model_config.parse('name: "p" backend: "python" max_batch_size: 0\n'
                               'input [{ name: "INPUT0" data_type: TYPE_INT32 dims: [1] }]\n')
    with pytest.raises(DeployError, match=r"needs shape \[1\]"):
        to_arrays(plain, {"INPUT0": np.array([[1], [2], [3]])})


def test_a_dict_of_arrays_must_name_exactly_the_inputs() -> None:
    arrays = {"a": np.zeros((3, 2, 2)), "b": np.zeros((3, 5), np.int32)}
    got = to_arrays(config(), arrays)
    assert got["b"].dtype == np.int64 and got["a"].dtype == np.float32
    with pytest.raises(DeployError, match=r"missing \['b'\] and unknown \['c'\]"):
        to_arrays(config(), {"a": np.zeros((1, 4)), "c": np.zeros(1)})
    with pytest.raises(DeployError, match=r"input 'a' needs shape \[-1, 2, 2\]"):
        to_arrays(config(), {"a": np.zeros((1, 3)), "b": np.zeros((1, 2))})
    with pytest.raises(DeployError, match="columns must name the model's inputs"):
        to_arrays(config(), pd.DataFrame([[1, 2]]))
    with pytest.raises(DeployError, match="a pandas DataFrame or a dict of numpy arrays"):
        to_arrays(config(), [1, 2, 3])


def test_model_names_cannot_leave_the_repository(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (tmp_path / "outside").mkdir()
    (repo / "link").symlink_to(tmp_path / "outside")
    client = TritonClient(Endpoints.from_urls("127.0.0.1:1"))
    publisher = Publisher(repo, client)
    for bad in ("../outside", "a/b", "..", ".", "a b"):
        with pytest.raises(DeployError, match="one path component"):
            publisher.state(bad)
    with pytest.raises(DeployError, match="would live outside the repository"):
        publisher.state("link")
    with pytest.raises(DeployError, match="must be an existing folder"):
        Publisher(tmp_path / "missing", client)
    with pytest.raises(DeployError, match="serving must be one of"):
        Publisher(repo, client, serving="gpu")


def test_promote_reads_trials_as_the_tuning_loop_reports_them() -> None:
    """promote and the study report share one reader of the trial attributes, so the names
    the tuning loop writes cannot drift from what promote reads."""
    from tracker import trial_record
    from tracker.conclusion import finish

    assert promote_mod.trial_rows is trial_record.trial_rows is finish.trial_rows
    assert promote_mod.Attr is Attr


def test_constraint_text_says_the_bound_and_the_measured_value() -> None:
    text = promote_mod.constraint_text({"perf_latency_p99": 3.214},
                                       {"perf_latency_p99": Bound(max=50),
                                        "perf_throughput": Bound(min=100, max=900)})
    assert text == ("perf_latency_p99 <= 50.00 ms (measured 3.21 ms); perf_throughput >= "
                    "100.0 infer/s and perf_throughput <= 900.0 infer/s")
    assert promote_mod.constraint_text({}, {}) == "none"


def _study(tmp_path: Path) -> optuna.Study:
    return optuna.create_study(study_name="s", storage=f"sqlite:///{tmp_path / 'o.db'}",
                               direction="maximize")


def _trial(study: optuna.Study, value: float, **attrs: object) -> None:
    trial = study.ask()
    for key, val in {"measurements": 2, "feasible": True, **attrs}.items():
        trial.set_user_attr(key, val)
    study.tell(trial, value)


def test_promote_refuses_a_study_without_a_feasible_trial(tmp_path: Path, mlflow_uri: str) -> None:
    study = _study(tmp_path)
    _trial(study, 500.0, feasible=False)
    with pytest.raises(DeployError, match="no feasible complete trial"):
        promote_mod.promote(study, objectives={"perf_throughput": "maximize"},
                            constraints={"perf_latency_p99": Bound(max=1)},
                            release=promote_mod.Release("r", "r"))


def test_promote_picks_the_best_feasible_trial_and_needs_its_logged_model(
        tmp_path: Path, mlflow_uri: str) -> None:
    client = mlflow.MlflowClient(mlflow_uri)
    exp = client.create_experiment("e")
    bare_run = client.create_run(exp).info.run_id
    study = _study(tmp_path)
    _trial(study, 900.0, feasible=False, mlflow_run_id="infeasible-run")
    _trial(study, 300.0, mlflow_run_id=bare_run)
    _trial(study, 100.0)
    with pytest.raises(DeployError, match=f"run {bare_run} names no stored model file"):
        promote_mod.promote(study, objectives={"perf_throughput": "maximize"}, constraints={},
                            release=promote_mod.Release("r", "r"))
    _trial(study, 400.0)
    with pytest.raises(DeployError, match="trial 3 of study 's' has no MLflow run"):
        promote_mod.promote(study, objectives={"perf_throughput": "maximize"}, constraints={},
                            release=promote_mod.Release("r", "r"))
    with pytest.raises(DeployError, match="one path component"):
        promote_mod.promote(study, objectives={"perf_throughput": "maximize"}, constraints={},
                            release=promote_mod.Release("r", "../r"))
    assert flavor.MODEL_ARTIFACT_PATH == "model"


def test_the_mlproject_promote_entry_point_parses(monkeypatch: pytest.MonkeyPatch,
                                                  mlflow_uri: str) -> None:
    """`mlflow run . -e promote` runs this command line (empty parameters quoted as '')."""
    import shlex

    from click.testing import CliRunner
    from mlflow.projects._project_spec import load_project

    from tracker.cli import cli

    root = Path(__file__).resolve().parents[2]
    entry = load_project(str(root)).get_entry_point("promote")
    command = entry.compute_command({"spec": "projects/quickstart/study.yaml"}, "/tmp")
    argv = shlex.split(command)
    # the folder `mlflow run` was started in, for a spec relative to it (tracker/spec/locate.py)
    assert argv[:3] == [f"TRACKER_CALLER_DIR={Path.cwd()}", "tracker", "promote"]
    monkeypatch.setenv("TRACKER_CALLER_DIR", str(root))
    monkeypatch.delenv("TRACKER_TRITON_REPOSITORY", raising=False)
    result = CliRunner().invoke(cli, argv[2:])
    assert result.exit_code == 1, result.output  # not a usage error (2): every option parsed
    assert "needs the model repository" in result.output


def test_promote_without_a_spec_registers_stages_and_aliases(
        tmp_path: Path, mlflow_uri: str) -> None:
    """`tracker promote --study S --no-deploy`: the study alone says what to register."""
    from click.testing import CliRunner

    from tracker.cli import cli
    from tracker.tracking import registry

    client = mlflow.MlflowClient(mlflow_uri)
    exp = client.create_experiment("e")
    model = tmp_path / "s"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text('name: "s" backend: "onnxruntime" max_batch_size: 4')
    (model / "1" / "model.onnx").write_bytes(b"x")
    study = optuna.create_study(study_name="s", storage=f"sqlite:///{tmp_path / 'optuna.db'}",
                                direction="maximize")
    runs = []
    for value in (10.0, 30.0, 20.0):
        run = client.create_run(exp).info.run_id
        flavor.log_triton_model(model, run)
        runs.append(run)
        _trial(study, value, mlflow_run_id=run, metrics={"perf_throughput": value})
    result = CliRunner().invoke(cli, ["promote", "--study", "s", "--no-deploy"])
    assert result.exit_code == 0, result.output
    assert "s version 1 (trial 1) is in Production with alias 'production'" in result.output
    mv = registry.get_version(client, "s", 1)
    assert mv.current_stage == "Production" and mv.run_id == runs[1]
    assert mv.tags["tracker.constraint"].startswith("the study's constraints")
    assert mv.tags["perf_throughput"] == "30.0"
    assert mv.description.startswith("In 6 measurements across 3 configurations, trial-1 gives")
    alias = registry.version_for_alias(client, "s", "production")
    assert alias is not None and str(alias.version) == "1"
    missing = CliRunner().invoke(cli, ["promote", "--study", "nope", "--no-deploy"])
    assert missing.exit_code == 1 and "no study named 'nope'" in missing.output


def test_the_triton_target_is_an_installed_mlflow_deployments_plugin(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import importlib.metadata

    from mlflow.deployments import get_deploy_client
    from mlflow.deployments.interface import _target_help

    found = {ep.name: ep.value for ep in
             importlib.metadata.entry_points(group="mlflow.deployments")}
    assert found.get("triton") == "tracker.deploy.target"
    monkeypatch.setenv("TRACKER_TRITON_REPOSITORY", str(tmp_path))
    # MLflow's own checks: target_help, run_local and exactly one BaseDeploymentClient
    client = get_deploy_client("triton:/127.0.0.1:1")
    assert type(client).__name__ == "TritonDeploymentClient"
    assert "TRACKER_TRITON_REPOSITORY" in _target_help("triton")
