"""Does the study's verdict decide, and is it right? The densenet_onnx study N times end to end,
a long reference measurement, and an A/A check.

    python benchmarks/verdict_stability.py --runs 5 [--aa 20] [--reference-rounds 12]
        [--modes light,heavy] [--designs paired,rounds]

Everything runs beside a noisy neighbour that this script starts before and stops after each
part: a process burning CPU in irregular bursts (random bursts of 50-600 ms, idle gaps drawn
so that it averages about 40% of one core). The *heavy* mode adds two processes that keep
both cores busy for the whole part. Each mode is run with each confirmation design (``paired``:
the best and the default side by side in one server; ``rounds``: one at a time), the runs and
the A/A check alike; the reference is measured once per mode, under that mode's neighbours
(what a configuration gains depends on the load: under the heavy mode the default loses more).

1. **Runs**: each a fresh densenet study (its own MLflow and Optuna sqlite stores in a
   temporary folder) run by ``tracker tune`` as a user runs it. For each: the confirmed
   outcome, the configuration chosen (or, when the default is kept, the best other), its
   improvement with the 95% interval, the rounds, the share of the study's wall time spent
   confirming, and what the single search measurement said.
2. **Reference**: once per benchmark run, after the runs, the comparisons they made measured
   again in ``--reference-rounds`` interleaved rounds, all of them in every round (no early
   stop: the round count is fixed, so the fixed-sample t-interval of the mean log-ratio is
   the right one): each run's chosen configuration at the concurrency its run judged it by,
   and the default at the concurrency its run's default was judged by (the confirmation
   compares each configuration at its own level, so the reference must too). A run's choice
   is *really better* when that interval lies above 0; its reference improvement is
   ``100 (exp(mean log-ratio) - 1)``, the figure the run's interval is about.
3. **A/A**: the quickstart model's default configuration confirmed ``--aa`` times against an
   identical copy of itself (one study: the default trial, and a copy of it added as a second
   trial), each a new confirmation of up to ``--aa-rounds`` rounds. ``better`` or ``tied``
   there is a false discovery.

Figures, per mode and design: *power* is the share of runs whose verdict is better or tied
with a chosen configuration the reference shows really better; *aa_false_better* the share of A/A
confirmations that say better or tied; *ci_coverage* the share of runs whose interval holds
the reference improvement of the configuration it is about; *confirm_wall_share* the median
share of a run's wall time spent confirming. A configuration is named by its parameters, so
runs compare even if trial numbers differ. The last line is one JSON object, its ``groups``
keyed ``<mode>/<design>``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import optuna
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tracker.confirm.command import confirm_session  # noqa: E402
from tracker.confirm.rounds import Settings, measure_one, run  # noqa: E402
from tracker.errors import TrackerError  # noqa: E402
from tracker.spec import ensure_model, load_spec  # noqa: E402
from tracker.tracking.report import best_row, improvement_pct  # noqa: E402
from tracker.trial_record import trial_rows  # noqa: E402
from tracker.verdict import record as confirmed  # noqa: E402
from tracker.verdict import stats as confirm_stats  # noqa: E402
from tracker.verdict.record import Record  # noqa: E402

NEIGHBOUR = r"""
import random, sys, time
rng = random.Random(int(sys.argv[1]))
while True:
    burst = rng.uniform(0.05, 0.6)
    end = time.monotonic() + burst
    while time.monotonic() < end:
        pass
    time.sleep(burst * 1.5 * rng.uniform(0.3, 1.7))   # mean idle 1.5 x burst: ~40% busy
"""
BUSY = "while True:\n    pass\n"
OBJ = {"perf_throughput": "maximize"}
MODES, DESIGNS = ("light", "heavy"), ("paired", "rounds")


@contextmanager
def neighbour(seed: int, mode: str = "light") -> Iterator[None]:
    """The bursty neighbour; ``heavy``: and two processes busy all the time."""
    procs = [subprocess.Popen([sys.executable, "-c", NEIGHBOUR, str(seed)])]
    if mode == "heavy":
        procs += [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(2)]
    try:
        yield
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=10)


def _name(params: dict[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(params.items())) or "default copy"


def _local_spec(spec_path: Path, folder: Path, name: str, **sections: Any) -> Path:
    spec = yaml.safe_load(spec_path.read_text())
    for key in ("path", "build"):
        if key in spec["model"]:
            spec["model"][key] = str((spec_path.parent / spec["model"][key]).resolve())
    spec.setdefault("search", {})["study_name"] = name
    for section, values in sections.items():
        spec.setdefault(section, {}).update(values)
    local = folder / f"{name}.yaml"
    local.write_text(yaml.safe_dump(spec, sort_keys=False))
    return local


def _env(folder: Path) -> dict[str, str]:
    return {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{folder / 'mlflow.db'}",
            "PYTHONPATH": str(ROOT)}


def _tracker(args: list[str], folder: Path) -> str:
    proc = subprocess.Popen([sys.executable, "-m", "tracker.cli", *args], cwd=folder,
                            env=_env(folder), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        out, err = proc.communicate(timeout=1800)
    finally:
        if proc.poll() is None:  # interrupted: let the study stop its server cleanly
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
    if proc.returncode != 0:
        raise SystemExit(f"tracker {' '.join(args)} failed ({proc.returncode}):\n"
                         f"{out[-3000:]}\n{err[-3000:]}")
    return out


def _study(folder: Path, name: str) -> optuna.Study:
    return optuna.load_study(study_name=name, storage=f"sqlite:///{folder / 'optuna.db'}")


def one_run(spec_path: Path, folder: Path, index: int, seed: int, mode: str = "light",
            design: str = "auto") -> dict[str, Any]:
    local = _local_spec(spec_path, folder, f"verdict-{index}", confirm={"design": design})
    started = time.monotonic()
    with neighbour(seed, mode):
        out = _tracker(["tune", str(local), "--no-bar"], folder)
    wall = time.monotonic() - started
    study = _study(folder, f"verdict-{index}")
    said = next((line for line in out.splitlines() if line.startswith("In ")
                 and ("interleaved round" in line or "side by side" in line)), "")
    record = confirmed.load(study)
    if record is None:
        raise SystemExit("the study has no confirmation (is confirm.enabled false?)")
    took = float(record.get("finished", 0.0)) - float(record["started"])
    return {"wall_s": wall, "confirm_s": took, "share": took / wall, "summary": said,
            "mode": mode, "design": str(record.get("design") or "rounds"),
            **_verdicts(study, record)}


def _verdicts(study: optuna.Study, record: Record) -> dict[str, Any]:
    rows = trial_rows(study)
    names = {r.name: ("default" if r.baseline else _name(r.params)) for r in rows}
    best = best_row(rows, OBJ)
    base = next(r for r in rows if r.baseline)
    single = improvement_pct((best.values or [0])[0], (base.values or [0])[0], "maximize") \
        if best is not None and base.values else None
    v = confirmed.verdict(record, OBJ)
    assert v is not None
    about = v.chosen if not v.keeps_default else (v.winner or v.chosen)
    imp = v.scored[about].improvement
    rounds = {names[confirmed.key(int(c["trial"]))]: confirmed.series(record, int(c["trial"]),
                                                                      "perf_throughput")
              for c in record.get("candidates", [])}
    levels = {confirmed.key(int(c["trial"])): float(c.get("concurrency") or 1)
              for c in record.get("candidates", [])}
    by_name = {r.name: r for r in rows}
    return {"single_winner": names[best.name] if best else "none", "single_pct": single or 0.0,
            "verdict": v.verdict, "about": names[about],
            "about_params": dict(by_name[about].params), "about_level": levels[about],
            "default_level": levels[base.name],
            "pct": imp.estimate if imp else 0.0,
            "ci": (imp.low, imp.high) if imp else (0.0, 0.0), "rounds": v.rounds,
            "per_round": rounds}


def reference(spec_path: Path, folder: Path, runs: list[dict[str, Any]], rounds: int,
              seed: int, mode: str = "light") -> dict[str, Any]:
    """The exact comparisons the runs made, measured again in ``rounds`` interleaved rounds,
    no early stop: every (configuration, concurrency) pair a run's verdict is about and the
    default at every concurrency a run's default was judged at, on run 0's study (its model
    and server). A run's reference improvement is then its chosen configuration at its level
    against the default at the default's level, as its own confirmation compared them."""
    local = _local_spec(spec_path, folder, "verdict-0")
    pairs: dict[str, tuple[dict[str, Any], bool, float]] = {}
    for r in runs:
        pairs[_pair("default", r["default_level"])] = ({}, True, r["default_level"])
        pairs[_pair(r["about"], r["about_level"])] = (r["about_params"], False,
                                                       r["about_level"])
    series: dict[str, list[float | None]] = {k: [] for k in pairs}
    started = time.monotonic()
    cwd = os.getcwd()
    os.chdir(folder)
    os.environ["MLFLOW_TRACKING_URI"] = _env(folder)["MLFLOW_TRACKING_URI"]
    rng = random.Random(seed)
    try:
        with neighbour(seed, mode), confirm_session(local) as (ctx, _):
            for rnd in range(rounds):
                order = sorted(pairs)
                rng.shuffle(order)
                for key in order:
                    params, baseline, level = pairs[key]
                    try:
                        got = measure_one(ctx, params, baseline=baseline, level=level,
                                          label=f"ref-{rnd}-{order.index(key)}")
                        series[key].append(got.choice.metrics.get("perf_throughput"))
                    except TrackerError:
                        series[key].append(None)
                print(f"  reference round {rnd + 1}/{rounds}: " + "  ".join(
                    f"{k} {series[k][-1] or 0:.1f}" for k in sorted(pairs)), flush=True)
    finally:
        os.chdir(cwd)
    out: dict[str, Any] = {"wall_s": time.monotonic() - started, "pairs": {}, "runs": []}
    for key, values in series.items():
        seen = [x for x in values if x is not None]
        out["pairs"][key] = {"cv": confirm_stats.cv_pct(seen),
                             "mean": statistics.fmean(seen or [0])}
    for r in runs:
        logs = confirm_stats.log_ratios(series[_pair(r["about"], r["about_level"])],
                                        series[_pair("default", r["default_level"])])
        mean, low, high = confirm_stats.mean_interval(logs)
        out["runs"].append({"pct": 100 * math.expm1(mean), "low": 100 * math.expm1(low),
                            "high": 100 * math.expm1(high), "n": len(logs),
                            "better": low > 0})
    return out


def _pair(name: str, level: float) -> str:
    return f"{name} @{level:g}"


def aa_check(spec_path: Path, folder: Path, n: int, rounds: int, seed: int,
             mode: str = "light", design: str = "rounds") -> list[str]:
    """The quickstart default confirmed ``n`` times against an identical copy of itself."""
    # no latency bound: at load the quickstart's p99 passes 50 ms, and an infeasible default
    # leaves nothing to confirm (each A/A then read "none")
    local = _local_spec(spec_path, folder, "aa", search={"n_trials": 1},
                        confirm={"enabled": False}, load={"window_ms": 500},
                        constraints={"perf_latency_p99": {"max": 600_000}})
    verdicts = []
    with neighbour(seed, mode):
        _tracker(["tune", str(local), "--no-bar"], folder)
        study = _study(folder, "aa")
        t0 = study.trials[0]
        attrs = {k: v for k, v in t0.user_attrs.items()
                 if k not in ("baseline", "mlflow_run_id", "exact_params")}
        study.add_trial(optuna.trial.create_trial(params={}, distributions={}, value=t0.value,
                                                  user_attrs={**attrs, "baseline": False}))
        cwd = os.getcwd()
        os.chdir(folder)
        os.environ["MLFLOW_TRACKING_URI"] = _env(folder)["MLFLOW_TRACKING_URI"]
        try:
            with confirm_session(local) as (ctx, _):
                for i in range(n):
                    got = run(ctx, Settings(top_k=1, rounds=rounds, min_rounds=3, seed=seed + i,
                                            design=design),
                              new=True, on_measured=lambda _line: None)
                    v = confirmed.verdict(got, OBJ)
                    verdicts.append(v.verdict if v else "none")
                    imp = v.scored[v.winner].improvement if v and v.winner else None
                    print(f"  A/A {mode}/{design} {i + 1:>2}: {verdicts[-1]:<12} "
                          f"{v.rounds if v else 0} {'pairs' if design == 'paired' else 'rounds'}"
                          + (f"  copy {imp.estimate:+.1f}% ({imp.low:.1f} to {imp.high:.1f})"
                             if imp else ""), flush=True)
        finally:
            os.chdir(cwd)
    return verdicts


def _ci(r: dict[str, Any]) -> str:
    return f"{r['pct']:+.1f}% ({r['ci'][0]:.1f} to {r['ci'][1]:.1f})"


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=5,
                        help="runs per mode and design (0: the A/A check alone)")
    parser.add_argument("--spec", type=Path, default=ROOT / "projects" / "densenet_onnx" /
                        "study.yaml")
    parser.add_argument("--aa-spec", type=Path, default=ROOT / "projects" / "quickstart" /
                        "study.yaml")
    parser.add_argument("--aa", type=int, default=20, help="A/A confirmations per group")
    parser.add_argument("--aa-rounds", type=int, default=5)
    parser.add_argument("--reference-rounds", type=int, default=12)
    parser.add_argument("--modes", default=",".join(MODES), help="light, heavy or both")
    parser.add_argument("--designs", default=",".join(DESIGNS), help="paired, rounds or both")
    parser.add_argument("--seed", type=int, default=1)
    return parser.parse_args()


def _print_run(key: str, i: int, r: dict[str, Any]) -> None:
    print(f"{key} run {i}: {r['wall_s']:.0f} s ({r['confirm_s']:.0f} s confirming)  "
          f"{r['verdict']} {r['about']} {_ci(r)}, {r['rounds']} {r['design']};  single "
          f"{r['single_winner']} {r['single_pct']:+.1f}%\n  {r['summary']}", flush=True)
    for name, got in r["per_round"].items():
        print(f"  {name:<58} " + " ".join("   -  " if x is None else f"{x:6.2f}"
                                          for x in got), flush=True)


def _figures(results: list[dict[str, Any]], refs: list[dict[str, Any]],
             aa: list[str]) -> dict[str, Any]:
    found = [r["verdict"] in (confirm_stats.BETTER, confirm_stats.TIED) and x["better"]
             for r, x in zip(results, refs, strict=True)]
    covered = [r["ci"][0] <= x["pct"] <= r["ci"][1] for r, x in zip(results, refs, strict=True)]
    false = sum(v in (confirm_stats.BETTER, confirm_stats.TIED) for v in aa)
    return {"power": round(sum(found) / len(found), 3) if found else None,
            "aa_false_better": round(false / max(len(aa), 1), 3), "aa_confirmations": len(aa),
            "ci_coverage": round(sum(covered) / len(covered), 3) if covered else None,
            "confirm_wall_share": round(statistics.median(r["share"] for r in results), 3)
            if results else None,
            "verdicts": [r["verdict"] for r in results], "rounds": [r["rounds"] for r in results],
            "designs_used": [r["design"] for r in results],
            "aa": {k: aa.count(k) for k in sorted(set(aa))}}


def main() -> None:
    args = _args()
    modes = [m for m in args.modes.split(",") if m]
    designs = [d for d in args.designs.split(",") if d]
    ensure_model(load_spec(args.spec))
    ensure_model(load_spec(args.aa_spec))
    load_before = os.getloadavg()
    started = time.monotonic()
    rng = random.Random(args.seed)
    groups = [f"{m}/{d}" for m in modes for d in designs]
    folders = {g: [Path(tempfile.mkdtemp(prefix=f"verdict-{g.replace('/', '-')}-{i}-"))
                   for i in range(args.runs)] for g in groups}
    aa_folders = {g: Path(tempfile.mkdtemp(prefix=f"verdict-aa-{g.replace('/', '-')}-"))
                  for g in groups}
    results: dict[str, list[dict[str, Any]]] = {g: [] for g in groups}
    aa: dict[str, list[str]] = {}
    refs: dict[str, dict[str, Any]] = {}
    try:
        for g in groups:
            mode, design = g.split("/")
            for i, folder in enumerate(folders[g]):
                results[g].append(one_run(args.spec.resolve(), folder, i,
                                          rng.randrange(1 << 30), mode, design))
                _print_run(g, i, results[g][-1])
        for mode in modes:
            mine = [g for g in groups if g.startswith(f"{mode}/")]
            if not any(results[g] for g in mine):  # --runs 0: the A/A check alone
                continue
            refs[mode] = reference(args.spec.resolve(), folders[mine[0]][0],
                                   [r for g in mine for r in results[g]],
                                   args.reference_rounds, rng.randrange(1 << 30), mode)
            print(f"\nreference, {mode}: {args.reference_rounds} interleaved rounds of the "
                  f"pairs the runs compared ({refs[mode]['wall_s']:.0f} s)")
            for key, got in sorted(refs[mode]["pairs"].items()):
                print(f"  {key:<62} mean {got['mean']:6.2f}  CV {got['cv']:.0f}%")
        for g in groups:
            mode, design = g.split("/")
            print(f"\nA/A {g}: the quickstart default against an identical copy of itself")
            aa[g] = aa_check(args.aa_spec.resolve(), aa_folders[g], args.aa, args.aa_rounds,
                             rng.randrange(1 << 30), mode, design)
    finally:
        for folder in [*(f for g in groups for f in folders[g]), *aa_folders.values()]:
            shutil.rmtree(folder, ignore_errors=True)
    wall = time.monotonic() - started
    per_mode = {mode: iter(refs[mode]["runs"] if mode in refs else []) for mode in modes}
    figures = {}
    for g in groups:
        theirs = [next(per_mode[g.split("/")[0]]) for _ in results[g]]
        figures[g] = _figures(results[g], theirs, aa[g])
        print(f"\n{g}:  {'verdict':<12} {'configuration':<56} {'improvement (95% CI)':<26} "
              f"{'rounds':>6} {'confirm':>8} {'reference':>10}")
        for i, (r, x) in enumerate(zip(results[g], theirs, strict=True)):
            about = f"{_pair(r['about'], r['about_level'])} vs @{r['default_level']:g}"
            print(f"{i:>3}  {r['verdict']:<12} {about:<56} {_ci(r):<26} {r['rounds']:>6} "
                  f"{r['share']:>7.0%} {x['pct']:>+9.1f}%  (reference {x['low']:+.1f} to "
                  f"{x['high']:+.1f}%, {'better' if x['better'] else 'not shown better'})")
        f = figures[g]
        share = ("no runs" if f["confirm_wall_share"] is None else
                 f"confirming a median {f['confirm_wall_share']:.0%} of a run's wall time")
        print(f"{g}: power {f['power']}; intervals holding the reference "
              f"{f['ci_coverage']}; A/A false better {f['aa_false_better']:.2f} of "
              f"{f['aa_confirmations']}; {share}")
    print(f"\nwall {wall:.0f} s; load average before {load_before[0]:.2f}, after "
          f"{os.getloadavg()[0]:.2f}")
    print(json.dumps({
        "runs": args.runs, "groups": figures, "reference_rounds": args.reference_rounds,
        "wall_s": round(wall, 1), "load_before": round(load_before[0], 2),
        "load_after": round(os.getloadavg()[0], 2)}))


if __name__ == "__main__":
    main()
