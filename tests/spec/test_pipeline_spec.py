"""The spec's words for a pipeline: knobs as <model>/<field path>, metrics with a model in
them, and what is refused before any model is read."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tracker.errors import SpecError
from tracker.spec import parse_spec


def _spec(tmp_path: Path, **parts: object) -> dict[str, object]:
    (tmp_path / "repo").mkdir(exist_ok=True)
    return {"model": {"name": "pipe", "path": str(tmp_path / "repo")}, **parts}


def test_prefixed_knobs_and_step_metrics_are_accepted(tmp_path: Path) -> None:
    spec = parse_spec(_spec(
        tmp_path, search={"space": {"prep/instance_group.count": [1, 2],
                                    "net/dynamic_batching.max_queue_delay_microseconds": [0]}},
        constraints={"model/prep/queue_ms": {"max": 5}, "perf_latency_p99": {"max": 50}},
        objectives={"model/net/requests_per_s": "maximize"}))
    assert list(spec.search.space) == ["prep/instance_group.count",
                                       "net/dynamic_batching.max_queue_delay_microseconds"]
    assert "model/prep/queue_ms" in spec.constraints


def test_prefixed_knob_values_are_checked_like_bare_ones(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"space\.prep/instance_group\.count\[0\]: must be >= 1"):
        parse_spec(_spec(tmp_path, search={"space": {"prep/instance_group.count": [0, 2]}}))
    with pytest.raises(SpecError, match=r"unknown knob; did you mean 'instance_group\.count'"):
        parse_spec(_spec(tmp_path, search={"space": {"prep/instance_grop.count": [1]}}))
    with pytest.raises(SpecError, match="load knobs such as 'concurrency' take no model"):
        parse_spec(_spec(tmp_path, search={"space": {"prep/concurrency": [1]}}))


def test_unknown_step_metric_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="unknown metric 'model/prep/queue'"):
        parse_spec(_spec(tmp_path, constraints={"model/prep/queue": {"max": 1}}))


def _several(tmp_path: Path, **parts: object) -> dict[str, object]:
    data = _spec(tmp_path, **parts)
    data["model"] = {"name": ["a", "b"], "path": str(tmp_path / "repo")}
    return data


def test_several_entries_get_weighted_gain_and_their_own_loads(tmp_path: Path) -> None:
    (tmp_path / "b.json").write_text("{}")
    spec = parse_spec(_several(tmp_path, load={
        "window_ms": 500, "concurrency": [2],
        "models": {"b": {"concurrency": [1, 8], "input_data": "b.json"}}}),
        base_dir=tmp_path)
    assert dict(spec.objectives) == {"weighted_gain": "maximize"}
    assert spec.study_name == "a+b"
    a, b = spec.load.for_model("a"), spec.load.for_model("b")
    assert (a.concurrency, b.concurrency) == ([2], [1, 8])
    assert a.window_ms == b.window_ms == 500  # the shared settings stay
    assert b.input_data == tmp_path / "b.json" and a.input_data is None
    weighted = _several(tmp_path)
    weighted["model"]["weights"] = {"a": 3, "b": 1}  # type: ignore[index]
    assert parse_spec(weighted).model.weights == {"a": 3.0, "b": 1.0}


@pytest.mark.parametrize(("change", "message"), [
    ({"objectives": {"perf_throughput": "maximize"}},
     "objectives: several entry models (a, b) are judged by one score, weighted_gain"),
    ({"load": {"models": {"c": {}}}}, "load.models.c: names no entry model"),
    ({"load": {"models": {"b": {"concurrency": "8"}}}}, "load.models.b.concurrency"),
    ({"load": {"models": {"b": {"windows": 3}}}}, "load.models.b.windows: Extra inputs"),
    ({"search": {"space": {"concurrency": [1, 2]}}},
     "search.space.concurrency: sets every model's load at once"),
    ({"weights": {"c": 1}}, "model.weights.c: names no entry model"),
    ({"weights": {"a": 0}}, "model.weights.a"),
    ({"composing": ["x"]}, "model.composing: lists the models one BLS entry calls"),
    ({"load": {"shared_memory": "system"}},
     "load.shared_memory: 'system' is for one entry model; several measured together (a, b)"),
])
def test_several_entries_refuse_what_does_not_fit(tmp_path: Path, change: dict[str, object],
                                                  message: str) -> None:
    data = _several(tmp_path)
    for key in ("weights", "composing"):
        if key in change:
            data["model"][key] = change.pop(key)  # type: ignore[index]
    data.update(change)
    with pytest.raises(SpecError, match=re.escape(message)):
        parse_spec(data)


def test_one_entry_refuses_the_joint_words(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="weighted_gain scores several entry models"):
        parse_spec(_spec(tmp_path, objectives={"weighted_gain": "maximize"}))
    with pytest.raises(SpecError, match=r"load\.models\.pipe: names no entry model"):
        parse_spec(_spec(tmp_path, load={"models": {"pipe": {"concurrency": [2]}}}))
