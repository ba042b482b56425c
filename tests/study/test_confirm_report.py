"""A stored confirmation record -> the verdict, the sentence, the MLflow figures
(tracker/tracking/confirmed.py), and the spec's `confirm` section."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tracker.errors import SpecError
from tracker.spec import parse_spec
from tracker.tracking import confirmed

OBJ = {"perf_throughput": "maximize"}


def _record(table: dict[int, list[float | None]], *, p99: dict[int, float] | None = None,
            instances: dict[int, int] | None = None) -> dict[str, Any]:
    rounds = len(next(iter(table.values())))
    return {
        "status": "done",
        "candidates": [{"trial": n, "baseline": n == 0, "concurrency": 2,
                        "instances": (instances or {}).get(n, 1)} for n in table],
        "rounds": [{"order": list(table), "results": {
            str(n): ({"error": "failed"} if vals[i] is None else
                     {"perf_throughput": vals[i], "perf_latency_p99": (p99 or {}).get(n, 80.0),
                      "feasible": True})
            for n, vals in table.items()}} for i in range(rounds)],
    }


def test_better_sentence_names_the_intervals_and_the_default() -> None:
    rec = _record({0: [28.0, 28.6, 28.3], 4: [30.6, 31.3, 30.9], 1: [29.0, 29.4, 29.2]})
    v = confirmed.verdict(rec, OBJ)
    assert v is not None and v.verdict == "better" and v.chosen == "trial-4"
    text = confirmed.sentence(v, OBJ)
    assert text.startswith("confirmed in 3 interleaved rounds: trial-4 gives 30.90 infer/s "
                           "(95% CI ")
    assert "better than the default configuration (28.30 infer/s)." in text
    metrics = confirmed.parent_metrics(v, OBJ)
    assert metrics["confirm/perf_throughput"] == pytest.approx(30.9)
    assert metrics["improvement_pct_ci_low"] > 0
    assert metrics["improvement_pct_ci_low"] < metrics["improvement_pct"] \
        < metrics["improvement_pct_ci_high"]
    assert confirmed.parent_tags(v)[confirmed.VERDICT_TAG] == "better"
    assert confirmed.parent_tags(v)["tracker.confirmed_trial"] == 4


def test_tied_sentence_lists_the_tied_and_why_the_cheaper_was_chosen() -> None:
    rec = _record({0: [28.0, 28.6, 28.3], 4: [31.0, 31.8, 30.6], 1: [31.2, 30.9, 31.0]},
                  p99={4: 90.0, 1: 60.0}, instances={4: 3, 1: 2})
    v = confirmed.verdict(rec, OBJ)
    assert v is not None and v.verdict == "tied"
    text = confirmed.sentence(v, OBJ)
    assert v.chosen == "trial-1"
    assert "trial-1 gives" in text and "trial-4 is statistically tied" in text
    assert "chosen as the cheaper" in text


def test_no_better_says_so_plainly_and_a_failed_round_is_left_out() -> None:
    rec = _record({0: [28.0, 28.6, None, 28.3], 2: [28.4, 28.1, 30.0, 28.5]})
    v = confirmed.verdict(rec, OBJ)
    assert v is not None and v.verdict == "no_better" and v.chosen == "trial-0"
    assert v.scored["trial-2"].improvement is not None
    assert v.scored["trial-2"].improvement.n == 3   # the round without the default is not paired
    text = confirmed.sentence(v, OBJ)
    assert "no configuration is measurably better than the default configuration" in text
    assert "nothing is promoted unless forced" in text
    csv_text = confirmed.rounds_csv(rec, "perf_throughput")
    assert csv_text.splitlines()[0].startswith("round,position,trial,perf_throughput")
    assert "failed" in csv_text


def test_no_verdict_without_a_measured_default() -> None:
    assert confirmed.verdict(None, OBJ) is None
    assert confirmed.verdict(_record({0: [None, None], 1: [3.0, 3.1]}), OBJ) is None


def test_confirm_section_is_validated_like_the_others(tmp_path: Path) -> None:
    model = {"name": "m", "path": str(tmp_path / "m.onnx")}
    assert parse_spec({"model": model}).confirm.enabled is True
    with pytest.raises(SpecError, match=r"confirm\.min_rounds: `min_rounds <= rounds` must hold, "
                                        r"but got \(min_rounds=6, rounds=5\)"):
        parse_spec({"model": model, "confirm": {"min_rounds": 6}})
    with pytest.raises(SpecError, match=r"confirm\.topk: unknown field"):
        parse_spec({"model": model, "confirm": {"topk": 2}})
    with pytest.raises(SpecError, match=r"confirm\.rounds"):
        parse_spec({"model": model, "confirm": {"rounds": 0}})
