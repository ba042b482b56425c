"""The confirmation round after a search: the best few configurations and the default,
re-measured in interleaved rounds until the evidence decides.

After the search (whatever stopped it, except an interruption) the ``confirm.top_k`` best
distinct feasible configurations and the default configuration are measured again, each at the
concurrency its trial was judged by, on the study's own server. Each round measures them in a
new random order, so drift of the machine hits all of them alike. After every round from
``confirm.min_rounds`` on the verdict is computed (:mod:`tracker.verdict.stats`, intervals that
stay valid however often they are looked at): the rounds stop as soon as it is decided
(better, tied or equivalent), when ``confirm.rounds`` rounds are done or when another round
would not fit in ``confirm.budget_s`` (default: as long as the search's trials took)
(inconclusive). A configuration that can no longer change the outcome is not measured again.
The record kept in the study: :mod:`tracker.verdict.record`.

Every measurement is saved in the study's user attribute ``confirm`` as soon as it is made:
an interrupted confirmation continues where it stopped (``tracker tune`` again, or ``tracker
confirm``), and ``tracker confirm SPEC --rounds N`` continues a finished one with the same
configurations up to N rounds (``--new`` starts over).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from tracker.candidate import entries as joint
from tracker.candidate.measurement import ConfigFailed, Procedure, measure
from tracker.candidate.values import candidate, configs
from tracker.confirm import paired
from tracker.errors import MeasurementError, TrackerError
from tracker.invocation.session import StudyContext
from tracker.metrics import CAPACITY, RELATIVE, fmt
from tracker.outputs.standalone import study_check
from tracker.search.objective import DERIVED
from tracker.trial_record import TrialRow, trial_rows
from tracker.verdict import record as confirmed
from tracker.verdict import stats as confirm_stats
from tracker.verdict import stopping
from tracker.verdict.record import JOINT, PAIRS_PER_ROUND, Reading, Record, RoundEntry

if TYPE_CHECKING:
    from tracker.measure.types import Measurement
    from tracker.search.objective import LevelChoice


#: the default budget: the confirmation's share of the study's measuring time (search + it)
SHARE = 0.25
#: windows per confirmation measurement: the three the stability rule compares, no retries
#: (the rounds, not the retries, are what the verdict's intervals stand on)
WINDOWS = 3


@dataclass(frozen=True)
class Settings:
    top_k: int
    rounds: int
    min_rounds: int
    seed: int
    margin_pct: float = confirm_stats.TIE_MARGIN_PCT
    budget_s: float | None = None      # measuring time of one invocation; None: no limit
    design: str = paired.AUTO          # auto | paired | rounds (paired.choose)
    floor_s: float = 0.0               # the default budget's floor for pairs (stopping.py)


@dataclass(frozen=True)
class Measured:
    """One configuration measured at one level."""

    choice: LevelChoice
    measurements: list[Measurement]
    served_config: str
    server_log: str


def measure_one(ctx: StudyContext, params: dict[str, Any], *, baseline: bool, level: float,
                label: str, model_levels: Mapping[str, float] | None = None) -> Measured:
    """One configuration at one level through the one measurement path a trial and ``tracker
    profile`` take (:func:`tracker.candidate.measurement.measure`), on the study's server, in
    at most :data:`WINDOWS` windows (several entry models: each at its own ``model_levels``),
    its outputs checked first. Raises TrackerError (the pipeline's reason) when a step fails."""
    what = candidate(ctx.bench, params, baseline)
    for old in ctx.workdir.glob("confirm-*"):  # the server has moved on from it
        shutil.rmtree(old, ignore_errors=True)
    spec = ctx.spec.model_copy(update={"load": ctx.spec.load.model_copy(
        update={"max_tries": min(ctx.spec.load.max_tries, WINDOWS)})})
    how = Procedure(levels=[level], model_levels={k: [v] for k, v in (model_levels or {}).items()}
                    or None, check=study_check(ctx.spec, ctx.study, ctx.parent.client))
    try:
        done = measure(replace(ctx.bench, spec=spec), what, how,
                       ctx.workdir / f"confirm-{label}")
    except ConfigFailed as failed:
        raise MeasurementError(failed.reason) from failed.cause
    return Measured(done.choice, done.measurements, done.served_text, done.log)


def settings_of(ctx: StudyContext, rounds: int | None = None, top_k: int | None = None) -> Settings:
    c = ctx.spec.confirm
    r = rounds or c.rounds
    searched = search_seconds(ctx.study)
    budget = c.budget_s if c.budget_s is not None else (
        None if searched is None else round(searched * SHARE / (1 - SHARE), 1))
    return Settings(top_k or c.top_k, r, min(c.min_rounds, r),
                    ctx.spec.search.seed if ctx.spec.search.seed is not None else 0,
                    c.tie_margin_pct, budget, c.design,
                    stopping.FLOOR_S if c.budget_s is None else 0.0)


def search_seconds(study: Any) -> float | None:
    """How long the search's finished trials took, together (the default budget: the
    confirmation takes at most as long as the search did); None without a finished trial."""
    took = [(t.datetime_complete - t.datetime_start).total_seconds()
            for t in study.get_trials(deepcopy=False)
            if t.datetime_start is not None and t.datetime_complete is not None]
    return round(sum(took), 1) if took else None


def pick(rows: list[TrialRow], objectives: Mapping[str, str], top_k: int) -> list[TrialRow]:
    """The default configuration's trial, then the ``top_k`` best distinct feasible measured
    trials by their search measurement (empty when the default has no result)."""
    base = next((r for r in rows if r.baseline and r.complete and r.measurements > 0), None)
    if base is None:
        return []
    sign = -1.0 if next(iter(objectives.values())) == "maximize" else 1.0
    done = [r for r in rows if r.complete and r.feasible and not r.baseline
            and r.duplicate_of is None and r.measurements > 0]
    done.sort(key=lambda r: (sign * (r.values or [0.0])[0], r.number))
    return [base, *done[:top_k]]


def _instances(ctx: StudyContext, row: TrialRow) -> int:
    try:
        cfgs, _ = configs(ctx.bench, row.params, row.baseline)
    except TrackerError:
        return 1
    return sum(sum(max(g.count, 1) for g in cfg.instance_group) or 1
               for cfg in cfgs.values())


def _new_record(ctx: StudyContext, chosen: list[TrialRow], s: Settings) -> Record:
    return {"status": "running", "rounds_target": s.rounds, "min_rounds": s.min_rounds,
            "top_k": s.top_k, "seed": s.seed, "tie_margin_pct": s.margin_pct,
            "budget_s": s.budget_s, "stop": "", "started": time.time(),
            "candidates": [{"trial": r.number, "baseline": r.baseline,
                            "concurrency": r.concurrency, "instances": _instances(ctx, r)}
                           for r in chosen],
            "rounds": []}


def _same(record: Record, chosen: list[TrialRow], design: str = paired.ROUNDS) -> bool:
    return (record.get("design", paired.ROUNDS) == design
            and [int(c["trial"]) for c in record.get("candidates", [])]
            == [r.number for r in chosen])


def _complete(rnd: RoundEntry) -> bool:
    return all(str(n) in rnd["results"] for n in rnd["order"])


def run(ctx: StudyContext, s: Settings, *, again: bool = False, new: bool = False,
        on_measured: Callable[[str], None] | None = None) -> Record | None:
    """Run (or continue) the study's confirmation; returns the record (None when there is
    nothing to confirm). An unfinished confirmation is always continued. A finished one of the
    same configurations is returned as it is, unless ``again`` (then it continues up to
    ``s.rounds`` rounds) or ``new`` (then a new one replaces it)."""
    study = ctx.study
    say = on_measured or ctx.progress.line
    chosen = pick(trial_rows(study), dict(ctx.spec.objectives), s.top_k)
    if len(chosen) < 2:
        say("confirmation skipped: " + ("the default configuration has no result"
                                        if not chosen else "no feasible configuration besides "
                                        "the default to compare with it"))
        return None
    design = paired.choose(ctx, chosen, s.design)
    record = confirmed.load(study)
    if design.paired and s.design == paired.AUTO and not new and record is not None \
            and _same(record, chosen):  # recorded in rounds (before pairs existed): go on so
        design = paired.Design(paired.ROUNDS, paired.RECORDED)
    if design.paired:
        chosen = chosen[:2]
    same = record is not None and _same(record, chosen, design.name)
    if record is not None and same and record.get("status") == "done" and not (again or new):
        return record
    pairs = _pairs(ctx, chosen) if design.paired else None
    if isinstance(pairs, str):  # the copies did not load together: rounds after all
        design, pairs = paired.Design(paired.ROUNDS, pairs), None
        chosen = pick(trial_rows(study), dict(ctx.spec.objectives), s.top_k)
        same = record is not None and _same(record, chosen, design.name)
    if record is None or not same or new:
        record = _new_record(ctx, chosen, s)
    record["status"], record["stop"], record["design"] = "running", "", design.name
    record["design_reason"] = design.reason
    target = s.rounds * (PAIRS_PER_ROUND if pairs else 1)
    record["rounds_target"], record["min_rounds"] = target, min(s.min_rounds, target)
    record["tie_margin_pct"], record["budget_s"] = s.margin_pct, s.budget_s
    record["budget_floor_s"] = s.floor_s if pairs is not None else 0.0
    if pairs is not None:
        record["window_ms"] = pairs.window
    budget = "" if s.budget_s is None else f", at most {s.budget_s:g} s of measuring"
    if pairs is not None and s.budget_s is not None and s.floor_s > s.budget_s:
        budget += f" (up to {s.floor_s:g} s while the pairs' spread says they will decide)"
    unit = "pairs" if pairs else "interleaved rounds"
    say(f"confirmation: {', '.join(confirmed.key(r.number) for r in chosen)} (trial "
        f"{chosen[0].number} is the default), {design.reason}; in {unit} until decided (up "
        f"to {target} {unit.split()[-1]}{budget})")
    _loop(ctx, record, {r.number: r for r in chosen}, pairs, say)
    record["status"] = "done"
    record["finished"] = time.time()
    study.set_user_attr(confirmed.ATTR, record)
    say(f"confirmation stopped: {record['stop']}")
    return record


def _pairs(ctx: StudyContext, chosen: list[TrialRow]) -> paired.Pairs | str:
    """The two copies served side by side, or why they could not be."""
    conf = ctx.configuration
    pairs = paired.Pairs(ctx, {r.number: r for r in chosen}, paired.window_ms(
        [r.metrics.get(conf.metric_name(e, "perf_throughput")) for r in chosen
         for e in conf.entries], ctx.spec.load.window_ms))
    try:
        pairs.setup(ctx.workdir / "confirm-paired")
    except TrackerError as err:
        return f"in rounds, not paired: the two copies did not load together ({err})"
    return pairs


def _loop(ctx: StudyContext, record: Record, by_number: dict[int, TrialRow],
          pairs: paired.Pairs | None, say: Callable[[str], None]) -> None:
    """Rounds (or pairs) until :func:`_next` says stop; every reading saved as it comes."""
    study, objectives = ctx.study, dict(ctx.spec.objectives)
    spent = 0.0
    relative = next(iter(objectives)) in RELATIVE
    base = next(iter(by_number))
    while True:
        rounds = record["rounds"]
        if not rounds or _complete(rounds[-1]):
            open_keys, stop = stopping.next_step(
                record, objectives, [confirmed.key(n) for n in by_number], spent,
                paired_min=stopping.PAIRED_MIN if pairs else 0)
            if stop:
                record["stop"] = stop
                return
            order = paired.order_of(record["seed"], len(rounds),
                                    [n for n in by_number if confirmed.key(n) in open_keys])
            rounds.append({"order": order, "results": {}})
            study.set_user_attr(confirmed.ATTR, record)
        rnd = rounds[-1]
        todo = [n for n in rnd["order"] if str(n) not in rnd["results"]]
        if pairs is not None:
            got_pair = pairs.pair(rnd["order"], say, f"pair {len(rounds)}", len(rounds) - 1)
            spent += sum(float(g.get("seconds") or 0.0) for g in got_pair.values())
            rnd["results"].update(got_pair)
            if relative:
                _pair_round(ctx, rnd, base)
            say(paired.pair_line(rnd, base, len(rounds), next(iter(ctx.spec.objectives))))
            todo = []
        for n in todo:
            t0 = time.monotonic()
            got = _measure_one(ctx, by_number[n], len(rounds), say)
            got["seconds"] = round(time.monotonic() - t0, 2)
            spent += got["seconds"]
            rnd["results"][str(n)] = got
            if relative:
                _pair_round(ctx, rnd, base)
            study.set_user_attr(confirmed.ATTR, record)
        record["spent_s"] = round(sum(float(g.get("seconds") or 0.0) for r in rounds
                                      for g in r["results"].values()), 2)
        study.set_user_attr(confirmed.ATTR, record)


def _pair_round(ctx: StudyContext, rnd: RoundEntry, base: int) -> None:
    """A score against the default (weighted_gain): each measured configuration's against the
    default measured in the same round (the default's own: 0), once both are in."""
    metric = next(iter(ctx.spec.objectives))
    results = rnd["results"]
    ref = results.get(str(base), {}).get(JOINT)
    if not isinstance(ref, dict):
        return
    how = joint.scoring(ctx.spec, ctx.configuration, ref)
    for n, got in results.items():
        if not isinstance(got.get(JOINT), dict) or got.get(metric) is not None:
            continue
        try:
            got[metric] = 0.0 if n == str(base) else DERIVED[metric](got[JOINT], ref, how)
        except MeasurementError as err:  # a model without its figure: no pair this round
            got["error"] = str(err)[:500]


def _measure_one(ctx: StudyContext, row: TrialRow, round_no: int,
                 say: Callable[[str], None]) -> Reading:
    metric, conf = next(iter(ctx.spec.objectives)), ctx.configuration
    level = float(row.concurrency or 1)  # the fallback; each entry is at its own below
    levels = {e: float(row.metrics.get(conf.metric_name(e, "concurrency")) or 1)
              for e in conf.entries}
    ctx.progress.measuring(row.number, f"confirmation round {round_no}")
    try:
        got = measure_one(ctx, row.params, baseline=row.baseline, level=level,
                          label=f"{row.number}-r{round_no}", model_levels=levels)
    except TrackerError as err:
        say(f"confirm round {round_no}: {row.name} failed: {str(err).splitlines()[0][:200]}")
        return {"error": str(err)[:500]}
    m = got.choice.metrics
    if metric in RELATIVE:  # its score comes once the round's default is measured
        each = "; ".join(
            f"{e} {fmt('perf_throughput', m.get(conf.metric_name(e, 'perf_throughput'), 0.0))}"
            for e in conf.entries)
        say(f"confirm round {round_no}: {row.name:<9} {each}"
            f"{'' if got.choice.feasible else '  violates the constraints'}")
        return {metric: None, "feasible": got.choice.feasible,
                JOINT: {k: v for k, v in m.items() if k not in RELATIVE}}
    at = "" if metric == CAPACITY else f"concurrency {level:g}  "  # a capacity: its search
    say(f"confirm round {round_no}: {row.name:<9} {at}"
        f"{fmt(metric, m.get(metric, 0.0))}  "
        f"p99 {fmt(confirmed.LATENCY, m.get(confirmed.LATENCY, 0.0))}"
        f"{'' if got.choice.feasible else '  violates the constraints'}")
    return {metric: m.get(metric), confirmed.LATENCY: m.get(confirmed.LATENCY),
            "feasible": got.choice.feasible, "concurrency": got.choice.concurrency}


def after_search(ctx: StudyContext) -> None:
    """The hook the tuning loop calls when the search has stopped (not interrupted)."""
    if not ctx.spec.confirm.enabled:
        return
    run(ctx, settings_of(ctx))
