"""load.priorities and the model_warmup knobs in the spec and at ``tracker check``: shares that
do not sum to 1, a level the model does not have (Triton would serve it at the default level
without a word), a constraint on a level the load never sends, a warmup batch above
max_batch_size or on a stateful model: each one line naming the field and the value."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.support import models
from tests.support.tune import refused_by_check
from tracker.cli import cli
from tracker.errors import SpecError
from tracker.spec import parse_spec
from tracker.triton import model_config

MODEL = {"name": "m", "path": "m.onnx"}
LEVELS = "dynamic_batching.priority_levels: [2], dynamic_batching.default_priority_level: [2]"


def problems(data: dict[str, object]) -> list[str]:
    with pytest.raises(SpecError) as info:
        parse_spec({"model": MODEL, **data})
    return info.value.messages


def test_shares_and_per_level_metrics_in_the_spec() -> None:
    spec = parse_spec({"model": MODEL, "load": {"priorities": {2: 0.7, 1: 0.3}},
                       "constraints": {"perf_latency_p99/priority_1": {"max": 5}},
                       "objectives": {"perf_throughput/priority_2": "maximize"}})
    assert spec.load.priorities == {1: 0.3, 2: 0.7}  # ordered by level
    assert problems({"load": {"priorities": {1: 0.5, 2: 0.4}}}) == [
        "load.priorities: the shares must sum to 1, but they sum to 0.9: {1: 0.5, 2: 0.4}"]
    assert problems({"load": {"priorities": {0: 1.0}}}) == [
        "load.priorities[0]: must be >= 1, but got 0"]
    assert problems({"constraints": {"gpu_utilization/priority_1": {"max": 5}}})[0].startswith(
        "constraints.gpu_utilization/priority_1: unknown metric")


CHECKED = [
    ("load: {priorities: {1: 0.5, 3: 0.5}}\nsearch: {space: {" + LEVELS + "}}",
     "search.space.dynamic_batching.priority_levels: load.priorities sends requests at "
     "level 3, but priority_levels may be 2; Triton serves a request above priority_levels "
     "at default_priority_level without a word"),
    ("load: {priorities: {1: 0.5, 2: 0.5}}",
     "load.priorities: sends requests at levels [1, 2], but model 'quickstart' has no "
     "priority levels"),
    ("load: {priorities: {1: 0.5, 2: 0.5}}\nsearch: {space: {" + LEVELS + "}}\n"
     "constraints: {perf_latency_p99/priority_3: {max: 10}}",
     "constraints.perf_latency_p99/priority_3: names priority level 3, but the load of model "
     "'quickstart' sends no request at it (its levels: [1, 2])"),
    ("search: {space: {model_warmup.count: [0, 2], model_warmup.batch_size: [1, 16], "
     "max_batch_size: [8]}}",
     "search.space.model_warmup.batch_size: a warmup batch must be at most max_batch_size "
     "(8; 1 for a model that cannot batch), but may be 16"),
]


@pytest.mark.parametrize(("extra", "expected"), CHECKED,
                         ids=["above-levels", "no-levels", "unsent-level", "warmup-batch"])
def test_tracker_check_refuses_what_triton_would_ignore_or_refuse(
        tmp_path: Path, extra: str, expected: str) -> None:
    assert expected in refused_by_check(tmp_path, extra)


def test_tracker_check_lists_the_priorities_and_the_warmup_knobs(tmp_path: Path) -> None:
    models.dynamic_batch(tmp_path / "model.onnx")
    path = tmp_path / "study.yaml"
    path.write_text("model: {name: quickstart, path: model.onnx}\n"
                    "load: {priorities: {1: 0.25, 2: 0.75}}\n"
                    "constraints: {perf_latency_p99/priority_1: {max: 10}}\n"
                    "search: {space: {" + LEVELS + ", model_warmup.count: [0, 2]}}\n")
    result = CliRunner().invoke(cli, ["check", str(path)])
    assert result.exit_code == 0, result.output
    assert "load priorities {1: 0.25, 2: 0.75}" in result.output
    assert "model_warmup.count" in result.output


def test_a_trial_that_gives_levels_gets_the_lowest_as_default_level() -> None:
    base = model_config.parse('name: "m" max_batch_size: 4 dynamic_batching {} '
                              'input [{name: "x" data_type: TYPE_FP32 dims: [2]}]')
    cfg = model_config.apply(base, {"dynamic_batching.priority_levels": 3},
                             supports_batching=True)
    assert (cfg.dynamic_batching.priority_levels, cfg.dynamic_batching.default_priority_level) \
        == (3, 3)  # Triton refuses levels without a default level in [1, levels]
    cfg = model_config.apply(base, {"dynamic_batching.priority_levels": 3,
                                    "dynamic_batching.default_priority_level": 1},
                             supports_batching=True)
    assert cfg.dynamic_batching.default_priority_level == 1
    assert model_config.apply(base, {"dynamic_batching.priority_levels": 0},
                              supports_batching=True).dynamic_batching.default_priority_level == 0
