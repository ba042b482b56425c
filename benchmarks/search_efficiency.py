"""How many measurements each search needs to find a near-best configuration, side by side
with Model Analyzer's own search algorithms, on a landscape of Model Analyzer's default space.

    .venv/bin/python benchmarks/search_efficiency.py                # replay, all searches
    .venv/bin/python benchmarks/search_efficiency.py --ablations    # + each part of ours off
    .venv/bin/python benchmarks/search_efficiency.py --warm         # warm starts (re-tuning)

The landscape (benchmarks/data/ma_landscape_quickstart.csv, made by
benchmarks/record_ma_landscape.py) holds every point of instance_group.count 1-5 x
max_batch_size 1..128 x concurrency 1..1024 (powers of two), dynamic batching on, for the
quickstart model: 440 points. A measurement is one configuration at one concurrency level,
the unit both tools pay for; a point asked again is free. Feasible: p99 <= --p99-max ms (60 by
default: it binds from concurrency 32-64 up, of 1..1024).

Searches, 20 seeds each:
- ours: the tuner's TPE (tracker.search.optuna_study.make_sampler), the default config first, each
  trial's sweep planned by tracker.search.sweep_plan (``search.sweep: guided``: the first
  level is the best feasible trial's, Model Analyzer's concurrency formula before there is
  one, then a walk); ``--ablations`` adds ours with one part changed (ordered integers
  instead of categories, the sweep from the lowest level, every sweep from the formula,
  Optuna pruning across trials, other start-up counts);
- ma_quick / ma_optuna: Model Analyzer's own generators (``triton-model-analyzer`` from PyPI,
  installed on first use into benchmarks/.ma-venv, since it pins optuna 3.6.1), driven by
  benchmarks/ma_driver.py and answered from the landscape; quick search is deterministic, so
  its 20 seeds agree;
- random: points drawn uniformly; brute: every point in Model Analyzer's brute-force order.

Printed: per search, the median measurements (and share of the 440) and median measurement
seconds until the best feasible throughput found reaches 95% / 98% of the landscape's best
(a run that never gets there counts as the whole space), with min-max, and how many seeds got
there; and where each search ended (it stops at 98%, or when its own rules stop it, as Model
Analyzer's do): median measurements made and best feasible throughput found, as a share of the
landscape's best. Last line: one JSON object.

``--warm``: re-tuning a changed model (``search.warm_start``, tracker/search/warm_start.py) on
the landscape of the quickstart model retrained with a hidden layer of 128
(benchmarks/data/ma_landscape_retune.csv, the same space). Per seed, an earlier study (ours,
20 distinct configurations, seed 1000 + seed, run whole) on another landscape, then the new
study on the changed model's: cold; warm from the related landscape (the quickstart model's);
warm from a deliberately mismatched one (the quickstart landscape with both knobs reversed:
instance count c read as 6 - c, max_batch_size 2^i as 2^(7 - i)); warm from the changed model's
own landscape (a memory that holds exactly: what the mechanism can gain at most); and, for
scale, the same model re-tuned on another recording of it. Printed too: the rank correlation
of the configurations' best feasible throughput between each earlier landscape and the target
(whether a memory can hold at all). With ``--ablations`` each part of the warm start changed
(the whole queue at once, no level hint, 1 or 5 remembered configurations).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path

import optuna

sys.path.insert(0, str(Path(__file__).resolve().parent))
from replay import (
    TARGETS,
    Budget,
    Landscape,
    Ours,
    Warm,
    brute,
    earlier_trials,
    random_points,
    replay_points,
)

HERE = Path(__file__).resolve().parent
LANDSCAPES = [HERE / "data" / "ma_landscape_quickstart.csv",
              HERE / "data" / "ma_landscape_quickstart_pass2.csv"]
RETUNE = [HERE / "data" / "ma_landscape_retune.csv",
          HERE / "data" / "ma_landscape_retune_pass2.csv"]
EARLIER_TRIALS = 20  # the earlier study's search.n_trials (the spec's default)
MA_VENV = HERE / ".ma-venv"
MA_PACKAGE = "triton-model-analyzer"
SEEDS = 20
P99_MAX = 60.0

Search = Callable[[Landscape, Budget, int], None]


def ma_python() -> Path:
    """The Model Analyzer venv's interpreter, made on first use."""
    python = MA_VENV / "bin" / "python"
    if not python.exists():
        print(f"installing {MA_PACKAGE} into {MA_VENV} (first use) ...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(MA_VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", MA_PACKAGE], check=True)
    return python


def ma_version(python: Path) -> str:
    out = subprocess.run([str(python), "-m", "pip", "show", MA_PACKAGE, "optuna"],
                         capture_output=True, text=True, check=True).stdout
    found = [ln.split(":", 1)[1].strip() for ln in out.splitlines()
             if ln.startswith(("Name:", "Version:"))]
    return ", ".join(f"{found[i]} {found[i + 1]}" for i in range(0, len(found) - 1, 2))


def ma_runs(python: Path, mode: str, seeds: int, p99_max: float,
            landscape: Path) -> list[list[list[int]]]:
    """The points Model Analyzer's ``mode`` search asked for, one list per seed."""
    out = subprocess.run([str(python), str(HERE / "ma_driver.py"), str(landscape), "--mode",
                          mode, "--seeds", str(seeds), "--p99-max", f"{p99_max:g}"],
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        sys.exit(f"Model Analyzer's {mode} search failed to run:\n{out.stderr[-3000:]}")
    return [json.loads(ln)["points"] for ln in out.stdout.splitlines() if ln.startswith("{")]


def evaluate(land: Landscape, search: Search | list[Search], seeds: int
             ) -> tuple[list[dict[float, tuple[int, float, bool]]], list[tuple[int, float]],
                        list[Budget]]:
    runs, ends, budgets = [], [], []
    for seed in range(seeds):
        budget = Budget(land)
        run = search[seed] if isinstance(search, list) else search
        run(land, budget, seed)
        runs.append(budget.result())
        ends.append(budget.end())
        budgets.append(budget)
    return runs, ends, budgets


def row(name: str, runs: list[dict[float, tuple[int, float, bool]]],
        ends: list[tuple[int, float]], space: int) -> str:
    cells = []
    for t in TARGETS:
        counts = [r[t][0] for r in runs]
        secs = [r[t][1] for r in runs]
        med = statistics.median(counts)
        cells.append(f"{med:6.1f} ({med / space:5.1%}) [{min(counts)}-{max(counts)}] "
                     f"{statistics.median(secs):6.1f} s")
    hits = sum(r[0.98][2] for r in runs)
    made = statistics.median(e[0] for e in ends)
    share = statistics.median(e[1] for e in ends)
    return (f"{name:<22} {cells[0]:<36} {cells[1]:<36} {hits:>2}/{len(runs)}   "
            f"{made:5.1f}  {share:6.1%}")


def median_share(runs: list[dict[float, tuple[int, float, bool]]], t: float,
                 space: int) -> float:
    return round(statistics.median(r[t][0] for r in runs) / space, 4)


def mirrored(land: Landscape) -> Landscape:
    """``land`` with both knobs reversed (a deliberately unrelated earlier landscape)."""
    counts, batches, _levels = land.axes()

    def flip(key: tuple[int, int, int]) -> tuple[int, int, int]:
        c, b, n = key
        return (counts[len(counts) - 1 - counts.index(c)],
                batches[len(batches) - 1 - batches.index(b)], n)

    return Landscape({flip(k): p for k, p in land.table.items()}, land.p99_max,
                     [f"mirrored: {ln}" for ln in land.header])


def earlier_study(source: Landscape, seed: int) -> list[object]:
    """The trials of an earlier study (ours, run whole) on ``source``, as MLflow keeps them."""
    run = Ours(max_trials=EARLIER_TRIALS, until_target=False)
    run(source, Budget(source), 1000 + seed)
    return earlier_trials(run.study)  # type: ignore[attr-defined]


def rank_correlation(a: Landscape, b: Landscape) -> float:
    """Spearman's rank correlation of each configuration's best feasible throughput in two
    landscapes (1: the same order of configurations; 0: none in common)."""
    def best(land: Landscape) -> dict[tuple[int, int], float]:
        out: dict[tuple[int, int], float] = {}
        for key, p in land.table.items():
            if land.feasible(key):
                out[key[:2]] = max(out.get(key[:2], 0.0), p.throughput)
        return out

    pa, pb = best(a), best(b)
    keys = sorted(set(pa) & set(pb))

    def ranks(values: list[float]) -> list[float]:
        order = sorted(range(len(values)), key=values.__getitem__)
        out = [0.0] * len(values)
        for rank, i in enumerate(order):
            out[i] = float(rank)
        return out

    return statistics.correlation(ranks([pa[k] for k in keys]), ranks([pb[k] for k in keys]))


def _load(paths: list[Path], p99_max: float) -> Landscape:
    return Landscape.load(paths, p99_max)


def warm_main(args: argparse.Namespace) -> None:
    """The warm-start tables (``--warm``): the changed model's landscape, cold and warm from
    the related and the mismatched landscapes and from the target itself (a memory that holds
    exactly: the mechanism's upside); then a re-tune of the same model on another recording of
    it (the quickstart model's first recording, warm from its second)."""
    target = _load(args.warm_target, args.p99_max)
    related = _load(args.landscape, args.p99_max)
    names = " + ".join(p.name for p in args.warm_target)
    best = target.best_key
    print(f"target (the changed model): {names}: {len(target.table)} points, best feasible "
          f"{target.best:,.0f} infer/s at count={best[0]} max_batch_size={best[1]} "
          f"concurrency={best[2]}; {target.within(0.98)} points within 2% of it, "
          f"{target.within(0.95)} within 5%")
    for line in target.header:
        print(f"  {line}")
    if target.pass_spread() is not None:
        print(f"  its two recordings differ by a median {target.pass_spread():.1%} per point; "
              f"rank correlation of their configurations "
              f"{rank_correlation(*[_load([p], args.p99_max) for p in args.warm_target[:2]]):+.2f}")
    again = [_load([p], args.p99_max) for p in args.landscape[:2]]
    pairs = {"related": (related, target), "mismatched": (mirrored(related), target),
             "exact memory": (target, target), "same model": (again[-1], again[0])}
    for name, (src, tgt) in pairs.items():
        print(f"{name}: rank correlation of the configurations with the target "
              f"{rank_correlation(src, tgt):+.2f}")
    variants: dict[str, dict[str, object]] = {"": {}}
    if args.ablations:
        variants |= {", all at once": {"gate": False}, ", no level hint": {"hint": False},
                     ", 1 remembered": {"limit": 1}, ", 5 remembered": {"limit": 5}}
    runs: dict[str, tuple[Landscape, list[Search]]] = {"cold": (target, [Ours()] * args.seeds)}
    for name, (src, tgt) in pairs.items():
        earlier = [earlier_study(src, seed) for seed in range(args.seeds)]
        if name == "same model":
            runs["same model: cold"] = (tgt, [Ours()] * args.seeds)
        for suffix, setup in variants.items():
            if name == "same model" and suffix:
                continue
            runs[f"{name}: warm{suffix}"] = (tgt, [
                Ours(warm=Warm(earlier[seed], **setup))  # type: ignore[arg-type]
                for seed in range(args.seeds)])
    print(f"\n{args.seeds} seeds, {EARLIER_TRIALS} trials in each earlier study; median "
          "measurements (share of the space) [min-max] and median measurement seconds to reach")
    print(f"{'search':<32} {'95% of the best':<36} {'98% of the best':<36} reached 98%  "
          "at end: measured, best found (medians)")
    shares = {}
    for name, (land, search) in runs.items():
        found, ended, _b = evaluate(land, list(search), args.seeds)
        shares[name] = median_share(found, 0.98, len(land.table))
        print(row(name, found, ended, len(land.table)).replace(f"{name:<22}", f"{name:<32}"),
              flush=True)
    print(json.dumps({"space_points": len(target.table), "p99_max_ms": args.p99_max,
                      "seeds": args.seeds, "earlier_trials": EARLIER_TRIALS,
                      **{f"{n.replace(': ', '_').replace(', ', '_').replace(' ', '_')}"
                         f"_share_to_98": v for n, v in shares.items()},
                      **{f"{n.replace(' ', '_')}_rank_correlation":
                         round(rank_correlation(*pair), 3) for n, pair in pairs.items()},
                      "target_best": round(target.best, 1)}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--landscape", type=Path, nargs="+", default=LANDSCAPES,
                        help="recordings of the landscape (averaged per point)")
    parser.add_argument("--seeds", type=int, default=SEEDS)
    parser.add_argument("--p99-max", type=float, default=P99_MAX)
    parser.add_argument("--ablations", action="store_true",
                        help="also replay ours with each of its parts changed")
    parser.add_argument("--warm", action="store_true",
                        help="replay warm starts on the changed model's landscape instead")
    parser.add_argument("--warm-target", type=Path, nargs="+", default=RETUNE,
                        help="the changed model's landscape (--warm)")
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
    if args.warm:
        warm_main(args)
        return
    land = Landscape.load(args.landscape, args.p99_max)
    space = len(land.table)
    best = land.best_key
    names = " + ".join(p.name for p in args.landscape)
    print(f"landscape: {names}: {space} points, "
          f"{sum(land.feasible(k) for k in land.table)} feasible at p99 <= {args.p99_max:g} ms; "
          f"best feasible {land.best:,.0f} infer/s at count={best[0]} max_batch_size={best[1]} "
          f"concurrency={best[2]}; {land.within(0.98)} points within 2% of it, "
          f"{land.within(0.95)} within 5%; recording {land.seconds:.0f} measurement seconds; "
          f"{sum(p.client_limited for p in land.table.values())} points client-limited")
    spread = land.pass_spread()
    if spread is not None:
        print(f"  two recordings of each point differ by a median {spread:.1%} in throughput")
    for line in land.header:
        print(f"  {line}")
    python = ma_python()
    merged = Path(tempfile.mkdtemp(prefix="landscape-")) / "landscape.csv"
    land.write(merged)
    print(f"Model Analyzer: {ma_version(python)} (real generators, driven offline)")
    from tracker.search.optuna_study import TPE_STARTUP_TRIALS

    if Ours().startup != TPE_STARTUP_TRIALS:
        sys.exit("benchmarks/replay.py's Ours() must use the tuner's TPE_STARTUP_TRIALS")
    searches: dict[str, Search | list[Search]] = {"ours": Ours()}
    for mode in ("quick", "optuna"):
        searches[f"ma_{mode}"] = [replay_points(p) for p in
                                  ma_runs(python, mode, args.seeds, args.p99_max, merged)]
    searches["random"] = random_points
    searches["brute"] = brute
    if args.ablations:
        searches.update({
            "ours: ordered batch": Ours(ordered="batch"),
            "ours: ordered both": Ours(ordered="both"),
            "ours: sweep from 1": Ours(guess=False),
            "ours: formula start": Ours(incumbent=False),
            "ours: + pruning": Ours(prune=0.0),
            "ours: + pruning 10%": Ours(prune=0.10),
            "ours: startup 3": Ours(startup=3),
            "ours: startup 10": Ours(startup=10),
        })
    print(f"\n{args.seeds} seeds; median measurements (share of {space}) [min-max] and median "
          "measurement seconds to reach")
    print(f"{'search':<22} {'95% of the best':<36} {'98% of the best':<36} reached 98%  "
          "at end: measured, best found (medians)")
    results, ended, budgets = {}, {}, {}
    for name, search in searches.items():
        results[name], ended[name], budgets[name] = evaluate(land, search, args.seeds)
        print(row(name, results[name], ended[name], space), flush=True)
    same_budget = {}
    for peer in ("ma_quick", "ma_optuna"):
        n = int(statistics.median(e[0] for e in ended[peer]))
        same_budget[peer] = (n, statistics.median(b.found_after(n) for b in budgets["ours"]),
                             statistics.median(b.found_after(n) for b in budgets["random"]))
        print(f"after {n} measurements (where {peer} stopped): ours had found a median "
              f"{same_budget[peer][1]:.1%} of the best, random {same_budget[peer][2]:.1%}, "
              f"{peer} {statistics.median(e[1] for e in ended[peer]):.1%}")
    print(json.dumps({
        "space_points": space,
        "p99_max_ms": args.p99_max,
        "seeds": args.seeds,
        **{f"{n}_share_to_98": median_share(results[n], 0.98, space)
           for n in ("ours", "ma_quick", "ma_optuna", "random")},
        **{f"{n}_share_to_95": median_share(results[n], 0.95, space)
           for n in ("ours", "ma_quick", "ma_optuna", "random")},
        "brute_share_to_98": median_share(results["brute"], 0.98, space),
        **{f"{n}_measured": statistics.median(e[0] for e in ended[n])
           for n in ("ma_quick", "ma_optuna")},
        **{f"{n}_best_found_share": round(statistics.median(e[1] for e in ended[n]), 4)
           for n in ("ma_quick", "ma_optuna")},
        **{f"ours_found_at_{n}_budget": round(v[1], 4) for n, v in same_budget.items()},
        "landscape_best": round(land.best, 1),
    }))


if __name__ == "__main__":
    main()
