"""A configuration read from a model repository, without a server: the entry, the composing
models in load order (nested ensembles and a BLS model's callees), the errors a user meets,
and knobs addressed as ``<model>/<field path>``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.pipeline import ENSEMBLE, ensemble_repository
from tracker.errors import ConfigError, ModelError
from tracker.triton import formats
from tracker.triton.configuration import Configuration, is_repository, load_configuration
from tracker.triton.repository import write_configuration


def test_ensemble_steps_are_read_in_load_order(tmp_path: Path) -> None:
    repo = ensemble_repository(tmp_path / "repo")
    conf = load_configuration(repo, "pipe")
    assert conf.names == ("prep", "net", "post", "pipe")  # the entry last
    assert conf.entry == "pipe" and conf.composing() == ("prep", "net", "post")
    assert conf.steps == {"pipe": ("prep", "net", "post")}
    assert [m.format for m in conf.models] == ["python", "onnx", "python", "ensemble"]
    assert "other" not in conf.names  # in the repository, but not reached


def test_ensemble_format_has_no_instance_knobs(tmp_path: Path) -> None:
    repo = ensemble_repository(tmp_path / "repo")
    info = formats.load_model_info(repo / "pipe", "pipe")
    fmt = formats.format_of(info)
    assert fmt.name == "ensemble"
    assert [k.path for k in fmt.knobs(info)] == ["ensemble_scheduling.max_inflight_requests"]
    (repo / "pipe" / "config.pbtxt").write_text(
        ENSEMBLE + "instance_group [ { count: 2 } ]\n")
    with pytest.raises(ConfigError, match="cannot set instance_group"):
        formats.load_model_info(repo / "pipe", "pipe")


def test_nested_ensemble_and_bls_callees(tmp_path: Path) -> None:
    repo = ensemble_repository(tmp_path / "repo")
    outer = repo / "outer"
    (outer / "1").mkdir(parents=True)
    (outer / "config.pbtxt").write_text(
        ENSEMBLE.replace('name: "pipe"', 'name: "outer"')
        .replace('"prep"', '"pipe"', 1).replace('key: "IMAGE" value: "IMAGE" } output_map '
                                                 '{ key: "FEATURES"', 'key: "IMAGE" value: '
                                                 '"IMAGE" } output_map { key: "LABEL"'))
    conf = load_configuration(repo, "outer")
    assert conf.names[-2:] == ("pipe", "outer")
    assert set(conf.composing()) == {"prep", "net", "post", "pipe"}
    bls = load_configuration(repo, "other", composing=["net", "post"])
    assert bls.names == ("net", "post", "other") and bls.calls == {"other": ("net", "post")}
    # its code names its callees: a copy would call the default's models, so no pairs
    assert "BLS model 'other' names the models it calls" in (bls.pairing_problem or "")


def test_repository_errors_name_what_is_there(tmp_path: Path) -> None:
    repo = ensemble_repository(tmp_path / "repo")
    with pytest.raises(ModelError, match=r"model 'nope' is not in the model repository .*"
                                         r"holds: net, other, pipe, post, prep"):
        load_configuration(repo, "nope")
    (repo / "pipe" / "config.pbtxt").write_text(ENSEMBLE.replace('"net"', '"gone"'))
    with pytest.raises(ModelError, match="step 'gone' of ensemble 'pipe' is not in"):
        load_configuration(repo, "pipe")
    (repo / "pipe" / "config.pbtxt").write_text(ENSEMBLE.replace('model_name: "net"',
                                                                 'model_name: "pipe"'))
    with pytest.raises(ModelError, match=r"cycle: pipe -> pipe"):
        load_configuration(repo, "pipe")
    assert is_repository(repo) and not is_repository(repo / "prep")
    with pytest.raises(ModelError, match=r"need model\.path to be a Triton model repository"):
        load_configuration(repo / "prep", ["prep", "other"])


def test_knobs_go_to_their_model(tmp_path: Path) -> None:
    conf = load_configuration(ensemble_repository(tmp_path / "repo"), "pipe")
    cfgs = conf.apply({"prep/instance_group.count": 3, "net/max_batch_size": 16,
                       "concurrency": 4})
    assert list(cfgs) == list(conf.names)
    assert cfgs["prep"].instance_group[0].count == 3 and cfgs["net"].max_batch_size == 16
    assert cfgs["post"] == conf.info("post").config  # untouched
    with pytest.raises(ConfigError, match=r"needs `<model>/max_batch_size`.*'prep', 'net'"):
        conf.apply({"max_batch_size": 8})
    with pytest.raises(ConfigError, match=r"no model 'pre' in the configuration"):
        conf.apply({"pre/max_batch_size": 8})
    with pytest.raises(ConfigError, match=r"ensemble 'pipe' has max_batch_size 8.*step 'net'"):
        conf.apply({"net/max_batch_size": 4})


def test_single_model_is_the_one_element_case(tmp_path: Path) -> None:
    repo = ensemble_repository(tmp_path / "repo")
    conf = load_configuration(repo / "prep", "prep")
    assert conf.single and conf.names == ("prep",) and conf.composing() == ()
    assert conf.key("prep", "max_batch_size") == "max_batch_size"
    assert conf.apply({"max_batch_size": 4})["prep"].max_batch_size == 4
    assert Configuration.of(conf.entry_info).names == ("prep",)


def test_every_model_is_written_into_one_root(tmp_path: Path) -> None:
    conf = load_configuration(ensemble_repository(tmp_path / "repo"), "pipe")
    cfgs = conf.apply({"prep/instance_group.count": 2})
    repo = write_configuration(tmp_path / "trial", {n: conf.info(n) for n in cfgs}, cfgs,
                               conf.entry, serving="python")
    assert repo.model_name == "pipe" and repo.model_names == conf.names
    assert sorted(p.name for p in (tmp_path / "trial").iterdir()) == sorted(conf.names)
    assert (tmp_path / "trial" / "pipe" / "1").is_dir()
    assert (tmp_path / "trial" / "net" / "1" / "model.py").is_file()  # the ONNX shim
    assert repo.productions["net"].backend == "onnxruntime"
    assert dict(repo.models)["net"].backend == "python"


def test_what_a_single_model_does_without_is_asked_of_the_configuration(
        tmp_path: Path) -> None:
    """The questions callers ask instead of counting entries: one model keeps bare knobs,
    its own file knobs and its own storage; a pipeline and several entries do not; one model
    and an ensemble pair side by side, several entries do not; and only one entry's
    composing models are split per step."""
    repo = ensemble_repository(tmp_path / "repo")
    (repo / "prep" / "1" / "model.json").write_text('{"delay_ms": 3}')
    one = load_configuration(repo / "prep", "prep")
    pipe = load_configuration(repo, "pipe")
    two = load_configuration(repo, ["pipe", "other"])
    assert one.knob_prefix("prep") == "" and pipe.knob_prefix("net") == "net/"
    assert one.file_knob_models == (one.entry_info,) and pipe.file_knob_models == ()
    assert one.file_knob_defaults(["model.json:delay_ms", "max_batch_size"]) == {
        "model.json:delay_ms": 3}
    assert pipe.file_knob_defaults(["model.json:delay_ms"]) == {}
    assert [k for k, _ in one.file_knob_problems(["model.json:nope"])] == ["model.json:nope"]
    # each copy's models renamed, its ensembles' steps calling its own copies
    assert one.pairing_problem is None and pipe.pairing_problem is None
    assert two.pairing_problem is None
    assert pipe.split_steps == ("prep", "net", "post") and two.split_steps == ()
    assert one.split_steps == ()
    assert one.named_entries == () == pipe.named_entries and two.named_entries == (
        "pipe", "other")
