"""Does the study's verdict survive a re-run? The densenet_onnx study, N times end to end.

    python benchmarks/verdict_stability.py --runs 5 [--spec projects/densenet_onnx/study.yaml]

Each run is a fresh study (its own MLflow and Optuna sqlite stores in a temporary folder)
run by ``tracker tune`` as a user runs it, with a noisy neighbour that this script starts
before and stops after each run: a process burning CPU in irregular bursts (random bursts of
50-600 ms, idle gaps drawn so that it averages about 40% of one core). For each run it
records

- the confirmed verdict: the configuration the confirmation chose, its improvement over the
  default with the 95% interval, and the configurations tied with it;
- the single-measurement verdict (the rule before confirmation): the best trial by its search
  measurement against the default's search measurement.

Figures (the issue's definitions): *agreement* is the share of runs whose winner is the most
frequent winner or statistically tied with it (a single measurement has no ties); *spread* is
max - min of the runs' improvement estimates in percentage points; *coverage* is the share of
runs whose 95% interval holds the median of all runs' estimates (a single measurement's
"interval" is the point itself). A winner is named by its parameters, so runs compare even if
trial numbers differed; "default" when the verdict keeps the default. The last line is one
JSON object.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import optuna
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tracker.spec import ensure_model, load_spec  # noqa: E402
from tracker.tracking import confirmed  # noqa: E402
from tracker.tracking.report import best_row, improvement_pct, trial_rows  # noqa: E402

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


def _name(params: dict[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(params.items()))


def one_run(spec_path: Path, index: int, seed: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix=f"verdict-{index}-") as tmp:
        folder = Path(tmp)
        spec = yaml.safe_load(spec_path.read_text())
        base = spec_path.parent
        for key in ("path", "build"):
            if key in spec["model"]:
                spec["model"][key] = str((base / spec["model"][key]).resolve())
        spec.setdefault("search", {})["study_name"] = f"verdict-{index}"
        local = folder / "study.yaml"
        local.write_text(yaml.safe_dump(spec, sort_keys=False))
        env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{folder / 'mlflow.db'}",
               "PYTHONPATH": str(ROOT)}
        neighbour = subprocess.Popen([sys.executable, "-c", NEIGHBOUR, str(seed)])
        started = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-m", "tracker.cli", "tune", str(local),
                                 "--no-bar"], cwd=folder, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        try:
            out, err = proc.communicate(timeout=1800)
        finally:
            if proc.poll() is None:  # interrupted: let the study stop its server cleanly
                proc.send_signal(signal.SIGINT)
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
            neighbour.terminate()
            neighbour.wait(timeout=10)
        wall = time.monotonic() - started
        if proc.returncode != 0:
            raise SystemExit(f"run {index} failed ({proc.returncode}):\n{out[-3000:]}"
                             f"\n{err[-3000:]}")
        study = optuna.load_study(study_name=f"verdict-{index}",
                                  storage=f"sqlite:///{folder / 'optuna.db'}")
        said = next((line for line in out.splitlines() if "confirmed in" in line), "")
        return {"wall_s": wall, "summary": said, **_verdicts(
            study, spec.get("objectives") or {"perf_throughput": "maximize"})}


def _verdicts(study: optuna.Study, objectives: dict[str, str]) -> dict[str, Any]:
    rows = trial_rows(study)
    names = {r.name: ("default" if r.baseline else _name(r.params)) for r in rows}
    direction = next(iter(objectives.values()))
    best = best_row(rows, objectives)
    base = next(r for r in rows if r.baseline)
    single = improvement_pct((best.values or [0])[0], (base.values or [0])[0], direction) \
        if best is not None and base.values else None
    record = confirmed.load(study)
    v = confirmed.verdict(record, objectives) if record else None
    if v is None or record is None:
        raise SystemExit("the study has no confirmation (is confirm.enabled false?)")
    metric = next(iter(objectives))
    rounds = {names[confirmed.key(int(c["trial"]))]: confirmed.series(record, int(c["trial"]),
                                                                      metric)
              for c in record.get("candidates", [])}
    metrics = confirmed.parent_metrics(v, objectives)
    group = {names[k] for k in [v.chosen, *([v.winner] if v.winner else []), *v.tied]}
    if v.verdict == "no_better":
        group.add("default")
    return {"single_winner": names[best.name] if best else "none",
            "single_pct": single or 0.0,
            "verdict": v.verdict, "confirmed_winner": names[v.chosen], "tied_with": group,
            "confirmed_pct": metrics.get("improvement_pct", 0.0),
            "ci": (metrics.get("improvement_pct_ci_low", 0.0),
                   metrics.get("improvement_pct_ci_high", 0.0)),
            "rounds": v.rounds, "per_round": rounds}


def _agreement(winners: list[str], groups: list[set[str]]) -> tuple[float, str]:
    mode = collections.Counter(winners).most_common(1)[0][0]
    return sum(1 for w, g in zip(winners, groups, strict=True)
               if w == mode or mode in g) / len(winners), mode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--spec", type=Path, default=ROOT / "projects" / "densenet_onnx" /
                        "study.yaml")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    ensure_model(load_spec(args.spec))
    load_before = os.getloadavg()
    started = time.monotonic()
    rng = random.Random(args.seed)
    results = []
    for i in range(args.runs):
        r = one_run(args.spec.resolve(), i, rng.randrange(1 << 30))
        results.append(r)
        print(f"run {i}: {r['wall_s']:.0f} s  confirmed {r['verdict']} {r['confirmed_winner']} "
              f"{r['confirmed_pct']:+.1f}% ({r['ci'][0]:.1f} to {r['ci'][1]:.1f}), "
              f"{r['rounds']} rounds;  single {r['single_winner']} {r['single_pct']:+.1f}%\n"
              f"  {r['summary']}", flush=True)
        for name, got in r["per_round"].items():
            print(f"  {name:<58} " + " ".join("   -  " if x is None else f"{x:6.2f}"
                                                for x in got), flush=True)
    wall = time.monotonic() - started
    conf_agree, conf_mode = _agreement([r["confirmed_winner"] for r in results],
                                       [r["tied_with"] for r in results])
    single_agree, single_mode = _agreement([r["single_winner"] for r in results],
                                           [{r["single_winner"]} for r in results])
    conf_pcts = [r["confirmed_pct"] for r in results]
    single_pcts = [r["single_pct"] for r in results]
    conf_mid = statistics.median(conf_pcts)
    coverage = sum(1 for r in results if r["ci"][0] <= conf_mid <= r["ci"][1]) / len(results)
    single_mid = statistics.median(single_pcts)
    single_cov = sum(1 for p in single_pcts if p == single_mid) / len(results)
    print()
    print(f"{'run':>3}  {'verdict':<9} {'confirmed winner':<58} {'improvement (95% CI)':<24} "
          f"{'single-measurement winner':<58} single")
    for i, r in enumerate(results):
        ci = f"{r['confirmed_pct']:+.1f}% ({r['ci'][0]:.1f} to {r['ci'][1]:.1f})"
        print(f"{i:>3}  {r['verdict']:<9} {r['confirmed_winner']:<58} {ci:<24} "
              f"{r['single_winner']:<58} {r['single_pct']:+.1f}%")
    print(f"\nmost frequent winner: confirmed {conf_mode}; single {single_mode}")
    print(f"winner agreement: confirmed {conf_agree:.2f}, single {single_agree:.2f}")
    print(f"improvement spread: confirmed {max(conf_pcts) - min(conf_pcts):.1f} pp (median "
          f"{conf_mid:+.1f}%), single {max(single_pcts) - min(single_pcts):.1f} pp (median "
          f"{single_mid:+.1f}%)")
    print(f"interval coverage of the median estimate: confirmed {coverage:.2f}, "
          f"single {single_cov:.2f}")
    print(f"wall {wall:.0f} s (runs: median {statistics.median(r['wall_s'] for r in results):.0f}"
          f" s); load average before {load_before[0]:.2f}, after {os.getloadavg()[0]:.2f}")
    print(json.dumps({
        "runs": args.runs, "confirmed_winner_agreement": round(conf_agree, 3),
        "single_winner_agreement": round(single_agree, 3),
        "confirmed_improvement_spread_pp": round(max(conf_pcts) - min(conf_pcts), 2),
        "single_improvement_spread_pp": round(max(single_pcts) - min(single_pcts), 2),
        "ci_coverage": round(coverage, 3), "single_ci_coverage": round(single_cov, 3),
        "wall_s": round(wall, 1), "load_before": round(load_before[0], 2),
        "load_after": round(os.getloadavg()[0], 2)}))


if __name__ == "__main__":
    main()
