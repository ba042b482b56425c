"""The paired design's rules (tracker/confirm/paired.py) without a server: when pairing cannot
hold, the block's window, the pairs' order, and how a paired record reads (its verdict says
which design it used)."""

from __future__ import annotations

import math
import re
from types import SimpleNamespace
from typing import Any

import pytest

from tracker import tags
from tracker.confirm import paired
from tracker.errors import GpuError
from tracker.trial_record import TrialRow
from tracker.verdict import record as confirmed
from tracker.verdict import words
from tracker.verdict.record import Record

OBJ = {"perf_throughput": "maximize"}


def _row(n: int, params: dict[str, object], *, baseline: bool = False,
         memory: float | None = None) -> TrialRow:
    metrics = {"perf_throughput": 100.0}
    if memory is not None:
        metrics["gpu_used_memory"] = memory
    return TrialRow(n, "COMPLETE", params, [100.0], metrics, True, baseline, concurrency=4)


def _ctx(pairs: bool = True, total_mb: float | None = None,
         objective: str = "perf_throughput") -> Any:
    def gpu_set() -> list[Any]:
        if total_mb is None:
            raise GpuError("no NVML here")
        return [SimpleNamespace(memory_total_mb=total_mb)]

    why = None if pairs else ("BLS model 'bls' names the models it calls in its own code, "
                              "so a copy of it would call the default's models")
    return SimpleNamespace(configuration=SimpleNamespace(pairing_problem=why),
                           bench=SimpleNamespace(server=SimpleNamespace(gpu_set=gpu_set)),
                           spec=SimpleNamespace(objectives={objective: "maximize"}))


def test_a_server_option_that_differs_falls_back_to_rounds_and_says_which() -> None:
    base = _row(0, {"max_batch_size": 8, "server/rate-limit": "off"}, baseline=True)
    best = _row(3, {"max_batch_size": 8, "server/rate-limit": "execution_count"})
    got = paired.choose(_ctx(), [base, best], paired.AUTO)
    assert not got.paired and got.name == paired.ROUNDS
    assert "server/rate-limit" in got.reason and "execution_count" in got.reason
    # the same server option on both (and model knobs that differ) still pairs
    same = _row(3, {"max_batch_size": 32, "server/rate-limit": "off"})
    assert paired.choose(_ctx(), [base, same], paired.AUTO).paired
    # a server option the default leaves unset differs from one the best sets
    assert paired.option_difference({}, {"server/cache-config": "local,size=1"}) == (
        "server/cache-config ('unset' for the default, 'local,size=1' for the best)")
    assert paired.option_difference({"instance_group.count": 1},
                                    {"instance_group.count": 2}) is None


def test_a_bls_model_too_big_or_asked_rounds_fall_back() -> None:
    base, best = _row(0, {}, baseline=True, memory=600.0), _row(2, {}, memory=500.0)
    assert "BLS model 'bls'" in paired.choose(_ctx(pairs=False), [base, best], "auto").reason
    assert paired.choose(_ctx(), [base, best], "rounds").reason == "confirm.design is rounds"
    big = paired.choose(_ctx(total_mb=1000.0), [base, best], "auto")
    assert not big.paired and "1100 MB" in big.reason and "1000 MB" in big.reason
    assert paired.choose(_ctx(total_mb=80_000.0), [base, best], "auto").paired
    assert paired.too_big((600.0, None), 1000.0) is None  # a figure unknown: nothing known
    # a capacity is searched per configuration: its confirmation is always in rounds
    searched = paired.choose(_ctx(objective="perf_capacity"), [base, best], "auto")
    assert not searched.paired and "a capacity is searched" in searched.reason


def test_block_window_is_sized_from_the_slower_throughput_within_bounds() -> None:
    # 24 requests over 3 windows at 5 infer/s (the slower): 1.6 s windows, capped by the
    # spec's window; at 10 infer/s 800 ms; at 20, 400 ms, raised to the 500 ms floor
    assert paired.window_ms([5.0, 80.0], 5000) == 1600
    assert paired.window_ms([5.0, 80.0], 1000) == 1000
    assert paired.window_ms([10.0, 80.0], 1000) == 800
    assert paired.window_ms([20.0], 1000) == paired.MIN_WINDOW_MS == 500
    assert paired.window_ms([None, 0.0], 700) == 700


def test_the_order_alternates_from_a_drawn_first_pair() -> None:
    orders = [tuple(paired.order_of(7, i, [0, 3])) for i in range(40)]
    assert orders == [tuple(paired.order_of(7, i, [0, 3])) for i in range(40)]  # reproducible
    assert all(orders[i] == orders[i + 1][::-1] for i in range(39))  # AB, BA, AB, ...
    firsts = {paired.order_of(seed, 0, [0, 3])[0] for seed in range(20)}
    assert firsts == {0, 3}  # which copy goes first is drawn
    three = [tuple(paired.order_of(7, i, [0, 3, 5])) for i in range(40)]
    assert len(set(three)) > 2 and all(sorted(o) == [0, 3, 5] for o in three)


def _paired_record(ratios: list[float], design: str = paired.PAIRED,
                   reason: str = "") -> Record:
    rounds: list[Any] = []
    for i, r in enumerate(ratios):
        rounds.append({"order": [0, 3] if i % 2 else [3, 0],
                       "results": {"0": {"perf_throughput": 100.0, "perf_latency_p99": 10.0,
                                         "feasible": True, "seconds": 1.0},
                                   "3": {"perf_throughput": 100.0 * r, "perf_latency_p99": 9.0,
                                         "feasible": True, "seconds": 1.0}}})
    return {"status": "done", "rounds_target": 30, "min_rounds": 3, "top_k": 3, "seed": 1,
            "tie_margin_pct": 5.0, "budget_s": None, "stop": "", "design": design,
            "design_reason": reason,
            "candidates": [{"trial": 0, "baseline": True, "concurrency": 4, "instances": 1},
                           {"trial": 3, "baseline": False, "concurrency": 4, "instances": 2}],
            "rounds": rounds}


def test_a_paired_record_reads_as_pairs_with_the_same_verdict_words() -> None:
    record = _paired_record([1.50, 1.52, 1.49, 1.51, 1.50, 1.48, 1.53])
    v = confirmed.verdict(record, OBJ)
    assert v is not None and v.design == paired.PAIRED and v.rounds == 7
    imp = v.scored["trial-3"].improvement
    assert imp is not None and imp.n == 7  # one log-ratio per pair
    assert imp.estimate == pytest.approx(50.0, abs=0.5)
    logs = [math.log(r) for r in (1.50, 1.52, 1.49, 1.51, 1.50, 1.48, 1.53)]
    assert imp.low < 100 * math.expm1(min(logs)) and imp.high > 100 * math.expm1(max(logs))
    text = words.sentence(v, OBJ)
    assert "7 pairs side by side" in text and "interleaved" not in text
    assert "in 7 pairs" in words.headline(v)
    assert words.parent_tags(v)[tags.CONFIRM_DESIGN] == "paired"
    # the per-pair ratios, in the note and a tag, in the order measured
    assert text.endswith("Per pair, trial-3 / the default: 1.50, 1.52, 1.49, 1.51, 1.50, "
                         "1.48, 1.53.")
    assert words.parent_tags(v)[tags.CONFIRM_PAIR_RATIOS].startswith("1.50, 1.52, 1.49")
    open_ = _paired_record([1.5, 0.9, 1.2])
    undecided = confirmed.verdict(open_, OBJ)
    assert undecided is not None
    more = int(words.more_command(open_, undecided, OBJ).rsplit(" ", 1)[1])
    assert more * confirmed.PAIRS_PER_ROUND >= 3 + 3  # --rounds counts rounds of pairs


def test_a_fallback_verdict_says_it_ran_in_rounds_and_why() -> None:
    why = "in rounds, not paired: the best differs from the default in a server option, x"
    v = confirmed.verdict(_paired_record([1.5, 1.5, 1.5], paired.ROUNDS, why), OBJ)
    assert v is not None and v.design == paired.ROUNDS
    text = words.sentence(v, OBJ)
    assert "interleaved rounds" in text and text.endswith(f"Measured {why}.")
    assert "Per pair" not in text and words.parent_tags(v)[tags.CONFIRM_PAIR_RATIOS] == ""
    assert words.parent_tags(v)[tags.CONFIRM_DESIGN_REASON] == why
    old = _paired_record([1.5, 1.5, 1.5])
    del old["design"], old["design_reason"]  # a record from before the paired design
    v_old = confirmed.verdict(old, OBJ)
    assert v_old is not None and v_old.design == paired.ROUNDS


def test_a_short_study_s_pairs_go_on_past_the_budget_only_while_their_spread_can_decide() -> None:
    from tracker.verdict.stopping import PAIRED_MIN, next_step

    every = ["trial-0", "trial-3"]
    # 6 undecided pairs of 2 s (two 1-s blocks), 12 s spent of a 12 s budget: another pair
    # does not fit; their log-ratios (mean 0.2, sd 0.23) would decide in about 20 pairs
    record = _paired_record([1.5, 0.9, 1.4, 1.0, 1.6, 1.1])
    record.update(status="running", budget_s=12.0)
    assert len(record["rounds"]) == PAIRED_MIN
    keys, why = next_step(record, OBJ, every, 12.0, paired_min=PAIRED_MIN)
    assert keys == [] and why.startswith("budget: another pair (about 2 s) would not fit")
    record["budget_floor_s"] = 60.0  # 12 s + 14 more pairs x 2 s fits in 60 s: go on
    assert next_step(record, OBJ, every, 12.0, paired_min=PAIRED_MIN) == (every, "")
    # the estimate itself needs about 21 pairs (42 s), more than 30 s; a mean one standard
    # error nearer a decision (stopping.LEAN), plausible after 6 pairs, needs 11 (22 s): go on
    record["budget_floor_s"] = 30.0
    assert next_step(record, OBJ, every, 12.0, paired_min=PAIRED_MIN) == (every, "")
    record["budget_floor_s"] = 20.0  # even that does not fit in 20 s: stop, and say why
    keys, why = next_step(record, OBJ, every, 12.0, paired_min=PAIRED_MIN)
    assert keys == [] and re.search(r"their spread needs about 11 pairs in all to decide, "
                                    r"more than the 20 s a short study's pairs may take", why)
    # pairs that swing far more than the configurations differ cannot decide: stop
    wild = _paired_record([3.0, 0.3, 2.0, 0.5, 1.5, 0.7])
    wild.update(status="running", budget_s=12.0, budget_floor_s=60.0)
    keys, why = next_step(wild, OBJ, every, 12.0, paired_min=PAIRED_MIN)
    assert keys == [] and "more than 30 pairs" in why
    # a budget above the floor (a long study) is the budget: the floor never raises it
    record.update(budget_s=100.0, budget_floor_s=60.0)
    keys, why = next_step(record, OBJ, every, 99.0, paired_min=PAIRED_MIN)
    assert keys == [] and why.startswith("budget:") and "spread" not in why
    # before PAIRED_MIN pairs the budget does not stop the pairs at all
    early = _paired_record([1.5, 0.9, 1.4])
    early.update(status="running", budget_s=1.0)
    assert next_step(early, OBJ, every, 6.0, paired_min=PAIRED_MIN) == (every, "")
