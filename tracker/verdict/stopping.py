"""When the confirmation stops: decided, the most rounds asked for, nothing left, or the budget.

Before each round (a pair, in the paired design) :func:`next_step` reads the stored record
(:mod:`tracker.verdict.record`) and says which configurations to measure in it, or why to stop.
The budget (``confirm.budget_s``; by default a third of the search's trials' time) stops the
rounds when another would not fit, with two exceptions for the paired design, whose pairs are
short:

- it never stops before :data:`PAIRED_MIN` pairs: fewer leave the anytime-valid interval too
  wide to decide anything (7.6 standard deviations of a pair's log-ratio after 3 pairs, 2.0
  after 6);
- with the default budget, a short study's confirmation may go on up to :data:`FLOOR_S` seconds
  of measuring, but only while the pairs' own spread says a decision is in reach within it,
  their mean taken :data:`LEAN` standard errors nearer a decision than its estimate
  (:func:`tracker.verdict.stats.more_rounds`): a 3-trial study of a fast model has a budget of a
  few seconds, a long study's third is above the floor and is never raised.

Pure: reads the record, measures nothing.
"""

from __future__ import annotations

from collections.abc import Mapping

from tracker.verdict import record as confirmed
from tracker.verdict import stats as confirm_stats
from tracker.verdict.record import Record

#: the paired design: the pairs no budget stops before
PAIRED_MIN = 6
#: the paired design with the default budget: the measuring time a confirmation may reach
#: when its pairs' spread says they decide within it (docs/confirmation.md, "Paired").
#: A tie (the best within a few percent of the default) is what needs it: the quickstart's
#: pairs of about 4 s, their log-ratio's spread 0.06-0.08, need 22-38 pairs to put the
#: interval inside the 5% margin; 60 s left three 3-trial runs undecided (6, 12, 10 pairs)
FLOOR_S = 120.0
#: the floor's test of "in reach": the pairs' mean may lie this many standard errors nearer a
#: decision than its estimate (after 7 pairs of a tie the estimate is still uncertain by
#: about a third of a pair's spread, enough to read "+1%" where the truth is "-6%")
LEAN = 1.0


def next_step(record: Record, objectives: Mapping[str, str], every: list[str],
              spent: float, paired_min: int = 0) -> tuple[list[str], str]:
    """Before a new round: (the keys to measure in it, why to stop instead: "" to go on).
    ``paired_min``: pairs the budget never stops before; ``record["budget_floor_s"]``: the
    measuring time a paired confirmation may reach while its spread says it will decide."""
    n = len(record["rounds"])
    rounds = "pairs" if record.get("design") == "paired" else "rounds"
    verdict = confirmed.verdict(record, objectives)
    past_min = n >= record["min_rounds"]
    if past_min and verdict is not None and verdict.decided:
        return [], f"decided ({verdict.verdict}) after {n} {rounds}"
    if n >= record["rounds_target"]:
        return [], f"{n} {rounds} done (the most asked for) without a decision"
    keys = confirm_stats.still_open(verdict) if verdict is not None and past_min else every
    if past_min and len(keys) < 2:
        return [], f"nothing left to measure after {n} {rounds}"
    budget = record.get("budget_s")
    cost = mean_seconds(record) * len(keys)
    if budget is None or spent <= 0 or spent + cost <= float(budget) or n < paired_min:
        return keys, ""
    why = (f"budget: another {rounds[:-1]} (about {cost:.0f} s) would not fit in "
           f"confirm.budget_s={float(budget):g} s after {n} {rounds}")
    floor = float(record.get("budget_floor_s") or 0.0)
    if floor <= float(budget) or verdict is None:
        return [], why
    need = confirm_stats.more_rounds(verdict, confirmed.candidates(record, next(iter(
        objectives))), next(iter(objectives.values())), most=record["rounds_target"],
        lean=LEAN)
    if need is not None and spent + (need - n) * cost <= floor:
        return keys, ""
    reach = (f"about {need} {rounds} in all" if need is not None
             else f"more than {record['rounds_target']} {rounds}")
    return [], (f"{why}; their spread needs {reach} to decide, more than the {floor:g} s a "
                f"short study's {rounds} may take")


def mean_seconds(record: Record) -> float:
    """The mean time of one measurement (a block, in the paired design) so far."""
    took = [float(got["seconds"]) for rnd in record.get("rounds", [])
            for got in rnd.get("results", {}).values() if "seconds" in got]
    return sum(took) / len(took) if took else 0.0
