"""A stored confirmation record -> the verdict, the sentence, the MLflow figures
(tracker/verdict/record.py, words.py), and the spec's `confirm` section."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tracker.errors import SpecError
from tracker.spec import parse_spec
from tracker.verdict import record as confirmed
from tracker.verdict import words

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
    rec = _record({0: [28.0, 28.6, 28.3, 28.1, 28.4], 4: [30.6, 31.3, 30.9, 30.7, 31.0],
                   1: [29.0, 29.4, 29.2, 29.1, 29.3]})
    v = confirmed.verdict(rec, OBJ)
    assert v is not None and v.verdict == "better" and v.chosen == "trial-4"
    text = words.sentence(v, OBJ)
    assert text.startswith("confirmed in 5 interleaved rounds: trial-4 gives 30.90 infer/s "
                           "(95% CI ")
    assert "better than the default configuration (28.30 infer/s)." in text
    metrics = words.parent_metrics(v, OBJ)
    assert metrics["confirm/perf_throughput"] == pytest.approx(30.9)
    assert metrics["improvement_pct_ci_low"] > 0
    assert metrics["improvement_pct_ci_low"] < metrics["improvement_pct"] \
        < metrics["improvement_pct_ci_high"]
    tags = words.parent_tags(v)
    assert tags[confirmed.VERDICT_TAG] == "better"
    assert tags["tracker.confirmed_trial"] == 4 and tags["tracker.confirm_swings"] == ""
    run = words.scored_metrics(v.scored["trial-4"], "perf_throughput")
    assert run["confirm/perf_throughput_min"] == 30.6          # the worst round
    assert run["confirm/perf_throughput_cv_pct"] == pytest.approx(0.886, abs=0.01)
    assert words.headline(v).startswith("confirmed: better, trial-4 +")


def test_tied_sentence_lists_the_tied_and_why_the_cheaper_was_chosen() -> None:
    rec = _record({0: [28.0, 28.6, 28.3, 28.2, 28.5], 4: [31.0, 31.8, 30.6, 31.4, 31.2],
                   1: [31.2, 30.9, 31.0, 31.1, 31.3]},
                  p99={4: 90.0, 1: 60.0}, instances={4: 3, 1: 2})
    v = confirmed.verdict(rec, OBJ)
    assert v is not None and v.verdict == "tied"
    text = words.sentence(v, OBJ)
    assert v.chosen == "trial-1"
    assert "trial-1 gives" in text and "trial-4 is statistically tied" in text
    assert "chosen as the cheaper" in text


def test_equivalent_says_keep_the_default_and_a_failed_round_is_left_out() -> None:
    rec = _record({0: [28.0, 28.6, None, 28.3, 28.1, 28.4, 28.2],
                   2: [28.1, 28.5, 30.0, 28.3, 28.0, 28.5, 28.1]})
    v = confirmed.verdict(rec, OBJ)
    assert v is not None and v.verdict == "equivalent" and v.chosen == "trial-0"
    assert v.scored["trial-2"].improvement is not None
    assert v.scored["trial-2"].improvement.n == 6   # the round without the default is not paired
    text = words.sentence(v, OBJ)
    assert "equivalent: no configuration beats the default configuration" in text
    assert "by more than the 5% tie margin" in text
    assert "keep the default; nothing is promoted unless forced" in text
    csv_text = confirmed.rounds_csv(rec, "perf_throughput")
    assert csv_text.splitlines()[0].startswith("round,position,trial,perf_throughput")
    assert "failed" in csv_text


def test_inconclusive_says_the_rounds_the_interval_and_how_to_measure_more() -> None:
    rec = _record({0: [24.9, 26.6, 16.0], 4: [26.9, 30.5, 31.6]})
    v = confirmed.verdict(rec, OBJ)
    assert v is not None and v.verdict == "inconclusive" and v.keeps_default
    command = words.more_command(rec, v, OBJ, "projects/densenet_onnx/study.yaml")
    assert command.startswith("tracker confirm projects/densenet_onnx/study.yaml --rounds ")
    assert int(command.rsplit(" ", 1)[1]) >= 6
    text = words.sentence(v, OBJ, command)
    assert text.startswith("inconclusive after 3 interleaved rounds: the best, trial-4, is ")
    imp = v.scored["trial-4"].improvement
    assert imp is not None and f"{imp.low:.0f} to {imp.high:.0f}%" in text
    assert f"`{command}` measures more of the same rounds" in text
    assert "the default is kept and nothing is promoted unless forced" in text
    assert "inconclusive after 3 rounds" in words.headline(v)
    paired = words.sentence(replace(v, design="paired"), OBJ, command)
    assert f"`{command}` measures more of the same pairs" in paired


def test_an_old_no_better_record_reads_by_todays_rules() -> None:
    """A record from before the tie margin (no tie_margin_pct, rounds_target 5): its verdict is
    recomputed with the default margin; the sentence never says no_better."""
    rec = _record({0: [28.0, 28.6, 28.3], 2: [28.4, 28.1, 30.0]})
    rec["rounds_target"] = 5
    v = confirmed.verdict(rec, OBJ)
    assert v is not None and v.verdict in ("equivalent", "inconclusive")
    assert v.margin_pct == 5.0 and "no_better" not in words.sentence(v, OBJ)


def test_a_configuration_whose_readings_swing_is_named() -> None:
    rec = _record({0: [14.3, 8.9, 16.3, 10.2, 17.0, 9.1], 3: [20.1, 19.6, 19.9, 20.9, 20.6, 19.2],
                   4: [21.7, 22.3, 20.9, 21.6, 22.9, 21.1]})
    v = confirmed.verdict(rec, OBJ)
    assert v is not None
    assert "The default configuration's readings swing far more than the others' " \
        "(round-to-round CV" in words.sentence(v, OBJ)
    assert words.parent_tags(v)["tracker.confirm_swings"] == "trial-0"


def test_no_verdict_without_a_measured_default() -> None:
    assert confirmed.verdict(None, OBJ) is None
    assert confirmed.verdict(_record({0: [None, None], 1: [3.0, 3.1]}), OBJ) is None


def test_confirm_section_is_validated_like_the_others(tmp_path: Path) -> None:
    model = {"name": "m", "path": str(tmp_path / "m.onnx")}
    assert parse_spec({"model": model}).confirm.enabled is True
    with pytest.raises(SpecError, match=r"confirm\.min_rounds: `min_rounds <= rounds` must hold, "
                                        r"but got \(min_rounds=11, rounds=10\)"):
        parse_spec({"model": model, "confirm": {"min_rounds": 11}})
    with pytest.raises(SpecError, match=r"confirm\.tie_margin_pct"):
        parse_spec({"model": model, "confirm": {"tie_margin_pct": 0}})
    assert parse_spec({"model": model, "confirm": {"budget_s": 60}}).confirm.budget_s == 60
    with pytest.raises(SpecError, match=r"confirm\.topk: unknown field"):
        parse_spec({"model": model, "confirm": {"topk": 2}})
    with pytest.raises(SpecError, match=r"confirm\.rounds"):
        parse_spec({"model": model, "confirm": {"rounds": 0}})


# ---- when the rounds stop (tracker/verdict/stopping.py), on stored records ----------------------

def _timed(rec: dict[str, Any], seconds: float) -> dict[str, Any]:
    for rnd in rec["rounds"]:
        for got in rnd["results"].values():
            got["seconds"] = seconds
    rec.update(min_rounds=3, rounds_target=10, tie_margin_pct=5.0)
    return rec


def test_rounds_stop_when_decided_at_the_most_rounds_or_at_the_budget() -> None:
    from tracker.verdict.stopping import next_step as _next

    every = ["trial-0", "trial-4"]
    decided = _timed(_record({0: [28.0, 28.6, 28.3, 28.1, 28.4],
                              4: [30.6, 31.3, 30.9, 30.7, 31.0]}), 5.0)
    assert _next(decided, OBJ, every, 0.0) == ([], "decided (better) after 5 rounds")
    early = _timed(_record({0: [28.0, 28.6], 4: [30.6, 31.3]}), 5.0)
    assert _next(early, OBJ, every, 20.0) == (every, "")   # before min_rounds: go on
    noisy = _timed(_record({0: [24.9, 26.6, 16.0], 4: [26.9, 30.5, 31.6]}), 5.0)
    assert _next(noisy, OBJ, every, 30.0) == (every, "")
    noisy["budget_s"] = 35.0                                # another round: 2 x 5 s > 5 s left
    keys, why = _next(noisy, OBJ, every, 30.0)
    assert keys == [] and why.startswith("budget: another round (about 10 s) would not fit")
    assert _next(noisy, OBJ, every, 0.0)[1] == ""          # a new invocation's budget is fresh
    noisy["rounds_target"] = 3
    assert _next(noisy, OBJ, every, 0.0)[1] == "3 rounds done (the most asked for) without " \
                                                "a decision"


def test_the_default_budget_is_the_search_time() -> None:
    import datetime

    import optuna

    from tracker.confirm.rounds import search_seconds

    study = optuna.create_study()
    assert search_seconds(study) is None
    start = datetime.datetime(2026, 12, 1, 12, 0, 0)
    for number, took in enumerate((8.0, 12.5)):
        study.add_trial(optuna.trial.FrozenTrial(
            number=number, state=optuna.trial.TrialState.COMPLETE, value=1.0,
            datetime_start=start, datetime_complete=start + datetime.timedelta(seconds=took),
            params={}, distributions={}, user_attrs={}, system_attrs={},
            intermediate_values={}, trial_id=number))
    assert search_seconds(study) == 20.5
