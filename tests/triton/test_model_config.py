"""config.pbtxt handling: defaults derived from ONNX models, field-path changes and their
rejections, protobuf text round trips, `tracker config`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import onnx
import pytest
from click.testing import CliRunner
from tritonclient.grpc import model_config_pb2 as pb

from tests.support import models
from tracker.cli import cli
from tracker.errors import ConfigError, ModelError
from tracker.triton import model_config
from tracker.triton.formats import model_info
from tracker.triton.formats.onnx import from_onnx


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("onnx")


@pytest.fixture(scope="module")
def paths(model_dir: Path) -> dict[str, Path]:
    return {name: write(model_dir / f"{name}.onnx") for name, write in models.ALL.items()}


def info_of(paths: dict[str, Path], name: str) -> model_config.ModelInfo:
    return from_onnx(paths[name], name)


# ---- derivation -------------------------------------------------------------------------------

def test_dynamic_batch_model_gets_triton_autocomplete_defaults(paths: dict[str, Path]) -> None:
    info = info_of(paths, "dynamic_batch")
    cfg = info.config
    assert info.supports_batching and info.platform == "onnxruntime_onnx"
    assert info.model_file == paths["dynamic_batch"]
    assert (cfg.name, cfg.platform, cfg.backend) == ("dynamic_batch", "onnxruntime_onnx",
                                                     "onnxruntime")
    assert cfg.max_batch_size == 4 and cfg.HasField("dynamic_batching")
    assert [(t.name, t.data_type, list(t.dims)) for t in cfg.input] == [
        ("INPUT0", pb.TYPE_FP32, [8])]
    assert [(t.name, t.data_type, list(t.dims)) for t in cfg.output] == [
        ("OUTPUT0", pb.TYPE_FP32, [4])]
    assert len(cfg.instance_group) == 0  # left to Triton's default, as auto-complete does


def test_fixed_batch_model_is_not_batched_and_keeps_full_dims(paths: dict[str, Path]) -> None:
    info = info_of(paths, "fixed_batch")
    assert not info.supports_batching
    assert info.config.max_batch_size == 0 and not info.config.HasField("dynamic_batching")
    assert list(info.config.input[0].dims) == [2, 8]
    assert list(info.config.output[0].dims) == [2, 4]
    assert "max_batch_size: 0\n" in model_config.dumps(info.config)


def test_multi_input_model_lists_every_tensor_and_variable_dims(paths: dict[str, Path]) -> None:
    cfg = info_of(paths, "multi_input").config
    assert [t.name for t in cfg.input] == ["INPUT0", "INPUT1", "INPUT2"]
    assert [t.name for t in cfg.output] == ["OUTPUT0", "OUTPUT1", "OUTPUT2"]
    assert list(cfg.input[2].dims) == [-1, 3] and list(cfg.output[2].dims) == [-1, 3]
    assert cfg.max_batch_size == 4


def test_int64_input_and_fp16_output_types(paths: dict[str, Path]) -> None:
    ids = info_of(paths, "int64_input").config
    assert ids.input[0].data_type == pb.TYPE_INT64 and list(ids.input[0].dims) == [6]
    assert ids.output[0].data_type == pb.TYPE_FP32 and list(ids.output[0].dims) == [6, 4]
    half = info_of(paths, "fp16_output").config
    assert half.input[0].data_type == pb.TYPE_FP32
    assert half.output[0].data_type == pb.TYPE_FP16


def test_batch_only_tensor_becomes_dims_1_with_empty_reshape(paths: dict[str, Path]) -> None:
    cfg = info_of(paths, "batch_only").config
    tensor = cfg.input[0]
    assert list(tensor.dims) == [1] and tensor.HasField("reshape") and not tensor.reshape.shape
    assert model_config.parse(model_config.dumps(cfg)) == cfg


T = onnx.TensorProto
TYPES = {T.BOOL: "TYPE_BOOL", T.UINT8: "TYPE_UINT8", T.UINT16: "TYPE_UINT16",
         T.UINT32: "TYPE_UINT32", T.UINT64: "TYPE_UINT64", T.INT8: "TYPE_INT8",
         T.INT16: "TYPE_INT16", T.INT32: "TYPE_INT32", T.INT64: "TYPE_INT64",
         T.FLOAT16: "TYPE_FP16", T.FLOAT: "TYPE_FP32", T.DOUBLE: "TYPE_FP64",
         T.BFLOAT16: "TYPE_BF16", T.STRING: "TYPE_STRING"}


def test_every_triton_data_type_is_mapped(model_dir: Path) -> None:
    path = models.all_types(model_dir / "types.onnx", list(TYPES))
    cfg = from_onnx(path, "types").config
    got = [pb.DataType.Name(t.data_type) for t in cfg.input]
    assert got == list(TYPES.values())
    assert [pb.DataType.Name(t.data_type) for t in cfg.output] == got


@pytest.mark.parametrize("elem", [T.COMPLEX64, T.FLOAT8E4M3FN, T.INT4])
def test_unsupported_type_is_a_model_error(model_dir: Path, elem: int) -> None:
    path = models.all_types(model_dir / f"bad{elem}.onnx", [T.FLOAT, elem])
    with pytest.raises(ModelError, match=rf"IN_1.*{T.DataType.Name(elem)}.*not support"):
        from_onnx(path, "bad")


def test_unreadable_and_missing_files_are_model_errors(tmp_path: Path) -> None:
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\xff\x00 this is not a protobuf \xff" * 10)
    with pytest.raises(ModelError, match=r"junk\.onnx"):
        from_onnx(junk, "junk")
    with pytest.raises(ModelError, match="does not exist"):
        from_onnx(tmp_path / "missing.onnx", "missing")


# ---- model_info: files, model directories and base configs ------------------------------------

@dataclass
class Section:  # duck-typed stand-in for tracker.spec.ModelSection
    name: str
    path: Path
    config: Path | None = None
    build: Path | None = None


def test_model_info_reads_a_triton_model_directory(tmp_path: Path) -> None:
    repo = tmp_path / "mymodel"
    models.fixed_batch(repo / "1" / "model.onnx")
    models.dynamic_batch(repo / "3" / "model.onnx")  # the highest version wins
    (repo / "config.pbtxt").write_text(
        'name: "mymodel"\nmax_batch_size: 16\ninstance_group { count: 2 kind: KIND_CPU }\n'
        "dynamic_batching { max_queue_delay_microseconds: 100 }\n")
    info = model_info(Section("served", repo))
    assert info.model_file == repo / "3" / "model.onnx"
    cfg = info.config
    assert cfg.name == "served" and cfg.max_batch_size == 16 and info.supports_batching
    assert cfg.instance_group[0].count == 2
    assert cfg.dynamic_batching.max_queue_delay_microseconds == 100
    assert [t.name for t in cfg.input] == ["INPUT0"] and list(cfg.input[0].dims) == [8]
    assert cfg.platform == "onnxruntime_onnx"


def test_model_directory_without_model_file_is_a_model_error(tmp_path: Path) -> None:
    (tmp_path / "m" / "1").mkdir(parents=True)
    with pytest.raises(ModelError, match=r"no <version>/model\.onnx"):
        model_info(Section("m", tmp_path / "m"))


def test_base_config_fills_in_from_the_model(paths: dict[str, Path], tmp_path: Path) -> None:
    base = tmp_path / "base.pbtxt"
    base.write_text('input { name: "INPUT0" }\noptimization { priority: PRIORITY_MAX }\n')
    info = model_info(Section("m", paths["dynamic_batch"], base))
    cfg = info.config
    assert cfg.input[0].data_type == pb.TYPE_FP32 and list(cfg.input[0].dims) == [8]
    assert [t.name for t in cfg.output] == ["OUTPUT0"]
    assert cfg.max_batch_size == 4 and cfg.HasField("dynamic_batching")
    assert cfg.optimization.priority == pb.ModelOptimizationPolicy.PRIORITY_MAX


def test_base_config_with_full_dims_turns_batching_off(paths: dict[str, Path],
                                                       tmp_path: Path) -> None:
    base = tmp_path / "base.pbtxt"
    base.write_text('input { name: "INPUT0" dims: [-1, 8] }\n')
    info = model_info(Section("m", paths["dynamic_batch"], base))
    assert info.config.max_batch_size == 0 and not info.supports_batching
    assert list(info.config.output[0].dims) == [-1, 4]


@pytest.mark.parametrize(("text", "message"), [
    ('input { name: "NOPE" }', r"'NOPE' is not an input .*INPUT0"),
    ('input { name: "INPUT0" data_type: TYPE_INT32 }', "must have data_type TYPE_FP32"),
    ('platform: "tensorrt_plan"', "platform must be 'onnxruntime_onnx'"),
    ("max_batch_size: -1", "max_batch_size must be >= 0"),
    ("max_batch_size: [", "invalid config.pbtxt"),
])
def test_bad_base_configs_are_rejected(paths: dict[str, Path], tmp_path: Path, text: str,
                                       message: str) -> None:
    base = tmp_path / "base.pbtxt"
    base.write_text(text)
    with pytest.raises(ConfigError, match=message):
        model_info(Section("m", paths["dynamic_batch"], base))


def test_base_config_batching_a_fixed_model_is_rejected(paths: dict[str, Path],
                                                        tmp_path: Path) -> None:
    base = tmp_path / "base.pbtxt"
    base.write_text("max_batch_size: 8")
    with pytest.raises(ConfigError, match="does not support batching"):
        model_info(Section("m", paths["fixed_batch"], base))


# ---- apply: field paths -----------------------------------------------------------------------

def test_apply_sets_the_named_knobs_on_a_copy(paths: dict[str, Path]) -> None:
    info = info_of(paths, "dynamic_batch")
    before = model_config.dumps(info.config)
    cfg = model_config.apply(info, {
        "max_batch_size": 16, "instance_group.count": 2, "instance_group.kind": "CPU",
        "dynamic_batching.max_queue_delay_microseconds": 200,
        "dynamic_batching.preferred_batch_size": [4, 8],
    })
    assert model_config.dumps(info.config) == before  # the input is untouched
    assert cfg.max_batch_size == 16
    assert (cfg.instance_group[0].count, cfg.instance_group[0].kind) == (
        2, pb.ModelInstanceGroup.KIND_CPU)
    assert cfg.dynamic_batching.max_queue_delay_microseconds == 200
    assert list(cfg.dynamic_batching.preferred_batch_size) == [4, 8]
    assert len(cfg.instance_group) == 1


@pytest.mark.parametrize(("value", "kind"), [
    ("KIND_GPU", pb.ModelInstanceGroup.KIND_GPU), ("GPU", pb.ModelInstanceGroup.KIND_GPU),
    ("cpu", pb.ModelInstanceGroup.KIND_CPU), ("KIND_CPU", pb.ModelInstanceGroup.KIND_CPU)])
def test_instance_kind_accepts_short_and_full_names(paths: dict[str, Path], value: str,
                                                    kind: int) -> None:
    cfg = model_config.apply(info_of(paths, "fixed_batch"), {"instance_group.kind": value})
    assert cfg.instance_group[0].kind == kind


def test_preferred_batch_size_accepts_one_int(paths: dict[str, Path]) -> None:
    cfg = model_config.apply(info_of(paths, "dynamic_batch"),
                             {"dynamic_batching.preferred_batch_size": 2})
    assert list(cfg.dynamic_batching.preferred_batch_size) == [2]


def test_any_scalar_field_by_path_and_parameters(paths: dict[str, Path]) -> None:
    cfg = model_config.apply(info_of(paths, "dynamic_batch"), {
        "dynamic_batching.preserve_ordering": True,
        "optimization.priority": "PRIORITY_MAX",
        "optimization.input_pinned_memory.enable": False,
        "response_cache.enable": True,
        "parameters.intra_op_thread_count": 2,
    })
    assert cfg.dynamic_batching.preserve_ordering
    assert cfg.optimization.priority == pb.ModelOptimizationPolicy.PRIORITY_MAX
    assert cfg.optimization.HasField("input_pinned_memory")
    assert cfg.response_cache.enable
    assert cfg.parameters["intra_op_thread_count"].string_value == "2"


def test_existing_instance_group_is_edited_in_place(paths: dict[str, Path]) -> None:
    first = model_config.apply(info_of(paths, "fixed_batch"), {"instance_group.count": 3},
                               supports_batching=False)
    second = model_config.apply(first, {"instance_group.kind": "KIND_CPU"}, supports_batching=False)
    assert len(second.instance_group) == 1
    assert (second.instance_group[0].count, second.instance_group[0].kind) == (
        3, pb.ModelInstanceGroup.KIND_CPU)


def test_switching_batching_off_and_on_rewrites_dims(paths: dict[str, Path]) -> None:
    info = info_of(paths, "batch_only")
    off = model_config.apply(info, {"max_batch_size": 0})
    assert not off.HasField("dynamic_batching")
    assert list(off.input[0].dims) == [-1] and not off.input[0].HasField("reshape")
    on = model_config.apply(off, {"max_batch_size": 8}, supports_batching=True)
    assert list(on.input[0].dims) == [1] and on.input[0].HasField("reshape")
    wide = model_config.apply(info_of(paths, "multi_input"), {"max_batch_size": 0})
    assert list(wide.input[2].dims) == [-1, -1, 3]


def test_split_params_separates_load_knobs() -> None:
    config, load = model_config.split_params({"concurrency": 8, "max_batch_size": 4,
                                              "instance_group.count": 2})
    assert config == {"max_batch_size": 4, "instance_group.count": 2}
    assert load == {"concurrency": 8}


# ---- apply: rejections ------------------------------------------------------------------------

@pytest.mark.parametrize(("model", "values", "message"), [
    ("fixed_batch", {"max_batch_size": 8}, r"max_batch_size must be 0 .*got max_batch_size=8"),
    ("dynamic_batch", {"max_batch_size": 4, "dynamic_batching.preferred_batch_size": [2, 8]},
     r"preferred_batch_size must be in \[1, max_batch_size=4\], but got \[2, 8\]"),
    ("dynamic_batch", {"dynamic_batching.preferred_batch_size": 0}, r"must be in \[1"),
    ("fixed_batch", {"dynamic_batching.max_queue_delay_microseconds": 100},
     r"needs max_batch_size > 0.*max_queue_delay_microseconds=100"),
    ("dynamic_batch", {"max_batch_size": 0, "dynamic_batching.preferred_batch_size": [1]},
     "needs max_batch_size > 0"),
    ("dynamic_batch", {"dynamic_batching.max_queue_delay_microseconds": -5},
     r"max_queue_delay_microseconds` must be >= 0, but got -5"),
    ("dynamic_batch", {"instance_group.count": 0}, r"count` must be >= 1, but got 0"),
    ("dynamic_batch", {"instance_group.count": -2}, r"count` must be >= 1, but got -2"),
    ("dynamic_batch", {"instance_group.cout": 2}, r"did you mean `instance_group.count`"),
    ("dynamic_batch", {"max_batch": 2}, r"not a config.pbtxt field.*`max_batch_size`"),
    ("dynamic_batch", {"dynamic_batching": 2}, "is a message, not a value"),
    ("dynamic_batch", {"max_batch_size.x": 2}, "is a value and has no fields"),
    ("dynamic_batch", {"max_batch_size": "8"}, r"must be an integer, but got '8'"),
    ("dynamic_batch", {"max_batch_size": 2.5}, "must be an integer, but got 2.5"),
    ("dynamic_batch", {"max_batch_size": True}, "must be an integer, but got True"),
    ("dynamic_batch", {"max_batch_size": [2, 4]}, "holds one value, but got a list"),
    ("dynamic_batch", {"dynamic_batching.preserve_ordering": 1}, "must be a bool"),
    ("dynamic_batch", {"instance_group.kind": "TPU"}, r"one of \['KIND_AUTO'.*got 'TPU'"),
    ("dynamic_batch", {"concurrency": 4}, "load setting, not a config.pbtxt field"),
    ("dynamic_batch", {"parameters.a.b": 1}, "parameters.KEY"),
])
def test_apply_rejects(paths: dict[str, Path], model: str, values: dict[str, object],
                       message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        model_config.apply(info_of(paths, model), values)


def test_apply_accepts_integral_floats(paths: dict[str, Path]) -> None:
    cfg = model_config.apply(info_of(paths, "dynamic_batch"), {"max_batch_size": 8.0})
    assert cfg.max_batch_size == 8


def test_check_path() -> None:
    model_config.check_path("dynamic_batching.max_queue_delay_microseconds")
    model_config.check_path("parameters.inter_op_thread_count")
    with pytest.raises(ConfigError, match=r"dynamic_batching\.max_queue_delay_microseconds"):
        model_config.check_path("dynamic_batching.max_queue_delay")


# ---- validate, text round trips ---------------------------------------------------------------

@pytest.mark.parametrize(("text", "batching", "message"), [
    ('name: "m" max_batch_size: 2 dynamic_batching { preferred_batch_size: 4 }', True,
     r"\[1, max_batch_size=2\]"),
    ('name: "m" dynamic_batching { max_queue_delay_microseconds: 5 }', False,
     "need max_batch_size > 0"),
    ('name: "m" max_batch_size: 1', False, "does not support batching"),
    ('name: "m" instance_group { count: -1 }', False, "count must be >= 1"),
    ('name: "m" input { name: "a" data_type: TYPE_FP32 dims: 0 }', False, "dims must be > 0"),
    ('name: "m" input { name: "a" dims: 1 }', False, "needs a data_type"),
    ('name: "m" output { name: "a" data_type: TYPE_FP32 dims: 1 } '
     'output { name: "a" data_type: TYPE_FP32 dims: 1 }', False, "appears twice"),
    ("max_batch_size: 1", True, "`name` must be set"),
])
def test_validate_rejects(text: str, batching: bool, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        model_config.validate(model_config.parse(text), supports_batching=batching)


@pytest.mark.parametrize("name", sorted(models.ALL))
def test_text_round_trip(paths: dict[str, Path], name: str, tmp_path: Path) -> None:
    info = info_of(paths, name)
    for cfg in (info.config, model_config.apply(info, {"instance_group.count": 2,
                                                       "parameters.execution_mode": 1})):
        text = model_config.dumps(cfg)
        assert model_config.dumps(model_config.parse(text)) == text
        assert model_config.parse(text) == cfg
        model_config.save(cfg, tmp_path / "x" / "config.pbtxt")
        assert model_config.load(tmp_path / "x" / "config.pbtxt") == cfg


def test_parse_and_load_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"invalid config.pbtxt: 1:\d+"):
        model_config.parse("max_batch_size: many")
    with pytest.raises(ConfigError, match="cannot read config"):
        model_config.load(tmp_path / "missing.pbtxt")


@pytest.mark.parametrize(("text", "expected"), [
    ("max_batch_size=8", ("max_batch_size", 8)),
    ("a.b=0.5", ("a.b", 0.5)),
    ("a=true", ("a", True)), ("a=False", ("a", False)),
    ("dynamic_batching.preferred_batch_size=[4,8]", ("dynamic_batching.preferred_batch_size",
                                                     [4, 8])),
    ("instance_group.kind=KIND_GPU", ("instance_group.kind", "KIND_GPU")),
    ("x=[GPU, CPU]", ("x", ["GPU", "CPU"])),
])
def test_parse_assignment(text: str, expected: tuple[str, object]) -> None:
    assert model_config.parse_assignment(text) == expected


# ---- `tracker config` -------------------------------------------------------------------------

def test_cli_prints_a_config_that_parses_back(paths: dict[str, Path]) -> None:
    result = CliRunner().invoke(cli, [
        "config", str(paths["dynamic_batch"]), "--name", "qs",
        "--set", "instance_group.count=2", "--set", "max_batch_size=8",
        "--set", "dynamic_batching.preferred_batch_size=[4,8]"])
    assert result.exit_code == 0, result.output
    cfg = model_config.parse(result.output)
    assert cfg.name == "qs" and cfg.max_batch_size == 8 and cfg.instance_group[0].count == 2
    assert list(cfg.dynamic_batching.preferred_batch_size) == [4, 8]
    assert model_config.dumps(cfg) == result.output


def test_cli_names_the_model_after_the_file(paths: dict[str, Path]) -> None:
    result = CliRunner().invoke(cli, ["config", str(paths["fixed_batch"])])
    assert result.exit_code == 0
    assert model_config.parse(result.output).name == "fixed_batch"


@pytest.mark.parametrize(("args", "message"), [
    (["--set", "max_batch_size=64"], "does not support batching"),
    (["--set", "instance_group.count"], "expected PATH=VALUE"),
    (["--set", "max_bach_size=1"], "did you mean `max_batch_size`"),
])
def test_cli_bad_input_exits_1_with_a_message(paths: dict[str, Path], args: list[str],
                                              message: str) -> None:
    result = CliRunner().invoke(cli, ["config", str(paths["fixed_batch"]), *args])
    assert result.exit_code == 1
    assert message in result.output and "Traceback" not in result.output


def test_cli_missing_model_exits_1(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["config", str(tmp_path / "none.onnx")])
    assert result.exit_code == 1 and "does not exist" in result.output
