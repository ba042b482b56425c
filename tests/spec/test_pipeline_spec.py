"""The spec's words for a pipeline: knobs as <model>/<field path>, metrics with a model in
them, and what is refused before any model is read."""

from __future__ import annotations

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


def test_unknown_metric_and_several_entries_are_refused(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="unknown metric 'model/prep/queue'"):
        parse_spec(_spec(tmp_path, constraints={"model/prep/queue": {"max": 1}}))
    data = _spec(tmp_path)
    data["model"] = {"name": ["a", "b"], "path": str(tmp_path / "repo")}
    with pytest.raises(SpecError, match="several independent entry models in one study are "
                                        "not tuned yet"):
        parse_spec(data)
