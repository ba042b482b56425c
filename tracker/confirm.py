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
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracker import confirm_stats as cs
from tracker.errors import TrackerError
from tracker.measure.monitors import default_monitors
from tracker.measure.sweep import sweep
from tracker.search.objective import LevelChoice, pick_best_level
from tracker.tracking import confirmed
from tracker.tracking.report import TrialRow, fmt, trial_rows
from tracker.trial import Context, configs
from tracker.triton.repository import write_repository

if TYPE_CHECKING:
    from tracker.measure.types import Measurement


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


def measure_configuration(ctx: Context, params: dict[str, Any], *, baseline: bool,
                          level: float, label: str) -> Measured:
    """ADAPTER, to be replaced by the shared measure-one-configuration function (issue 11):
    serving choice (``ctx.serving``) -> repository -> apply on the server -> sweep at
    ``level`` -> level choice. The same steps as a trial's ``_measure``, without the MLflow
    and Optuna bookkeeping. Raises TrackerError when any step fails."""
    spec, server = ctx.spec, ctx.server
    cfg, _ = configs(ctx, params, baseline)
    for old in ctx.workdir.glob("confirm-*"):  # the server has moved on from it
        shutil.rmtree(old, ignore_errors=True)
    root = ctx.workdir / f"confirm-{label}"
    repo = write_repository(root, ctx.info, cfg, serving=ctx.serving, ort_threads=ctx.ort_threads)
    mark = len(server.log_text()) if server.strategy == "reload" else 0
    server.apply_trial(repo)
    monitors = default_monitors(server.endpoints.metrics, pids=server.pids)
    result = sweep(server.endpoints, repo.model_name, repo.served_config, spec.load,
                   spec.constraints, monitors, levels=[level])
    choice = pick_best_level(result.measurements, spec.constraints, spec.objectives)
    return Measured(choice, result.measurements, repo.served_config_path.read_text(),
                    server.log_text()[mark:])


def settings_of(ctx: Context, rounds: int | None = None, top_k: int | None = None) -> Settings:
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


def _instances(ctx: Context, row: TrialRow) -> int:
    try:
        cfg, _ = configs(ctx, row.params, row.baseline)
    except TrackerError:
        return 1
    return sum(max(g.count, 1) for g in cfg.instance_group) or 1


def _new_record(ctx: Context, chosen: list[TrialRow], s: Settings) -> dict[str, Any]:
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


def run(ctx: Context, s: Settings, *, again: bool = False,
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


def _measure_one(ctx: Context, row: TrialRow, round_no: int,
                 say: Callable[[str], None]) -> dict[str, Any]:
    metric = next(iter(ctx.spec.objectives))
    level = float(row.concurrency or 1)
    ctx.progress.measuring(row.number, f"confirmation round {round_no}")
    try:
        got = measure_configuration(ctx, row.params, baseline=row.baseline, level=level,
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


def after_search(ctx: Context) -> None:
    """The hook the tuning loop calls when the search has stopped (not interrupted)."""
    if not ctx.spec.confirm.enabled:
        return
    run(ctx, settings_of(ctx))


@dataclass(frozen=True)
class ConfirmResult:
    study_name: str
    parent_run_id: str
    verdict: str | None
    summary: str


def confirm_study(spec_path: str | Path, *, study_name: str | None = None,
                  storage: str | None = None, rounds: int | None = None,
                  top_k: int | None = None) -> ConfirmResult:
    """``tracker confirm``: run (or continue) the confirmation of an existing study on the
    spec's server, then rewrite the study's report with the verdict. A finished confirmation
    is replaced by a new one (the search is not run again)."""
    import contextlib
    import signal
    import tempfile

    import optuna
    from mlflow import MlflowClient

    from tracker.conclude import finish_study
    from tracker.progress import Progress
    from tracker.runner import (
        Interrupted,
        TuneOptions,
        apply_overrides,
        expand_env,
        received_signal,
        serving_for,
        shielded,
        signals,
        tracking_uri,
    )
    from tracker.search.storage import make_storage
    from tracker.search.study import default_storage
    from tracker.spec import ensure_model, load_spec
    from tracker.tracking import runs
    from tracker.tracking.scaleout import PARENT_RUN_ATTR
    from tracker.triton.model_config import model_info
    from tracker.triton.server.base import make_server

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    spec = apply_overrides(load_spec(spec_path), TuneOptions(study_name=study_name,
                                                             storage=storage))
    ensure_model(spec)
    info = model_info(spec.model)
    uri = tracking_uri(spec)
    url = expand_env(spec.search.storage or default_storage(uri))
    try:
        study = optuna.load_study(study_name=spec.study_name,
                                  storage=make_storage(url, heartbeat_interval=None))
    except KeyError as exc:
        raise TrackerError(f"no study named {spec.study_name!r} in {url}: run `tracker tune` "
                           "first") from exc
    parent_id = study.user_attrs.get(PARENT_RUN_ATTR)
    if not parent_id:
        raise TrackerError(f"study {spec.study_name!r} has no MLflow parent run (user "
                           f"attribute {PARENT_RUN_ATTR!r})")
    client = MlflowClient(tracking_uri=uri)
    prun = client.get_run(str(parent_id))
    parent = runs.StudyRun(client, str(parent_id), str(prun.info.experiment_id),
                           spec.study_name)
    server = make_server(spec.server)
    progress = Progress(spec.search.n_trials, spec.search.n_trials, bar=False)
    work = Path(tempfile.mkdtemp(prefix=f"{spec.study_name}-confirm-"))
    ctx = Context(spec, info, {}, study, parent, server, serving_for(spec, server), work,
                  progress, log_models=False)
    try:
        with signals():
            try:
                run(ctx, settings_of(ctx, rounds, top_k), again=True)
            except KeyboardInterrupt as exc:
                signum = received_signal()
                raise Interrupted(signum, f"interrupted by {signal.Signals(signum).name}; "
                                  "the measurements so far are kept: run the same command "
                                  "to continue") from exc
    finally:
        with shielded():
            with contextlib.suppress(Exception):
                server.stop()
            shutil.rmtree(work, ignore_errors=True)
            progress.close()
    result = finish_study(ctx, status="FINISHED", owner=False,
                          stop_reason=str(prun.data.tags.get("tracker.stop_reason", "")),
                          wall_s=float(prun.data.metrics.get("wall_s", 0.0)))
    verdict = confirmed.verdict(confirmed.load(study), dict(spec.objectives))
    return ConfirmResult(spec.study_name, parent.run_id,
                         verdict.verdict if verdict else None, result.summary)
