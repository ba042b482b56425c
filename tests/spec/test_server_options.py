"""server.options (tracker/spec/server_options.py): the typed options become tritonserver
flags, ``server/<option>`` knobs are searchable, and bad input is one line naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.tune import refused_by_check
from tracker.errors import SpecError
from tracker.spec import parse_spec
from tracker.spec.server_options import ServerOptions
from tracker.triton import field_paths, model_config

MODEL = {"name": "m", "path": "m.onnx"}


def problems(data: dict[str, object]) -> list[str]:
    with pytest.raises(SpecError) as info:
        parse_spec({"model": MODEL, **data})
    return info.value.messages


def test_typed_options_become_the_flags_triton_documents() -> None:
    spec = parse_spec({"model": MODEL, "server": {"gpus": [0, 1], "options": {
        "cache_size": 1048576, "rate_limit": "execution_count",
        "rate_limit_resources": {"R1": 4, "R2": 2},
        "backend_config": {"python": {"shm-default-byte-size": 1048576}},
        "pinned_memory_pool_byte_size": 1000, "cuda_memory_pool_byte_size": 2000,
        "model_load_thread_count": 2, "flags": {"--log-verbose": 1, "--strict-readiness": None}}}})
    assert spec.server.options.args(gpus=2) == [
        "--cache-config=local,size=1048576", "--rate-limit=execution_count",
        "--rate-limit-resource=R1:4", "--rate-limit-resource=R2:2",
        "--backend-config=python,shm-default-byte-size=1048576",
        "--pinned-memory-pool-byte-size=1000",
        "--cuda-memory-pool-byte-size=0:2000", "--cuda-memory-pool-byte-size=1:2000",
        "--model-load-thread-count=2", "--log-verbose=1", "--strict-readiness"]


def test_a_trials_server_values_change_only_what_they_name() -> None:
    base = ServerOptions(cache_size=100, rate_limit_resources={"R1": 1})
    changed = base.with_values({"server/cache_size": 0, "server/rate_limit": "EXECUTION_COUNT",
                                "server/rate_limit_resources.R2": 3,
                                "server/backend_config.onnxruntime.enable-global-threadpool": 1,
                                "max_batch_size": 8})
    assert changed.args() == ["--cache-config=local,size=0", "--rate-limit=execution_count",
                              "--rate-limit-resource=R1:1", "--rate-limit-resource=R2:3",
                              "--backend-config=onnxruntime,enable-global-threadpool=1"]
    assert base.cache_size == 100  # unchanged
    assert changed.value_of("server/rate_limit_resources.R2") == 3
    assert base.value_of("server/model_load_thread_count") is None


def test_server_knobs_are_searchable_and_not_config_fields() -> None:
    spec = parse_spec({"model": MODEL, "server": {"options": {"rate_limit": "execution_count"}},
                       "search": {"space": {
                           "server/cache_size": [0, 1048576], "response_cache.enable": [True],
                           "server/rate_limit_resources.R1": {"low": 1, "high": 4},
                           "server/rate_limit": ["off", "execution_count"]}}})
    assert set(spec.search.space) >= {"server/cache_size", "server/rate_limit"}
    params = {"server/cache_size": 0, "response_cache.enable": True, "concurrency": 4}
    config, load = model_config.split_params(params)
    assert config == {"response_cache.enable": True} and load == {"concurrency": 4}


@pytest.mark.parametrize(("data", "expected"), [
    ({"search": {"space": {"server/cache_sise": [1]}}},
     "search.space.server/cache_sise: unknown server option knob; the server knobs are "),
    ({"search": {"space": {"server/model_load_thread_count": [0, 2]}}},
     "search.space.server/model_load_thread_count[0]: must be >= 1, but got 0"),
    ({"search": {"space": {"server/rate_limit": ["fast"]}}},
     "search.space.server/rate_limit[0]: must be one of 'OFF', 'EXECUTION_COUNT'"),
    ({"server": {"options": {"flags": {"--grpc-port": 9000}}}},
     "server.options.flags.--grpc-port: --grpc-port is set by the launcher itself"),
    ({"server": {"options": {"flags": {"--cache-config": "local,size=1"}}}},
     "server.options.flags.--cache-config: --cache-config has its own option: use "
     "server.options.cache_size"),
    ({"server": {"options": {"flags": {"log-verbose": 1}}}},
     "server.options.flags.log-verbose: a tritonserver flag such as '--log-verbose'"),
    ({"server": {"options": {"cache_size": -1}}}, "server.options.cache_size: "),
    ({"load": {"repeat": {"pct": 100}}}, "load.repeat.pct: "),
    ({"search": {"space": {"response_cache.enable": [True, False]}}},
     "search.space.response_cache.enable: turns on the response cache, but the server has "
     "none: set server.options.cache_size"),
    ({"server": {"mode": "remote", "url": "h:8001", "options": {"cache_size": 10}}},
     "server.options: cannot be set when server.mode is 'remote'"),
    ({"server": {"mode": "remote", "url": "h:8001"},
      "search": {"space": {"server/cache_size": [0, 10]}}},
     "search.space.server/cache_size: a server option cannot be searched when server.mode "
     "is 'remote'"),
])
def test_bad_server_options_name_the_field(data: dict[str, object], expected: str) -> None:
    found = problems(data)
    assert any(m.startswith(expected) for m in found), found


CHECKED = [
    ("server: {options: {flags: {--grpc-use-sssl: 1}}}",
     "server.options.flags.--grpc-use-sssl: this tritonserver does not know the flag (its "
     "--help does not list it); did you mean '--grpc-use-ssl'?"),
    ("search: {space: {'instance_group.1.kind': [GPU], 'instance_group[1].gpus': [0, 64]}}",
     "search.space.instance_group.1.gpus: GPU index 64 is not one of the server's GPUs"),
    ("search: {space: {dynamic_batching.priority_levels: [2], "
     "dynamic_batching.default_priority_level: [1, 3]}}",
     "search.space.dynamic_batching.default_priority_level: a priority level must be at most "
     "dynamic_batching.priority_levels (2), but default_priority_level may be 3"),
    ("server: {options: {rate_limit: execution_count, rate_limit_resources: {R1: 2}}}\n"
     "search: {space: {instance_group.rate_limiter.resources.name: [R1], "
     "instance_group.rate_limiter.resources.count: [1, 4]}}",
     "search.space.instance_group.rate_limiter.resources.count: resource 'R1' has 2 on the "
     "server"),
    ("search: {space: {dynamic_batching.priority_levels: [0, 2], "
     "dynamic_batching.preserve_ordering: [false, true]}}",
     "search.space.dynamic_batching.priority_levels: Triton allows one priority level at most "
     "while dynamic_batching.preserve_ordering is true"),
]


@pytest.mark.parametrize(("extra", "expected"), CHECKED, ids=["flag", "gpus", "priority",
                                                              "resource", "ordering"])
def test_tracker_check_refuses_what_the_server_or_triton_would(
        tmp_path: Path, extra: str, expected: str) -> None:
    assert expected in refused_by_check(tmp_path, extra)


def test_an_instance_group_by_index_has_one_name_mlflow_accepts() -> None:
    from mlflow.utils.validation import _validate_param_name

    spec = parse_spec({"model": MODEL, "search": {"space": {
        "instance_group[1].count": [1, 2], "instance_group.1.kind": ["CPU"],
        "instance_group.count": [1]}}})
    assert list(spec.search.space) == ["instance_group.1.count", "instance_group.1.kind",
                                       "instance_group.count"]
    for key in spec.search.space:
        _validate_param_name(key)
    assert problems({"search": {"space": {"instance_group.1.count": [0]}}}) == [
        "search.space.instance_group.1.count[0]: must be >= 1, but got 0"]
    cfg = model_config.ModelConfig()
    for path, value in (("instance_group.1.count", 3), ("instance_group.1.kind", "GPU"),
                        ("instance_group.1.gpus", [1]), ("instance_group.count", 2)):
        field_paths.set_value(cfg, path, value)
    assert [(g.count, g.kind, list(g.gpus)) for g in cfg.instance_group] == [
        (2, 0, []), (3, 1, [1])]
