"""The confirmation's verdict in words (the study's sentence, the plots' headline), and as
MLflow metrics and tags (docs/tuning.md shows them)."""

from __future__ import annotations

import math
from collections.abc import Mapping

from tracker import tags
from tracker.metrics import BETTER, RELATIVE, fmt
from tracker.verdict import stats as confirm_stats
from tracker.verdict.record import (
    LATENCY,
    PAIRS_PER_ROUND,
    VERDICT_TAG,
    Record,
    candidates,
    trial_of,
)


def _num(x: float) -> str:
    return "unbounded" if math.isinf(x) else f"{x:.0f}"


def _pct(iv: confirm_stats.Interval) -> str:
    if not iv.bounded:
        return f"{_num(iv.low)} to {_num(iv.high)}%" if math.isfinite(iv.low) \
            else "interval still unbounded"
    if iv.low >= 0:
        return f"{iv.low:.0f}-{iv.high:.0f}%"
    return f"{iv.low:.0f} to {iv.high:.0f}%"


def _value(metric: str, iv: confirm_stats.Interval, *, inner: bool = False) -> str:
    """``30.90 infer/s (95% CI 30.2-31.5)``; ``inner``: for use inside parentheses."""
    digits = fmt(metric, iv.estimate)
    places = len(digits.split(" ")[0].partition(".")[2])  # the bounds as precise as the figure
    low = f"{iv.low:,.{places}f}"
    high = f"{iv.high:,.{places}f}" if math.isfinite(iv.high) else "unbounded"
    ci = f"95% CI {low}{'-' if iv.low >= 0 and math.isfinite(iv.high) else ' to '}{high}"
    return f"{digits}, {ci}" if inner else f"{digits} ({ci})"


def _names(keys: list[str]) -> str:
    return keys[0] if len(keys) == 1 else ", ".join(keys[:-1]) + " and " + keys[-1]


def unit(v: confirm_stats.Verdict) -> str:
    """``6 interleaved rounds``, or ``8 pairs side by side`` (the paired design)."""
    if v.design == "paired":
        return f"{v.rounds} pair{'s' if v.rounds != 1 else ''} side by side"
    return f"{v.rounds} interleaved round{'s' if v.rounds != 1 else ''}"


def study_summary(search_text: str, v: confirm_stats.Verdict, objectives: Mapping[str, str],
                  command: str | None = None) -> str:
    """The study's sentence once confirmed: the search's head ("In 21 measurements across 7
    configurations"), then the confirmation instead of the single-measurement claim."""
    head = search_text.split(", ", 1)[0]
    return f"{head}, {sentence(v, objectives, command)}"


def more_command(record: Record, v: confirm_stats.Verdict, objectives: Mapping[str, str],
                 spec: str = "SPEC") -> str:
    """``tracker confirm SPEC --rounds N``: the command that measures more of the same rounds,
    N about what would decide if the figures went on as they are (at least 3 more)."""
    metric, direction = next(iter(objectives.items()))
    done = len(record.get("rounds", []))
    need = confirm_stats.more_rounds(v, candidates(record, metric), direction,
                                     most=4 * max(done, 5))
    rounds = max(need or 2 * done, done + 3)
    if v.design == "paired":  # --rounds counts rounds, each PAIRS_PER_ROUND pairs
        rounds = -(-rounds // PAIRS_PER_ROUND)
    return f"tracker confirm {spec} --rounds {rounds}"


def sentence(v: confirm_stats.Verdict, objectives: Mapping[str, str],
             command: str | None = None) -> str:
    """The confirmation in words, with the intervals (docs/tuning.md). ``command``: what to run
    to measure more (said when the verdict is inconclusive)."""
    metric = next(iter(objectives))
    relative = metric in RELATIVE  # scored against each round's default (weighted_gain)
    base = next(s for s in v.scored.values() if s.baseline)
    base_text = fmt(metric, base.value.estimate) if base.value else "not measured"
    base_ci = _value(metric, base.value, inner=True) if base.value else base_text
    if relative:  # each round's figure is against that round's default: it has none itself
        base_text = base_ci = ("each pair compared with its own default block"
                               if v.design == "paired" else
                               "each round compared with the default measured in it")
    rounds = unit(v)
    win = v.scored.get(v.winner or "")
    best = ""
    if win is not None and win.improvement is not None:
        how = "better" if win.improvement.estimate >= 0 else "worse"
        best = (f"the best, {win.key}, is {abs(win.improvement.estimate):.0f}% {how} "
                f"({_pct(win.improvement)})"
                + (" on the models' weighted throughput" if relative else ""))
    if v.verdict in (confirm_stats.EQUIVALENT, confirm_stats.OLD_NO_BETTER):
        text = (f"confirmed in {rounds}: equivalent: no configuration beats the default "
                f"configuration ({base_ci}) by more than the {v.margin_pct:g}% tie margin"
                + (f"; {best}" if best else "")
                + ": keep the default; nothing is promoted unless forced.")
    elif v.verdict == confirm_stats.INCONCLUSIVE:
        why = (f"{best}, not yet told apart from the default configuration ({base_ci})"
               if best else "no configuration met the constraints in most of its rounds")
        what = "pairs" if v.design == "paired" else "rounds"
        more = f"; `{command}` measures more of the same {what}" if command else ""
        text = (f"inconclusive after {rounds}: {why}{more}; until then the default is kept "
                "and nothing is promoted unless forced.")
    else:
        chosen = v.scored[v.chosen]
        assert chosen.value is not None and chosen.improvement is not None
        gain = f"{chosen.improvement.estimate:.0f}% ({_pct(chosen.improvement)}) better than"
        text = (f"confirmed in {rounds}: {v.chosen} is {gain} the default configuration on "
                f"the models' weighted throughput (median weighted_gain {_gain(chosen.value)} "
                "against the default of each round)" if relative else
                f"confirmed in {rounds}: {v.chosen} gives {_value(metric, chosen.value)}, "
                f"{gain} the default configuration ({base_text})")
        others = [k for k in [v.winner or "", *v.tied] if k and k != v.chosen]
        if others:
            verb = "is" if len(others) == 1 else "are"
            text += f"; {_names(others)} {verb} statistically tied"
            if v.chosen != v.winner:
                text += (f" ({v.chosen} chosen as the cheaper: lower p99 latency, then steadier "
                         "readings, then fewer instances)")
        text += "."
    why = f" Measured {v.design_reason}." if v.design_reason and v.design != "paired" else ""
    return text + ("" if relative else swing_note(v)) + why + pair_note(v)


def pair_ratios(v: confirm_stats.Verdict) -> str:
    """The best's per-pair ratios to the default (``1.27, 1.63, ...``: above 1 it is better),
    or "" outside the paired design."""
    win = v.scored.get(v.winner or "")
    if v.design != "paired" or win is None or not win.ratios:
        return ""
    return ", ".join(f"{r:.2f}" for r in win.ratios)


def pair_note(v: confirm_stats.Verdict) -> str:
    """`` Per pair, trial-3 / default: 1.27, 1.63, ...`` (the paired design), or ""."""
    text = pair_ratios(v)
    return f" Per pair, {v.winner} / the default: {text}." if text else ""


def _gain(iv: confirm_stats.Interval) -> str:
    """The median of several models' rounds as a weighted gain (``+0.210``); the interval
    that decides is the improvement's, said beside it."""
    return f"{confirm_stats.gain_of_ratio(iv.estimate):+.3f}"


def headline(v: confirm_stats.Verdict) -> str:
    """The verdict in a few words, for the plots' titles."""
    if v.keeps_default:
        win = v.scored.get(v.winner or "")
        best = (f"; best {win.key} {win.improvement.estimate:+.0f}% ({_pct(win.improvement)})"
                if win is not None and win.improvement is not None else "")
        word = "equivalent" if v.verdict == confirm_stats.OLD_NO_BETTER else v.verdict
        return f"confirmed: {word} after {_count(v)}, default kept{best}"
    chosen = v.scored[v.chosen].improvement
    assert chosen is not None
    return (f"confirmed: {v.verdict}, {v.chosen} {chosen.estimate:+.0f}% "
            f"({_pct(chosen)}) in {_count(v)}")


def _count(v: confirm_stats.Verdict) -> str:
    return f"{v.rounds} {'pairs' if v.design == 'paired' else 'rounds'}"


def swing_note(v: confirm_stats.Verdict) -> str:
    """`` trial-0's readings swing far more than the others' (...)``, or ""."""
    got = confirm_stats.swinging(v.scored)
    if got is None:
        return ""
    key, cv, others = got
    s = v.scored[key]
    name = "the default configuration" if s.baseline else key
    worst = f"; worst round {s.worst:.3g}" if s.worst is not None else ""
    return (f" {name[0].upper()}{name[1:]}'s readings swing far more than the others' "
            f"(round-to-round CV {cv:.0f}% against at most {others:.0f}%{worst}): it is the "
            "one a busy machine moves most.")


def _ci(prefix: str, iv: confirm_stats.Interval | None) -> dict[str, float]:
    """The estimate and its bounds (an unbounded side is left out: MLflow wants numbers);
    ``confirm/weighted_gain`` back on the gain scale (:func:`series` keeps ratios)."""
    if iv is None:
        return {}
    if prefix.rsplit("/", 1)[-1] in RELATIVE:
        iv = confirm_stats.gain_interval(iv)
    out = {prefix: iv.estimate, f"{prefix}_ci_low": iv.low, f"{prefix}_ci_high": iv.high}
    return {k: v for k, v in out.items() if math.isfinite(v)}


def worst_name(metric: str) -> str:
    """``min`` for a metric to maximize (the worst round is the lowest), else ``max``."""
    return "max" if BETTER.get(metric) == "minimize" else "min"


def scored_metrics(s: confirm_stats.Scored, metric: str) -> dict[str, float]:
    """``confirm/<metric>`` with its interval, p99, CV and the improvement, for one run."""
    out = {**_ci(f"confirm/{metric}", s.value), **_ci(f"confirm/{LATENCY}", s.p99),
           f"confirm/{metric}_cv_pct": s.cv_pct,
           "confirm/rounds": float(s.value.n if s.value else 0)}
    if s.worst is not None:  # the worst round: lowest to maximize, highest to minimize
        out[f"confirm/{metric}_{worst_name(metric)}"] = (
            confirm_stats.gain_of_ratio(s.worst) if metric in RELATIVE else s.worst)
    if s.improvement is not None:
        out.update(_ci("confirm/improvement_pct", s.improvement))
    return out


def parent_metrics(v: confirm_stats.Verdict, objectives: Mapping[str, str]) -> dict[str, float]:
    """The parent run's figures: the chosen configuration's, and the improvement (with the best
    other's interval when the default is kept)."""
    metric = next(iter(objectives))
    chosen = v.scored[v.chosen]
    out = {**_ci(f"confirm/{metric}", chosen.value), "confirm/rounds": float(v.rounds)}
    if chosen.improvement is not None:
        out.update(_ci("improvement_pct", chosen.improvement))
    else:  # the default is kept; the best other shows how close it came
        win = v.scored.get(v.winner or "")
        if win is not None and win.improvement is not None:
            out.update(_ci("improvement_pct", win.improvement))
        else:
            out["improvement_pct"] = 0.0
    return out


def parent_tags(v: confirm_stats.Verdict) -> dict[str, object]:
    swing = confirm_stats.swinging(v.scored)
    return {VERDICT_TAG: v.verdict, tags.CONFIRMED_TRIAL: trial_of(v.chosen),
            tags.CONFIRM_DESIGN: v.design, tags.CONFIRM_DESIGN_REASON: v.design_reason,
            tags.CONFIRM_PAIR_RATIOS: pair_ratios(v),
            tags.CONFIRM_TIED: ", ".join(v.tied), tags.CONFIRM_SWINGS: swing[0] if swing else ""}

