"""The downloaded model is the registered one: the sha256 recorded when a model is logged goes
onto the version it is registered as, and a download that differs is refused, naming both
digests (real MLflow on sqlite, no server)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from mlflow import MlflowClient
from mlflow.entities import LoggedModelStatus
from mlflow.models import Model

from tests.support import models
from tests.support.deploy import NAME, V1, V2, trial_model_dir
from tests.support.pipeline_deploy import Names, configs, stored_folder
from tracker import tags
from tracker.deploy import integrity
from tracker.errors import DeployError
from tracker.tracking import flavor, model_files, registry
from tracker.tracking.flavor import TritonRepositoryDir, inspect_repository_dir, log_repository
from tracker.tracking.foreign import load_deployable
from tracker.tracking.winner import log_winner
from tracker.triton import model_config

REG = "integrity"


@pytest.fixture()
def client(mlflow_uri: str, monkeypatch: pytest.MonkeyPatch) -> MlflowClient:
    monkeypatch.setenv("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    return MlflowClient(mlflow_uri)


def _run(client: MlflowClient) -> str:
    return client.create_run(client.create_experiment("integrity")).info.run_id


def _register(client: MlflowClient, logged: flavor.LoggedTritonModel,
              **request_tags: str) -> int:
    mv = registry.register_version(client, REG, registry.VersionRequest(
        source=logged.model_uri, run_id=logged.run_id, model_id=logged.model_id,
        tags=request_tags or None))
    return int(mv.version)


def _download(tmp: Path, version: int) -> TritonRepositoryDir:
    dst = tmp / f"download-{version}-{len(list(tmp.glob('download-*')))}"
    return load_deployable(f"models:/{REG}/{version}", dst, name="served").source


def _stored_file(client: MlflowClient, logged: flavor.LoggedTritonModel, relative: str) -> Path:
    """The file ``relative`` of the logged model in the artifact store on disk."""
    location = client.get_logged_model(logged.model_id).artifact_location
    path = Path(re.sub(r"^file://", "", location)) / relative
    assert path.is_file(), f"no {relative} under {location}"
    return path


def _flip_a_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def _onnx_model(tmp: Path, client: MlflowClient) -> flavor.LoggedTritonModel:
    onnx = models.dynamic_batch(tmp / "tiny.onnx")
    return flavor.log_triton_model(trial_model_dir(tmp / "trial", onnx, V1), _run(client))


def test_a_logged_and_registered_model_downloads_as_it_was_recorded(
        tmp_path: Path, client: MlflowClient) -> None:
    logged = _onnx_model(tmp_path, client)
    recorded = client.get_logged_model(logged.model_id).tags[tags.ARTIFACT_SHA256]
    assert re.fullmatch(r"[0-9a-f]{64}", recorded)
    version = _register(client, logged)
    assert registry.get_version(client, REG, version).tags[tags.ARTIFACT_SHA256] == recorded
    source = _download(tmp_path, version)
    assert integrity.digest(source) == recorded
    integrity.check_download(client, REG, version, source)  # passes


def _log_in_the_layout_before(tmp: Path, client: MlflowClient, model_dir: Path, run: str
                              ) -> flavor.LoggedTritonModel:
    """One model as versions logged it before the one layout: the model directory itself at
    the root of the MLflow model (config.pbtxt and 1/ beside MLmodel, no ``layout`` key)."""
    old = tmp / "layout-before"
    shutil.copytree(model_dir, old)
    meta = Model()
    meta.add_flavor("triton", model_name=NAME, config_file="config.pbtxt", versions=[1],
                    backend="onnxruntime", platform="")
    meta.save(str(old / "MLmodel"))
    made = client.create_logged_model(
        experiment_id=client.get_run(run).info.experiment_id, name="model", source_run_id=run,
        model_type="triton", tags={tags.ARTIFACT_SHA256: flavor.artifact_digest(
            [flavor.inspect_model_dir(old)])})
    client.log_model_artifacts(made.model_id, str(old))
    client.finalize_logged_model(made.model_id, LoggedModelStatus.READY)
    return flavor.LoggedTritonModel(model_id=made.model_id, run_id=run, name="model")


def test_a_version_registered_in_the_layout_before_reads_and_is_checked(
        tmp_path: Path, client: MlflowClient) -> None:
    onnx = models.dynamic_batch(tmp_path / "tiny.onnx")
    model_dir = trial_model_dir(tmp_path / "trial", onnx, V1)
    run = _run(client)
    logged_before = _log_in_the_layout_before(tmp_path, client, model_dir, run)
    before = _register(client, logged_before)
    now = _register(client, flavor.log_triton_model(model_dir, run))
    old, new = _download(tmp_path, before), _download(tmp_path, now)
    assert old.names == new.names == (NAME,) and old.entries == (NAME,)
    assert old.path != new.path / NAME  # the directory at the root, not nested
    # one model's digest does not depend on the layout: the same files are the same version
    assert integrity.digest(old) == integrity.digest(new)
    integrity.check_download(client, REG, before, old)
    _flip_a_byte(_stored_file(client, logged_before, "1/model.onnx"))
    with pytest.raises(DeployError, match="the artifact changed after registration"):
        integrity.check_download(client, REG, before, _download(tmp_path, before))


@pytest.mark.parametrize("relative", [f"{NAME}/1/model.onnx", f"{NAME}/config.pbtxt"])
def test_an_artifact_changed_after_registration_is_refused_naming_both_digests(
        tmp_path: Path, client: MlflowClient, relative: str) -> None:
    logged = _onnx_model(tmp_path, client)
    version = _register(client, logged)
    want = registry.get_version(client, REG, version).tags[tags.ARTIFACT_SHA256]
    _flip_a_byte(_stored_file(client, logged, relative))
    source = _download(tmp_path, version)
    got = integrity.digest(source)
    assert got != want
    with pytest.raises(DeployError) as err:
        integrity.check_download(client, REG, version, source)
    assert str(err.value) == (
        f"the downloaded model of {REG} version {version} has sha256 {got}, but the registry "
        f"recorded {want} when it was registered: the artifact changed after registration; "
        "nothing deployed")


def test_a_version_without_the_tag_is_deployed_unchecked(
        tmp_path: Path, client: MlflowClient) -> None:
    logged = _onnx_model(tmp_path, client)
    # registered by hand, with MLflow's own client: nothing copies the tag
    registry.ensure_registered_model(client, REG)
    by_hand = client.create_model_version(REG, logged.model_uri, run_id=logged.run_id)
    assert tags.ARTIFACT_SHA256 not in by_hand.tags
    # an older release's version: the tag is not there either, and the artifact changed
    older = _register(client, logged)
    client.delete_model_version_tag(REG, str(older), tags.ARTIFACT_SHA256)
    _flip_a_byte(_stored_file(client, logged, f"{NAME}/1/model.onnx"))
    for version in (int(by_hand.version), older):
        integrity.check_download(client, REG, version, _download(tmp_path, version))


def test_a_version_mlflow_cannot_read_is_a_deploy_error(
        tmp_path: Path, client: MlflowClient) -> None:
    source = _download(tmp_path, _register(client, _onnx_model(tmp_path, client)))
    with pytest.raises(DeployError, match=f"cannot read version 7 of '{REG}': .*"):
        integrity.check_download(client, REG, 7, source)


def test_the_requests_own_digest_is_kept(tmp_path: Path, client: MlflowClient) -> None:
    logged = _onnx_model(tmp_path, client)
    version = _register(client, logged, **{tags.ARTIFACT_SHA256: "f" * 64})
    assert registry.get_version(client, REG, version).tags[tags.ARTIFACT_SHA256] == "f" * 64
    with pytest.raises(DeployError, match=r"registry recorded f{64} when"):
        integrity.check_download(client, REG, version, _download(tmp_path, version))


def test_a_model_whose_config_names_no_model_round_trips(
        tmp_path: Path, client: MlflowClient) -> None:
    """Its name comes from the folder it is downloaded into: not part of the digest."""
    folder = tmp_path / "echo"
    (folder / "1" / "__pycache__").mkdir(parents=True)
    (folder / "1" / "model.py").write_text("# a model\n")
    (folder / "1" / "__pycache__" / "model.cpython-312.pyc").write_bytes(b"\0cache")
    (folder / "config.pbtxt").write_text('backend: "python"\nmax_batch_size: 4\n')
    logged = flavor.log_triton_model(folder, _run(client))
    version = _register(client, logged)
    integrity.check_download(client, REG, version, _download(tmp_path, version))


def test_the_registered_winner_round_trips(tmp_path: Path, client: MlflowClient) -> None:
    """``tracker promote``'s model of one ONNX model (onnx and python_function flavors, its
    loader code beside the Triton directory) digests the same after download."""
    onnx = models.dynamic_batch(tmp_path / "tiny.onnx")
    exp = client.create_experiment("winner")
    stored = model_files.upload(client, client.create_run(exp).info.run_id, onnx)
    run = client.create_run(exp).info.run_id
    config = (trial_model_dir(tmp_path / "t", onnx, V1) / "config.pbtxt").read_text()
    client.log_text(run, config, "config.pbtxt")
    logged = log_winner(client, run, stored, None)
    version = _register(client, logged)
    source = _download(tmp_path, version)
    integrity.check_download(client, REG, version, source)
    _flip_a_byte(_stored_file(client, logged, f"{NAME}/1/model.onnx"))
    with pytest.raises(DeployError, match="the artifact changed after registration"):
        integrity.check_download(client, REG, version, _download(tmp_path, version))


def test_the_winner_read_as_the_onnx_flavor_keeps_its_production_config(
        tmp_path: Path, client: MlflowClient) -> None:
    """``--flavor onnx`` on a registered winner: the config is the one in the model's folder
    (``<model>/config.pbtxt`` beside ``<model>/1/model.onnx``), not one derived anew."""
    onnx = models.dynamic_batch(tmp_path / "tiny.onnx")
    exp = client.create_experiment("winner-onnx")
    stored = model_files.upload(client, client.create_run(exp).info.run_id, onnx)
    run = client.create_run(exp).info.run_id
    client.log_text(run, (trial_model_dir(tmp_path / "t", onnx, V2) / "config.pbtxt"
                          ).read_text(), "config.pbtxt")
    version = _register(client, log_winner(client, run, stored, None))
    got = load_deployable(f"models:/{REG}/{version}", tmp_path / "as-onnx", name="served",
                          flavor="onnx")
    cfg = model_config.parse(got.source.entry.config_text)
    assert (got.flavor, cfg.max_batch_size, cfg.instance_group[0].count) == ("onnx", 16, 2)
    assert cfg.dynamic_batching.max_queue_delay_microseconds == 100


def _pipeline(tmp: Path, client: MlflowClient) -> tuple[flavor.LoggedTritonModel, Names]:
    names = Names("i")
    files = stored_folder(tmp / "files", names)
    root = tmp / "repo"
    for model, text in configs(names, {"scale": 2, "tag": "v1"}).items():
        (root / model / "1").mkdir(parents=True)
        for item in (files / model / "1").iterdir():
            (root / model / "1" / item.name).write_bytes(item.read_bytes())
        (root / model / "config.pbtxt").write_text(text)
    repo = inspect_repository_dir(root, names.order)
    return log_repository(repo, _run(client), tracking_uri=None), names


def test_a_pipeline_round_trips_and_a_changed_step_is_refused(
        tmp_path: Path, client: MlflowClient) -> None:
    logged, names = _pipeline(tmp_path, client)
    version = _register(client, logged)
    source = _download(tmp_path, version)
    assert source.names == tuple(names.order)
    assert integrity.digest(source) == \
        client.get_logged_model(logged.model_id).tags[tags.ARTIFACT_SHA256]
    integrity.check_download(client, REG, version, source)
    _flip_a_byte(_stored_file(client, logged, f"{names.label}/1/model.py"))
    with pytest.raises(DeployError, match=f"{REG} version {version} has sha256"):
        integrity.check_download(client, REG, version, _download(tmp_path, version))


def test_the_digest_reads_the_newest_version_folder_and_skips_caches(tmp_path: Path) -> None:
    """What the digest covers: the newest version folder's files (nested ones included), not
    an older folder's and not ``__pycache__``."""
    root = tmp_path / "m"
    (root / "1").mkdir(parents=True)
    (root / "2" / "deeper").mkdir(parents=True)
    (root / "config.pbtxt").write_text('name: "m"\nbackend: "python"\n')
    (root / "1" / "model.py").write_text("old")
    (root / "2" / "model.py").write_text("new")
    (root / "2" / "deeper" / "weights.bin").write_bytes(bytes(range(256)) * 5000)
    model = flavor.inspect_model_dir(root)
    first = flavor.model_digest(model)
    (root / "1" / "model.py").write_text("older still")
    (root / "2" / "__pycache__").mkdir()
    (root / "2" / "__pycache__" / "model.pyc").write_bytes(b"cache")
    assert flavor.model_digest(model) == first
    (root / "2" / "deeper" / "weights.bin").write_bytes(b"changed")
    assert flavor.model_digest(model) != first
