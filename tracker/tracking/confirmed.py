"""A study's confirmation as the report sees it: the stored rounds -> the verdict -> words,
MLflow metrics and tags.

The confirmation (tracker/confirm.py) keeps its rounds in the Optuna study's user attribute
``confirm`` (:data:`ATTR`), one measurement per configuration and round, so it can resume and
so the verdict can be rebuilt from the study alone. The record::

    {"status": "running" | "done", "rounds_target": 5, "min_rounds": 3, "top_k": 3,
     "seed": 42, "stop": "why it stopped",
     "candidates": [{"trial": 4, "baseline": false, "concurrency": 2, "instances": 2}, ...],
     "rounds": [{"order": [4, 0, 1], "results": {"4": {"perf_throughput": 30.9,
                 "perf_latency_p99": 80.1, "feasible": true}, "0": {"error": "..."}}}, ...]}

The statistics are :mod:`tracker.confirm_stats`.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tracker import confirm_stats as cs
from tracker import tags
from tracker.tracking.report import fmt

if TYPE_CHECKING:
    import optuna

ATTR = "confirm"
VERDICT_TAG = tags.VERDICT
RANK_TAG = tags.CONFIRM_RANK
LATENCY = "perf_latency_p99"


def load(study: optuna.Study) -> dict[str, Any] | None:
    record = study.user_attrs.get(ATTR)
    return record if isinstance(record, dict) else None


def key(trial: int) -> str:
    return f"trial-{trial}"


def series(record: Mapping[str, Any], trial: int, metric: str) -> list[float | None]:
    """One value per round (None: not measured, or failed, in that round)."""
    out: list[float | None] = []
    for rnd in record.get("rounds", []):
        got = rnd.get("results", {}).get(str(trial), {})
        value = got.get(metric)
        out.append(float(value) if isinstance(value, int | float) else None)
    return out


def candidates(record: Mapping[str, Any], metric: str) -> list[cs.Candidate]:
    out = []
    for c in record.get("candidates", []):
        n = int(c["trial"])
        feasible = sum(1 for rnd in record.get("rounds", [])
                       if rnd.get("results", {}).get(str(n), {}).get("feasible") is True)
        out.append(cs.Candidate(key(n), series(record, n, metric), series(record, n, LATENCY),
                                instances=int(c.get("instances") or 1),
                                baseline=bool(c.get("baseline")), feasible_rounds=feasible))
    return out


def verdict(record: Mapping[str, Any] | None,
            objectives: Mapping[str, str]) -> cs.Verdict | None:
    """The verdict of the stored rounds; None without a measured round of the default."""
    if not record or not record.get("rounds"):
        return None
    metric, direction = next(iter(objectives.items()))
    cands = candidates(record, metric)
    base = next((c for c in cands if c.baseline), None)
    if base is None or not any(v is not None for v in base.values):
        return None
    return cs.decide(cands, direction)


def trial_of(name: str) -> int:
    return int(name.rsplit("-", 1)[1])


def _pct(iv: cs.Interval) -> str:
    if iv.low >= 0:
        return f"{iv.low:.0f}-{iv.high:.0f}%"
    return f"{iv.low:.0f} to {iv.high:.0f}%"


def _value(metric: str, iv: cs.Interval, *, inner: bool = False) -> str:
    """``30.90 infer/s (95% CI 30.2-31.5)``; ``inner``: for use inside parentheses."""
    digits = fmt(metric, iv.estimate)
    low, high = fmt(metric, iv.low).split(" ")[0], fmt(metric, iv.high).split(" ")[0]
    ci = f"95% CI {low}{'-' if iv.low >= 0 else ' to '}{high}"
    return f"{digits}, {ci}" if inner else f"{digits} ({ci})"


def _names(keys: list[str]) -> str:
    return keys[0] if len(keys) == 1 else ", ".join(keys[:-1]) + " and " + keys[-1]


def study_summary(search_text: str, v: cs.Verdict, objectives: Mapping[str, str]) -> str:
    """The study's sentence once confirmed: the search's head ("In 21 measurements across 7
    configurations"), then the confirmation instead of the single-measurement claim."""
    head = search_text.split(", ", 1)[0]
    return f"{head}, {sentence(v, objectives)}"


def sentence(v: cs.Verdict, objectives: Mapping[str, str]) -> str:
    """The confirmation in words, with the intervals (docs/tuning.md)."""
    metric = next(iter(objectives))
    base = next(s for s in v.scored.values() if s.baseline)
    base_text = fmt(metric, base.value.estimate) if base.value else "not measured"
    head = f"confirmed in {v.rounds} interleaved round{'s' if v.rounds != 1 else ''}: "
    if v.verdict == "no_better":
        text = (head + "no configuration is measurably better than the default configuration ("
                + (_value(metric, base.value, inner=True) if base.value else base_text) + ")")
        win = v.scored.get(v.winner or "")
        if win is not None and win.improvement is not None:
            how = "better" if win.improvement.estimate >= 0 else "worse"
            text += (f"; the best, {win.key}, is {abs(win.improvement.estimate):.0f}% {how} "
                     f"({_pct(win.improvement)}), within the noise")
        return text + ": keep the default; nothing is promoted unless forced."
    chosen = v.scored[v.chosen]
    assert chosen.value is not None and chosen.improvement is not None
    text = (head + f"{v.chosen} gives {_value(metric, chosen.value)}, "
            f"{chosen.improvement.estimate:.0f}% ({_pct(chosen.improvement)}) better than the "
            f"default configuration ({base_text})")
    others = [k for k in [v.winner or "", *v.tied] if k and k != v.chosen]
    if others:
        verb = "is" if len(others) == 1 else "are"
        text += f"; {_names(others)} {verb} statistically tied"
        if v.chosen != v.winner:
            text += f" ({v.chosen} chosen as the cheaper: lower p99 latency, then fewer instances)"
    return text + "."


def _ci(prefix: str, iv: cs.Interval | None) -> dict[str, float]:
    if iv is None:
        return {}
    return {prefix: iv.estimate, f"{prefix}_ci_low": iv.low, f"{prefix}_ci_high": iv.high}


def scored_metrics(s: cs.Scored, metric: str) -> dict[str, float]:
    """``confirm/<metric>`` with its interval, p99, CV and the improvement, for one run."""
    out = {**_ci(f"confirm/{metric}", s.value), **_ci(f"confirm/{LATENCY}", s.p99),
           f"confirm/{metric}_cv_pct": s.cv_pct,
           "confirm/rounds": float(s.value.n if s.value else 0)}
    if s.improvement is not None:
        out.update(_ci("confirm/improvement_pct", s.improvement))
    return out


def parent_metrics(v: cs.Verdict, objectives: Mapping[str, str]) -> dict[str, float]:
    """The parent run's figures: the chosen configuration's, and the improvement (0 with its
    best-of-the-rest interval when the verdict is no_better)."""
    metric = next(iter(objectives))
    chosen = v.scored[v.chosen]
    out = {**_ci(f"confirm/{metric}", chosen.value), "confirm/rounds": float(v.rounds)}
    if chosen.improvement is not None:
        out.update(_ci("improvement_pct", chosen.improvement))
    else:  # no_better: the default is kept; the best other shows how close it came
        win = v.scored.get(v.winner or "")
        if win is not None and win.improvement is not None:
            out.update(_ci("improvement_pct", win.improvement))
        else:
            out["improvement_pct"] = 0.0
    return out


def parent_tags(v: cs.Verdict) -> dict[str, object]:
    return {VERDICT_TAG: v.verdict, tags.CONFIRMED_TRIAL: trial_of(v.chosen),
            tags.CONFIRM_TIED: ", ".join(v.tied)}


def rounds_csv(record: Mapping[str, Any], metric: str) -> str:
    """confirm.csv: one line per measurement (round, order in the round, trial, values)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["round", "position", "trial", metric, LATENCY, "feasible", "error"])
    for i, rnd in enumerate(record.get("rounds", []), start=1):
        for pos, n in enumerate(rnd.get("order", []), start=1):
            got = rnd.get("results", {}).get(str(n))
            if got is None:
                continue
            writer.writerow([i, pos, n, got.get(metric, ""), got.get(LATENCY, ""),
                             "" if "feasible" not in got else str(got["feasible"]).lower(),
                             got.get("error", "")])
    return out.getvalue()
