"""The confirmation's record: what it measured, kept in the Optuna study, and its verdict.

The confirmation (:mod:`tracker.confirm.rounds`) keeps its measurements in the Optuna study's
user attribute ``confirm`` (:data:`ATTR`), so it can resume and so the verdict can be rebuilt
from the study alone. The record is JSON (a user attribute); its shape is :class:`Record`::

    {"status": "running" | "done", "rounds_target": 10, "min_rounds": 3, "top_k": 3,
     "seed": 42, "tie_margin_pct": 5.0, "budget_s": null, "spent_s": 61.2,
     "stop": "why it stopped",
     "candidates": [{"trial": 4, "baseline": false, "concurrency": 2, "instances": 2}, ...],
     "rounds": [{"order": [4, 0, 1], "results": {"4": {"perf_throughput": 30.9,
                 "perf_latency_p99": 80.1, "feasible": true, "seconds": 4.9},
                 "0": {"error": "..."}}}, ...]}

A record written before the tie margin existed (no ``tie_margin_pct``) is read with the default
margin; its verdict is recomputed by today's rules, so an old ``no_better`` reads as
``equivalent`` or ``inconclusive``. The statistics are :mod:`tracker.verdict.stats`; the
verdict in words, MLflow metrics and tags :mod:`tracker.verdict.words`.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypedDict

from tracker import tags
from tracker.metrics import RELATIVE
from tracker.verdict import stats as confirm_stats

if TYPE_CHECKING:
    import optuna

ATTR = "confirm"
VERDICT_TAG = tags.VERDICT
RANK_TAG = tags.CONFIRM_RANK
LATENCY = "perf_latency_p99"
#: a score against the same round's default (weighted_gain): each entry's figures, under this
#: key of a reading, until the round's (pair's) default is in
JOINT = "models"
#: the paired design: pairs per round of ``confirm.rounds`` (a pair is two short blocks, a
#: round one full measurement of each configuration)
PAIRS_PER_ROUND = 3

#: one configuration measured once: the first objective's value under its metric name,
#: ``perf_latency_p99``, ``feasible``, ``concurrency``, ``seconds``; or ``error``
Reading = dict[str, Any]


class CandidateEntry(TypedDict, total=False):
    """One configuration the confirmation compares."""

    trial: int
    baseline: bool
    concurrency: float | None
    instances: int


class RoundEntry(TypedDict, total=False):
    """One round: the trials in the order they were measured, and their readings by trial
    number (a string: JSON keys)."""

    order: list[int]
    results: dict[str, Reading]


class Record(TypedDict, total=False):
    """The stored confirmation (the module doc shows one)."""

    status: str
    rounds_target: int
    min_rounds: int
    top_k: int
    seed: int
    tie_margin_pct: float
    budget_s: float | None
    spent_s: float
    stop: str
    started: float
    finished: float
    candidates: list[CandidateEntry]
    rounds: list[RoundEntry]            # the paired design: one pair each
    design: str                         # paired | rounds (absent: rounds)
    design_reason: str                  # why, in words
    window_ms: int                      # the paired design's block window
    budget_floor_s: float               # the paired design: time a short study may reach


def load(study: optuna.Study) -> Record | None:
    record = study.user_attrs.get(ATTR)
    return record if isinstance(record, dict) else None  # type: ignore[return-value]


def key(trial: int) -> str:
    return f"trial-{trial}"


def series(record: Record, trial: int, metric: str) -> list[float | None]:
    """One value per round (None: not measured, or failed, in that round); a score against
    the round's default (``weighted_gain``: :data:`tracker.metrics.RELATIVE`) as the ratio it
    stands for, the default's 1."""
    out: list[float | None] = []
    for rnd in record.get("rounds", []):
        got = rnd.get("results", {}).get(str(trial), {})
        value = got.get(metric)
        number = float(value) if isinstance(value, int | float) else None
        if number is not None and metric in RELATIVE:  # a gain on the ratio scale
            number = confirm_stats.ratio_of_gain(number)
        out.append(number)
    return out


def candidates(record: Record, metric: str) -> list[confirm_stats.Candidate]:
    out = []
    for c in record.get("candidates", []):
        n = int(c["trial"])
        feasible = sum(1 for rnd in record.get("rounds", [])
                       if rnd.get("results", {}).get(str(n), {}).get("feasible") is True)
        out.append(confirm_stats.Candidate(
            key(n), series(record, n, metric), series(record, n, LATENCY),
            instances=int(c.get("instances") or 1), baseline=bool(c.get("baseline")),
            feasible_rounds=feasible))
    return out


def margin(record: Record) -> float:
    value = record.get("tie_margin_pct")
    return float(value) if isinstance(value, int | float) else confirm_stats.TIE_MARGIN_PCT


def verdict(record: Record | None,
            objectives: Mapping[str, str]) -> confirm_stats.Verdict | None:
    """The verdict of the stored rounds; None without a measured round of the default."""
    if not record or not record.get("rounds"):
        return None
    metric, direction = next(iter(objectives.items()))
    cands = candidates(record, metric)
    base = next((c for c in cands if c.baseline), None)
    if base is None or not any(v is not None for v in base.values):
        return None
    got = confirm_stats.decide(cands, direction, margin(record))
    return replace(got, design=str(record.get("design") or got.design),
                   design_reason=str(record.get("design_reason") or ""))


def trial_of(name: str) -> int:
    return int(name.rsplit("-", 1)[1])


def rounds_csv(record: Record, metric: str) -> str:
    """confirm.csv: one line per measurement (round, order in the round, trial, values)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["round", "position", "trial", metric, LATENCY, "feasible", "seconds",
                     "error"])
    for i, rnd in enumerate(record.get("rounds", []), start=1):
        for pos, n in enumerate(rnd.get("order", []), start=1):
            got = rnd.get("results", {}).get(str(n))
            if got is None:
                continue
            writer.writerow([i, pos, n, got.get(metric, ""), got.get(LATENCY, ""),
                             "" if "feasible" not in got else str(got["feasible"]).lower(),
                             got.get("seconds", ""), got.get("error", "")])
    return out.getvalue()
