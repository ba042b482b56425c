"""The confirmation round after a search: the best few configurations and the default,
re-measured in interleaved rounds, so the verdict survives a re-run.

After the search (whatever stopped it, except an interruption) the ``confirm.top_k`` best
distinct feasible configurations and the default configuration are measured again, each at the
concurrency its trial was judged by, on the study's own server, in up to ``confirm.rounds``
rounds. Each round measures them in a new random order, so drift of the machine hits all of
them alike. From ``confirm.min_rounds`` on, the rounds stop as soon as the winner is separated
(its improvement interval above 0 and overlapping no other), and a configuration whose interval
lies wholly below the winner's is not measured again. The statistics and the verdict:
:mod:`tracker.confirm_stats`; the record kept in the study: :mod:`tracker.tracking.confirmed`.

Every measurement is saved in the study's user attribute ``confirm`` as soon as it is made:
an interrupted confirmation continues where it stopped (``tracker tune`` again, or ``tracker
confirm``).
"""

from __future__ import annotations

import random
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tracker import confirm_stats as cs
from tracker.errors import MeasurementError, TrackerError
from tracker.study.measured import ConfigFailed, measure_configuration
from tracker.study.session import StudyContext
from tracker.study.trial import configs
from tracker.tracking import confirmed
from tracker.tracking.report import TrialRow, fmt, trial_rows

if TYPE_CHECKING:
    from tracker.measure.types import Measurement
    from tracker.search.objective import LevelChoice


@dataclass(frozen=True)
class Settings:
    top_k: int
    rounds: int
    min_rounds: int
    seed: int


@dataclass(frozen=True)
class Measured:
    """One configuration measured at one level."""

    choice: LevelChoice
    measurements: list[Measurement]
    served_config: str
    server_log: str


def measure_one(ctx: StudyContext, params: dict[str, Any], *, baseline: bool, level: float,
                label: str) -> Measured:
    """One configuration at one level through the one measurement path a trial and ``tracker
    profile`` take (:func:`tracker.study.measured.measure_configuration`), on the study's server.
    Raises TrackerError (the pipeline's reason) when any step fails."""
    cfg, _ = configs(ctx, params, baseline)
    for old in ctx.workdir.glob("confirm-*"):  # the server has moved on from it
        shutil.rmtree(old, ignore_errors=True)
    try:
        done = measure_configuration(ctx.spec, ctx.configuration, ctx.server, cfg,
                                     ctx.workdir / f"confirm-{label}", serving=ctx.serving,
                                     levels=[level])
    except ConfigFailed as failed:
        raise MeasurementError(failed.reason) from failed.cause
    return Measured(done.choice, done.measurements, done.served_text, done.log)


def settings_of(ctx: StudyContext, rounds: int | None = None, top_k: int | None = None) -> Settings:
    c = ctx.spec.confirm
    r = rounds or c.rounds
    return Settings(top_k or c.top_k, r, min(c.min_rounds, r),
                    ctx.spec.search.seed if ctx.spec.search.seed is not None else 0)


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
        cfgs, _ = configs(ctx, row.params, row.baseline)
    except TrackerError:
        return 1
    return sum(sum(max(g.count, 1) for g in cfg.instance_group) or 1
               for cfg in cfgs.values())


def _new_record(ctx: StudyContext, chosen: list[TrialRow], s: Settings) -> dict[str, Any]:
    return {"status": "running", "rounds_target": s.rounds, "min_rounds": s.min_rounds,
            "top_k": s.top_k, "seed": s.seed, "stop": "", "started": time.time(),
            "candidates": [{"trial": r.number, "baseline": r.baseline,
                            "concurrency": r.concurrency, "instances": _instances(ctx, r)}
                           for r in chosen],
            "rounds": []}


def _same(record: dict[str, Any], chosen: list[TrialRow]) -> bool:
    return [int(c["trial"]) for c in record.get("candidates", [])] == [r.number for r in chosen]


def _complete(record: dict[str, Any], rnd: dict[str, Any]) -> bool:
    return all(str(n) in rnd["results"] for n in rnd["order"])


def run(ctx: StudyContext, s: Settings, *, again: bool = False,
        on_measured: Callable[[str], None] | None = None) -> dict[str, Any] | None:
    """Run (or continue) the study's confirmation; returns the record (None when there is
    nothing to confirm). ``again``: a finished confirmation is replaced by a new one (an
    unfinished one is always continued)."""
    study, objectives = ctx.study, dict(ctx.spec.objectives)
    say = on_measured or ctx.progress.line
    chosen = pick(trial_rows(study), objectives, s.top_k)
    if len(chosen) < 2:
        say("confirmation skipped: " + ("the default configuration has no result"
                                        if not chosen else "no feasible configuration besides "
                                        "the default to compare with it"))
        return None
    record = confirmed.load(study)
    if record is not None and _same(record, chosen) and record.get("status") == "done" \
            and not again:
        return record
    if record is None or not _same(record, chosen) or record.get("status") == "done":
        record = _new_record(ctx, chosen, s)
    record["rounds_target"] = s.rounds
    record["min_rounds"] = min(s.min_rounds, s.rounds)
    by_number = {r.number: r for r in chosen}
    say(f"confirmation: {', '.join(confirmed.key(r.number) for r in chosen)} (trial "
        f"{chosen[0].number} is the default) in up to {s.rounds} interleaved rounds")
    while True:
        rounds = record["rounds"]
        if not rounds or _complete(record, rounds[-1]):
            verdict = confirmed.verdict(record, objectives)
            if len(rounds) >= record["min_rounds"] and verdict is not None \
                    and cs.separated(verdict):
                record["stop"] = f"winner separated after {len(rounds)} rounds"
                break
            if len(rounds) >= record["rounds_target"]:
                record["stop"] = f"{len(rounds)} rounds done"
                break
            open_keys = (cs.still_open(verdict) if verdict is not None
                         and len(rounds) >= record["min_rounds"]
                         else [confirmed.key(n) for n in by_number])
            order = [n for n in by_number if confirmed.key(n) in open_keys]
            random.Random(record["seed"] * 1000 + len(rounds)).shuffle(order)
            rounds.append({"order": order, "results": {}})
            study.set_user_attr(confirmed.ATTR, record)
        rnd = rounds[-1]
        for n in rnd["order"]:
            if str(n) in rnd["results"]:
                continue
            rnd["results"][str(n)] = _measure_one(ctx, by_number[n], len(rounds), say)
            study.set_user_attr(confirmed.ATTR, record)
    record["status"] = "done"
    study.set_user_attr(confirmed.ATTR, record)
    return record


def _measure_one(ctx: StudyContext, row: TrialRow, round_no: int,
                 say: Callable[[str], None]) -> dict[str, Any]:
    metric = next(iter(ctx.spec.objectives))
    level = float(row.concurrency or 1)
    ctx.progress.measuring(row.number, f"confirmation round {round_no}")
    try:
        got = measure_one(ctx, row.params, baseline=row.baseline, level=level,
                                    label=f"{row.number}-r{round_no}")
    except TrackerError as err:
        say(f"confirm round {round_no}: {row.name} failed: {str(err).splitlines()[0][:200]}")
        return {"error": str(err)[:500]}
    m = got.choice.metrics
    say(f"confirm round {round_no}: {row.name:<9} concurrency {level:g}  "
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
