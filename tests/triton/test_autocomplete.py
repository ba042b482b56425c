"""Models whose configuration Triton completes (tracker/triton/autocomplete.py), on NVIDIA's
own python_backend examples `examples/auto_complete` (vendored unchanged in
projects/auto_complete): read without a config.pbtxt, completed by a real Triton started with
auto-complete on, and the completion merged over a partial config."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from tracker.errors import ModelError
from tracker.triton import autocomplete, model_config
from tracker.triton.configuration import load_configuration
from tracker.triton.formats import load_model_info
from tracker.triton.server.local import LocalTritonServer

EXAMPLES = Path(__file__).resolve().parents[2] / "projects" / "auto_complete"
BATCH, NOBATCH = "batch_auto_complete", "nobatch_auto_complete"
PARTIAL = """backend: "python"
instance_group [{ count: 2, kind: KIND_CPU }]
"""


def _repository(tmp: Path) -> Path:
    """Both examples in one repository: the batch one as shipped (no config.pbtxt), the other
    with a partial config.pbtxt (two instances, no I/O)."""
    repo = tmp / "models"
    for name in (BATCH, NOBATCH):
        shutil.copytree(EXAMPLES / name, repo / name)
    (repo / NOBATCH / "config.pbtxt").write_text(PARTIAL)
    return repo


def test_a_folder_without_config_is_a_python_model_named_by_its_model_py() -> None:
    info = load_model_info(EXAMPLES / BATCH, BATCH)
    assert info.format == "python" and info.auto_complete
    assert info.config.backend == "python" and info.config.name == BATCH
    assert not info.config.input and not info.config.output


def test_a_folder_without_config_nor_auto_complete_config_is_refused(tmp_path: Path) -> None:
    model = tmp_path / "plain"
    (model / "1").mkdir(parents=True)
    (model / "1" / "model.py").write_text("class TritonPythonModel:\n    pass\n")
    with pytest.raises(Exception, match="auto_complete_config"):
        load_model_info(model, "plain")


def test_a_repository_of_folders_without_config_lists_them(tmp_path: Path) -> None:
    conf = load_configuration(_repository(tmp_path), [BATCH, NOBATCH])
    assert set(conf.names) == {BATCH, NOBATCH}
    assert autocomplete.to_complete(conf) == conf.names


def test_merged_keeps_the_own_config_and_adds_what_triton_completed() -> None:
    own = model_config.parse('name: "m" backend: "python" max_batch_size: 2\n'
                             'instance_group [{ count: 3 kind: KIND_CPU }]\n'
                             'sequence_batching { direct {} }')
    completed = model_config.parse(
        'name: "m" backend: "python" max_batch_size: 4\n'
        'input [{ name: "X" data_type: TYPE_FP32 dims: [4] }]\n'
        'output [{ name: "Y" data_type: TYPE_FP32 dims: [4] }]\n'
        'instance_group [{ name: "m_0" count: 3 kind: KIND_CPU }]\n'
        'model_transaction_policy { decoupled: true }\n'
        'sequence_batching { direct {} }')
    out = autocomplete.merged(own, completed)
    assert out.max_batch_size == 4  # the model's set_max_batch_size wins, as in Triton
    assert [t.name for t in out.input] == ["X"] and [t.name for t in out.output] == ["Y"]
    assert out.model_transaction_policy.decoupled
    assert out.instance_group[0].name == ""  # Triton's own defaults are not copied
    assert out.WhichOneof("scheduling_choice") == "sequence_batching"


def test_a_completed_model_keeps_its_own_max_batch_size() -> None:
    """Its auto_complete_config sets max_batch_size; an auto-completing Triton serves that
    value whatever config.pbtxt says: the default space leaves it out, a knob is refused."""
    from tracker.search.space import default_space
    from tracker.triton.configuration import Configuration

    raw = load_model_info(EXAMPLES / BATCH, BATCH)
    cfg = model_config.parse('name: "batch_auto_complete" backend: "python" '
                             'max_batch_size: 4 dynamic_batching { }')
    info = dataclasses.replace(raw, config=cfg, supports_batching=True, auto_complete=False,
                               completed=True)
    space = default_space(info)
    assert "max_batch_size" not in space and "instance_group.count" in space
    assert "dynamic_batching.max_queue_delay_microseconds" in space
    conf = Configuration.of(info)
    assert autocomplete.space_problems({"max_batch_size": [4]}, conf) == []
    (problem,) = autocomplete.space_problems({"max_batch_size": [2, 8]}, conf)
    assert problem.startswith("search.space.max_batch_size: model 'batch_auto_complete' sets "
                              "max_batch_size 4 in its auto_complete_config")
    assert autocomplete.space_problems({"max_batch_size": [8]},
                                       Configuration.of(raw)) == []  # not completed


@pytest.mark.triton
def test_triton_completes_both_examples_with_one_start(tmp_path: Path) -> None:
    conf = load_configuration(_repository(tmp_path), [BATCH, NOBATCH])
    server = LocalTritonServer(log_dir=tmp_path / "logs")
    done = autocomplete.complete(conf, server)
    assert not server.running and server.auto_complete is False
    batch, nobatch = done.info(BATCH), done.info(NOBATCH)
    assert not batch.auto_complete and batch.completed and batch.supports_batching
    assert batch.config.max_batch_size == 4 and batch.config.HasField("dynamic_batching")
    assert [t.name for t in batch.config.input] == ["INPUT0", "INPUT1"]
    assert [t.name for t in batch.config.output] == ["OUTPUT0", "OUTPUT1"]
    assert list(batch.config.input[0].dims) == [4]
    assert nobatch.config.max_batch_size == 0 and not nobatch.supports_batching
    assert nobatch.config.instance_group[0].count == 2  # the partial config kept
    assert not nobatch.config.HasField("dynamic_batching")
    # and the completed configuration is served as written with auto-complete off
    for name in (BATCH, NOBATCH):
        model_config.save(done.info(name).config, tmp_path / "served" / name / "config.pbtxt")
        shutil.copytree(EXAMPLES / name / "1", tmp_path / "served" / name / "1")
    server.start(tmp_path / "served")
    try:
        with server.client() as client:
            assert client.model_config(BATCH).max_batch_size == 4
    finally:
        server.stop()


@pytest.mark.triton
def test_a_model_triton_cannot_load_is_a_model_error(tmp_path: Path) -> None:
    model = tmp_path / "broken"
    (model / "1").mkdir(parents=True)
    (model / "1" / "model.py").write_text(
        "class TritonPythonModel:\n"
        "    @staticmethod\n"
        "    def auto_complete_config(config):\n"
        "        raise ValueError('no config for you')\n")
    conf = load_configuration(model, "broken")
    with pytest.raises(ModelError, match="could not complete the configuration of broken"):
        autocomplete.complete(conf, LocalTritonServer(log_dir=tmp_path / "logs"))


def test_the_sample_project_names_the_example_and_leaves_max_batch_size_out() -> None:
    from tracker.spec import load_spec
    from tracker.triton.configuration import configuration_of

    spec = load_spec(EXAMPLES / "study.yaml")
    conf = configuration_of(spec.model)
    assert autocomplete.to_complete(conf) == (BATCH,)
    assert "max_batch_size" not in spec.search.space
