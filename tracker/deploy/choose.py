"""Which trial ``tracker promote`` registers, and why (tag ``tracker.chosen_by``).

- **By the verdict** (``verdict``): after a confirmation, the configuration it chose; a verdict
  that keeps the default (``equivalent``, ``inconclusive``; ``no_better`` in older records) is
  refused unless forced, and then the best estimate is taken (``verdict, forced``).
- **By the search** (``search``): without a confirmation, the feasible complete measured trial
  best on the first objective. With two objectives that is the point of the Pareto front best
  on the first one (the confirmation too ranks and decides on the first objective).
- **By hand** (``hand (--trial N)``): trial N, any feasible COMPLETE trial (another point of
  the front, the default's trial); a duplicate stands for the trial it repeats. A trial that
  is unknown, queued, running, failed, pruned or infeasible is refused, saying which.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

import optuna

from tracker.errors import DeployError
from tracker.metrics import fmt
from tracker.tracking.report import best_row
from tracker.trial_record import TrialRow
from tracker.verdict import record as confirmed
from tracker.verdict import stats as confirm_stats
from tracker.verdict import words

VERDICT, FORCED, SEARCH = "verdict", "verdict, forced", "search"


class BoundLike(Protocol):
    max: float | None
    min: float | None


@dataclass(frozen=True)
class Choice:
    """The trial to register, the study's verdict (None without a confirmation) and how the
    trial was chosen (the value of tag ``tracker.chosen_by``)."""

    row: TrialRow
    verdict: confirm_stats.Verdict | None
    chosen_by: str

    @property
    def by_hand(self) -> bool:
        return self.chosen_by.startswith("hand")


@dataclass(frozen=True)
class Ask:
    """What the user asked: ``trial`` (``--trial N``) or the study's choice, ``force``d past a
    verdict that keeps the default."""

    trial: int | None = None
    force: bool = False


def constraint_text(metrics: Mapping[str, float], constraints: Mapping[str, BoundLike]) -> str:
    """``perf_latency_p99 <= 50 ms (measured 3.21 ms)``; ``none`` without constraints."""
    parts = []
    for metric, bound in constraints.items():
        rule = " and ".join(
            f"{metric} {op} {fmt(metric, limit)}"
            for op, limit in ((">=", bound.min), ("<=", bound.max)) if limit is not None)
        got = metrics.get(metric)
        parts.append(rule + ("" if got is None else f" (measured {fmt(metric, got)})"))
    return "; ".join(parts) or "none"


def choose(study: optuna.Study, rows: list[TrialRow], objectives: Mapping[str, str],
           constraints: Mapping[str, BoundLike] | None, ask: Ask,
           log: Callable[[str], None]) -> Choice:
    """The trial to promote (module docstring); :class:`DeployError` when there is none."""
    verdict = confirmed.verdict(confirmed.load(study), objectives)
    if ask.trial is not None:
        row, label = hand_row(study, rows, ask.trial, constraints, log)
        return Choice(row, verdict, label)
    best = best_row(rows, objectives)
    how = SEARCH
    if verdict is not None:
        picked = _confirmed_row(study.study_name, rows, verdict, objectives, ask.force)
        if picked is not None:
            best, how = picked, (FORCED if verdict.keeps_default else VERDICT)
    if best is None:
        known = "" if constraints is None else f"; constraints: {constraint_text({}, constraints)}"
        raise DeployError(f"study {study.study_name!r} has no feasible complete trial to "
                          f"promote ({len(rows)} trials{known})")
    return Choice(best, verdict, how)


def hand_row(study: optuna.Study, rows: list[TrialRow], number: int,
             constraints: Mapping[str, BoundLike] | None,
             log: Callable[[str], None]) -> tuple[TrialRow, str]:
    """Trial ``number`` when it can be promoted (a duplicate: the trial it repeats, said in a
    line), with its ``tracker.chosen_by`` label; else :class:`DeployError` saying why not."""
    label = f"hand (--trial {number})"
    row = _row(study, rows, number)
    if row.duplicate_of is not None and row.state == "COMPLETE":
        origin = _row(study, rows, row.duplicate_of)
        log(f"trial {number} repeats trial {origin.number} (the same configuration, not "
            f"measured again): promoting trial {origin.number}")
        row, label = origin, f"hand (--trial {number}, a repeat of trial {origin.number})"
    _refuse_unless_promotable(study.study_name, row, constraints)
    return row, label


def _row(study: optuna.Study, rows: list[TrialRow], number: int) -> TrialRow:
    found = next((r for r in rows if r.number == number), None)
    if found is not None:
        return found
    queued = [t.number for t in study.get_trials(deepcopy=False)]
    if number in queued:
        raise DeployError(f"trial {number} of study {study.study_name!r} is queued and has not "
                          "run: only a feasible COMPLETE trial can be promoted")
    known = f"trials 0 to {max(queued)}" if queued else "no trials"
    raise DeployError(f"study {study.study_name!r} has no trial {number} (it has {known})")


def _refuse_unless_promotable(study_name: str, row: TrialRow,
                              constraints: Mapping[str, BoundLike] | None) -> None:
    """:class:`DeployError` naming why ``row`` cannot be promoted: its state, or the
    constraint it does not meet (with its measured value)."""
    why = {
        "RUNNING": "is still running",
        "PRUNED": "was pruned (stopped before its measurement finished)",
        "FAIL": f"failed ({_first_line(row.fail_reason)})",
    }.get(row.state)
    if why is None and not row.complete:
        why = f"is {row.state} without a result"
    elif why is None and not row.feasible:
        met = ("the study's constraints" if constraints is None
               else constraint_text(row.metrics, constraints))
        why = f"does not meet the constraints ({met})"
    if why is not None:
        raise DeployError(f"trial {row.number} of study {study_name!r} {why}: only a feasible "
                          "COMPLETE trial can be promoted")


def _first_line(reason: str | None) -> str:
    line = (reason or "no reason recorded").strip().splitlines()[0]
    return line if len(line) <= 200 else line[:197] + "..."


def _confirmed_row(study_name: str, rows: list[TrialRow], verdict: confirm_stats.Verdict,
                   objectives: Mapping[str, str], force: bool) -> TrialRow | None:
    """The confirmed choice; a verdict that keeps the default (equivalent, inconclusive, or
    no_better from an older record) is refused unless forced, saying which it is."""
    if verdict.keeps_default:
        if not force:
            word = ("equivalent" if verdict.verdict == confirm_stats.OLD_NO_BETTER
                    else verdict.verdict)
            why = ("the default configuration is as good within the tie margin"
                   if word == confirm_stats.EQUIVALENT else "the confirmation has not decided yet")
            raise DeployError(f"study {study_name!r}: the verdict is {word} ({why}): "
                              f"{words.sentence(verdict, objectives)} Nothing promoted "
                              "(--force promotes the best estimate anyway; --trial N "
                              "promotes trial N).")
        name = verdict.winner or verdict.chosen
    else:
        name = verdict.chosen
    return next((r for r in rows if r.name == name), None)
