"""The `triton` MLflow flavor and the registry helpers, on a real sqlite MLflow store."""

from __future__ import annotations

import threading
import warnings
from pathlib import Path

import mlflow
import pytest

from tracker.errors import DeployError, ModelError
from tracker.tracking import flavor, registry

CONFIG = """name: "tiny"
backend: "onnxruntime"
max_batch_size: 8
input [{ name: "x" data_type: TYPE_FP32 dims: [4] }]
output [{ name: "y" data_type: TYPE_FP32 dims: [4] }]
instance_group [{ count: 2 kind: KIND_CPU }]
dynamic_batching { max_queue_delay_microseconds: 100 }
"""


def make_model_dir(root: Path, name: str = "tiny", config: str = CONFIG) -> Path:
    d = root / name
    (d / "1").mkdir(parents=True)
    (d / "config.pbtxt").write_text(config)
    (d / "1" / "model.onnx").write_bytes(b"not really onnx, the flavor does not care")
    (d / "server.log").write_text("left out of the logged model")
    return d


@pytest.fixture()
def client(mlflow_uri: str) -> mlflow.MlflowClient:
    return mlflow.MlflowClient(mlflow_uri)


@pytest.fixture()
def run_id(client: mlflow.MlflowClient) -> str:
    exp = client.create_experiment("tiny")
    return str(client.create_run(exp).info.run_id)


def test_logged_model_downloads_as_a_triton_model_directory(
        tmp_path: Path, client: mlflow.MlflowClient, run_id: str) -> None:
    src = make_model_dir(tmp_path / "trial")
    logged = flavor.log_triton_model(src, run_id, params={"instance_group.count": "2"})
    # registered from the logged model, then fetched through the registry
    mv = registry.register_version(client, "tiny", registry.VersionRequest(
        source=logged.model_uri, run_id=run_id, model_id=logged.model_id,
        tags={"perf_throughput": "123.4"}, description="the best one"))
    registry.set_alias(client, "tiny", "production", mv.version)

    for uri in (f"models:/tiny/{mv.version}", "models:/tiny@production", logged.run_uri):
        (got,) = flavor.load_model(uri, dst_path=tmp_path / uri.replace(":", "_").replace("/", "_")
                                   ).models
        assert got.name == "tiny" and got.path.name == "tiny"  # its folder beside MLmodel
        assert got.versions == (1,)
        assert got.config_text == CONFIG  # exactly the trial's file
        assert (got.path / "1" / "model.onnx").read_bytes() == (src / "1" / "model.onnx"
                                                                 ).read_bytes()
        assert not (got.path / "server.log").exists()
        meta = mlflow.models.Model.load(str(got.path.parent))
        assert meta.flavors["triton"]["backend"] == "onnxruntime"
        assert meta.flavors["triton"]["versions"] == [1]
        assert meta.flavors["triton"]["layout"] == "repository"  # one layout for 1 and N
        assert meta.flavors["triton"]["models"] == meta.flavors["triton"]["entries"] == ["tiny"]
    # an MLflow 3 logged model, recorded as an output of the trial's run
    run = client.get_run(run_id)
    assert [o.model_id for o in run.outputs.model_outputs] == [logged.model_id]
    assert str(client.get_logged_model(logged.model_id).status) == "READY"
    assert client.get_logged_model(logged.model_id).params == {"instance_group.count": "2"}


def test_logging_from_threads_keeps_each_model_with_its_run(
        tmp_path: Path, client: mlflow.MlflowClient) -> None:
    """The trial loop logs from Optuna worker threads: no fluent state may leak between them."""
    exp = client.create_experiment("threads")
    runs = [client.create_run(exp).info.run_id for _ in range(3)]
    results: dict[str, str] = {}
    errors: list[BaseException] = []

    def work(i: int, rid: str) -> None:
        try:
            src = make_model_dir(tmp_path / f"t{i}", config=CONFIG.replace("count: 2",
                                                                            f"count: {i + 1}"))
            results[rid] = flavor.log_triton_model(src, rid).model_id
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i, r)) for i, r in enumerate(runs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for i, rid in enumerate(runs):
        got = flavor.load_model(f"runs:/{rid}/model", dst_path=tmp_path / f"dl{i}").entry
        assert f"count: {i + 1}" in got.config_text
        assert client.get_logged_model(results[rid]).experiment_id == exp


def test_bad_model_directories_are_refused_with_the_reason(tmp_path: Path, run_id: str) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ModelError, match=r"needs config\.pbtxt"):
        flavor.log_triton_model(empty, run_id)
    noversion = tmp_path / "nov"
    noversion.mkdir()
    (noversion / "config.pbtxt").write_text(CONFIG)
    with pytest.raises(ModelError, match="at least one version folder"):
        flavor.inspect_model_dir(noversion)
    bad = make_model_dir(tmp_path / "bad", config='name: "x" max_batch_size: "eight"')
    with pytest.raises(ModelError, match="not a valid model configuration"):
        flavor.inspect_model_dir(bad)
    evil = make_model_dir(tmp_path / "evil", config=CONFIG.replace('"tiny"', '"../etc"'))
    with pytest.raises(ModelError, match="one path component"):
        flavor.inspect_model_dir(evil)


def test_load_model_refuses_a_model_without_the_triton_flavor(
        tmp_path: Path, run_id: str, client: mlflow.MlflowClient) -> None:
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "a.txt").write_text("x")
    client.log_artifacts(run_id, str(tmp_path / "plain"), "notamodel")
    with pytest.raises(DeployError, match="not an MLflow model"):
        flavor.load_model(f"runs:/{run_id}/notamodel", dst_path=tmp_path / "dl")
    with pytest.raises(DeployError, match="cannot download"):
        flavor.load_model("models:/nosuchmodel/1", dst_path=tmp_path / "dl2")


@pytest.mark.parametrize("name", ["../x", "a/b", ".", "", "-x", "a" * 200, "a\x00b"])
def test_model_names_that_are_not_one_path_component_are_refused(name: str) -> None:
    with pytest.raises(DeployError, match="one path component"):
        flavor.validate_model_name(name)


def test_stage_transition_archives_the_previous_production_and_warns_nothing(
        client: mlflow.MlflowClient, run_id: str) -> None:
    versions = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the stage API's FutureWarning must not leak out
        for _ in range(3):
            mv = registry.register_version(client, "m", registry.VersionRequest(
                source="file:///nowhere", run_id=run_id))
            registry.transition_stage(client, "m", mv.version, "production")
            registry.set_alias(client, "m", "production", mv.version)
            versions.append(str(mv.version))
    stages = {str(v.version): v.current_stage for v in registry.all_versions(client, "m")}
    assert stages == {versions[0]: "Archived", versions[1]: "Archived", versions[2]: "Production"}
    assert [str(v.version) for v in registry.versions_in_stage(client, "m", "Production")] == \
        [versions[2]]
    alias = registry.version_for_alias(client, "m", "production")
    assert alias is not None and str(alias.version) == versions[2]
    assert registry.version_for_alias(client, "m", "staging") is None
    assert registry.triton_models(client) == ["m"]


def test_deployment_tags_keep_exactly_one_serving_version(
        client: mlflow.MlflowClient, run_id: str) -> None:
    for _ in range(3):
        registry.register_version(client, "m", registry.VersionRequest(source="file:///x"))
    registry.mark_served(client, "m", 1, target="triton")
    registry.mark_served(client, "m", 2, target="triton")
    registry.mark_deployment(client, "m", 3, registry.FAILED, message="Triton said no " * 1000)
    got = {str(v.version): v.tags for v in registry.all_versions(client, "m")}
    assert got["1"][registry.TAG_DEPLOY_STATUS] == "replaced"
    assert got["2"][registry.TAG_DEPLOY_STATUS] == "serving"
    assert got["3"][registry.TAG_DEPLOY_STATUS] == "failed"
    assert got["3"][registry.TAG_DEPLOY_MESSAGE].startswith("Triton said no")
    with pytest.raises(DeployError, match="must be one of"):
        registry.mark_deployment(client, "m", 1, "happy")


@pytest.mark.parametrize(("fn", "value", "rule"), [
    (registry.validate_stage, "Prod", "stage must be one of"),
    (registry.validate_alias, "v3", "alias must match"),
    (registry.validate_alias, "latest", "alias must match"),
    (registry.validate_registered_name, "it's", "registered model name must match"),
])
def test_registry_inputs_are_validated(fn: object, value: str, rule: str) -> None:
    with pytest.raises(DeployError, match=rule):
        fn(value)  # type: ignore[operator]
