"""Limits ``tracker check`` holds a spec to (tracker/spec/limits.py, tracker/spec/yaml_loader.py):
integer knobs within their protobuf type (read from the ModelConfig descriptor), instance
counts, element indices, search lists and ranges of a sane size, and YAML aliases that cannot
blow a few lines up into a billion strings. Each refusal says the rule and the value, at once."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.support.tune import refused_by_check
from tracker.errors import ConfigError, SpecError
from tracker.search.space import space_size, values
from tracker.spec import Range, load_spec
from tracker.spec.limits import MAX_CHOICES, MAX_RANGE_VALUES
from tracker.triton import field_paths, model_config

HEAD = "model: {name: m, path: m.onnx}\n"


@pytest.mark.parametrize(("extra", "expected"), [
    ('search: {space: {"instance_group[1000000000].count": [1]}}',
     "search.space.instance_group[1000000000].count: an element index must be < 1024 (at most "
     "1024 elements of a list), but got 1000000000"),
    ("search: {space: {max_batch_size: [8, 3000000000]}}",
     "search.space.max_batch_size[1]: must be <= 2147483647 (the largest int32 value), but got "
     "3000000000"),
    ("search: {space: {dynamic_batching.preferred_batch_size: [-3000000000]}}",
     "search.space.dynamic_batching.preferred_batch_size[0]: must be >= 1, but got -3000000000"),
    ("search: {space: {dynamic_batching.max_queue_delay_microseconds: [18446744073709551616]}}",
     "search.space.dynamic_batching.max_queue_delay_microseconds[0]: must be <= "
     "18446744073709551615 (the largest uint64 value), but got 18446744073709551616"),
    ("search: {space: {dynamic_batching.max_queue_delay_microseconds: {low: -5, high: 10}}}",
     "search.space.dynamic_batching.max_queue_delay_microseconds.low: must be >= 0, but got -5"),
    ("search: {space: {instance_group.count: [1, 1000000000]}}",
     "search.space.instance_group.count[1]: must be <= 1024 (instances in one group), but got "
     "1000000000"),
    ("search: {space: {instance_group.count: {low: 1, high: 2048, step: 1}}}",
     "search.space.instance_group.count.high: must be <= 1024 (instances in one group), but "
     "got 2048"),
    ("search: {space: {max_batch_size: {low: 1, high: 3000000000}}}",
     "search.space.max_batch_size: a range holds at most 1000000 values (give it a larger "
     "`step` or `log: true`), but (low=1, high=3000000000, step=None) holds 3000000000"),
    ("search: {space: {dynamic_batching.max_queue_delay_microseconds: "
     "{low: 0.0, high: 1.0, step: 0.0000001}}}",
     "a range holds at most 1000000 values"),
])
def test_check_refuses_values_beyond_the_limits(tmp_path: Path, extra: str,
                                                expected: str) -> None:
    assert expected in refused_by_check(tmp_path, extra)


def test_a_search_list_is_bounded(tmp_path: Path) -> None:
    many = ", ".join(str(i) for i in range(1, MAX_CHOICES + 2))
    err = refused_by_check(tmp_path, f"search: {{space: {{max_batch_size: [{many}]}}}}")
    assert f"search.space.max_batch_size: a search list holds at most {MAX_CHOICES} values, " \
           f"but got {MAX_CHOICES + 1}" in err


def test_values_within_the_limits_pass(tmp_path: Path) -> None:
    (tmp_path / "study.yaml").write_text(
        HEAD + "search: {space: {max_batch_size: [1, 2147483647], instance_group.count: "
        "{low: 1, high: 1024}, dynamic_batching.max_queue_delay_microseconds: "
        "[0, 18446744073709551615], instance_group.1023.count: [1]}}\n")
    space = load_spec(tmp_path / "study.yaml").search.space
    assert space["instance_group.1023.count"] == [1]
    big = Range(low=0, high=MAX_RANGE_VALUES - 1)
    started = time.monotonic()
    assert space_size({"x": big, "y": [1, 2]}) == 2 * MAX_RANGE_VALUES  # counted, not listed
    assert time.monotonic() - started < 0.1
    for log in (Range(low=1, high=2**40, log=True), Range(low=3, high=100, log=True)):
        assert space_size({"x": log}) == len(values(log) or [])


def test_a_far_index_and_a_huge_count_are_refused_at_trial_time_too(
        tmp_path: Path, quickstart_info: model_config.ModelInfo) -> None:
    cfg = model_config.ModelConfig()
    with pytest.raises(ConfigError, match=r"an element index must be < 1024.*got 5000000"):
        field_paths.set_value(cfg, "instance_group.5000000.count", 1)
    assert len(cfg.instance_group) == 0  # nothing was allocated
    with pytest.raises(ConfigError, match=r"instance_group\[0\]\.count must be <= 1024 "
                                          r"\(instances in one group\), but got 1000000000"):
        model_config.apply(quickstart_info, {"instance_group.count": 1_000_000_000})
    base = model_config.apply(quickstart_info, {})
    base.instance_group.add(count=1_000_000_000)  # a base config.pbtxt can say so too
    with pytest.raises(ConfigError, match="must be <= 1024"):
        model_config.validate(base, supports_batching=True)


def _bomb(levels: int, width: int = 9) -> str:
    """The billion laughs: each level an anchored list of ``width`` aliases of the one
    below, ``width ** levels`` strings in all."""
    lines = ["x-a0: &a0 [" + ", ".join(['"lol"'] * width) + "]"]
    for i in range(1, levels):
        lines.append(f"x-a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]")
    return HEAD + "\n".join(lines) + f"\nsearch: {{space: {{max_batch_size: *a{levels - 1}}}}}\n"


def test_an_alias_bomb_is_refused_in_well_under_a_second(tmp_path: Path) -> None:
    path = tmp_path / "study.yaml"
    path.write_text(_bomb(9))  # 9^9 = 387,420,489 strings
    started = time.monotonic()
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert time.monotonic() - started < 0.5
    assert "invalid YAML: aliases may expand a document to at most 10000 nodes, but this one " \
           "expands to" in str(info.value)
    # the same in one flow list: a `tracker config --set PATH=[...]` value
    items = ["&a0 [" + ", ".join(["lol"] * 9) + "]"]
    items += [f"&a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 9)]
    started = time.monotonic()
    with pytest.raises(ConfigError, match="aliases may expand a document to at most 10000"):
        model_config.parse_assignment("dims=[" + ", ".join(items) + "]")
    assert time.monotonic() - started < 0.5


def test_a_recursive_alias_is_refused_and_a_few_aliases_are_fine(tmp_path: Path) -> None:
    path = tmp_path / "study.yaml"
    path.write_text(HEAD + "x-loop: &loop [1, *loop]\n")
    with pytest.raises(SpecError, match="an alias may not name a node that contains it"):
        load_spec(path)
    path.write_text(HEAD + "x-load: &load {window_ms: 200, max_tries: 3}\nload: *load\n"
                    "search: {space: {max_batch_size: &sizes [1, 2, 4]}}\n")
    assert load_spec(path).load.window_ms == 200
