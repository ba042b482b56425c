"""How long should the paired confirmation's blocks be? The spread of a pair's log-ratio for a
few block lengths, measured in one run, interleaved.

    python benchmarks/pair_blocks.py [--pairs quickstart,densenet] [--windows 200,500,1000,2000]
        [--rounds 8] [--restart]

Each pair set is two configurations of one sample project served side by side in one local
Triton, as the confirmation serves them (tracker/confirm/paired.py: copies named
``<model>__default`` and ``<model>__best``), each block the confirmation's own
(:meth:`tracker.confirm.paired.Pairs.block`: a short warm-up, then 3 windows of the given
length). In every round, each window length gets one pair, the lengths in a random order and the
two blocks of each pair in a random order, so every length sees the same moments of the machine.

- ``quickstart``: its default config against 2 instances, batches of up to 32, 200 us queue
  delay, at concurrency 16;
- ``densenet``: its default (1 instance, onnxruntime's threads unset) against 2 instances x 1
  thread, at concurrency 4;
- ``threads``: densenet's default against the same config with ``intra_op_thread_count: 1``,
  at concurrency 2 (the suspect of the default's bimodal readings, #35). With ``--restart`` the
  server is restarted before every round, as the rounds design restarts it for every
  measurement, so the sessions' threads are placed anew.

Per pair set and window: the pairs' median ratio (best / default), the standard deviation of
the log-ratio, a pair's seconds, and the measuring time the anytime-valid interval
(tracker/verdict/anytime.py) would need to get within +-10% at that spread (``pairs x pair
seconds``: what the confirmation spends): the lower, the better the block length. Also each
copy's block-to-block CV and its readings, to see a bimodal copy. The last line is one JSON
object.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tracker.confirm import paired  # noqa: E402
from tracker.errors import TrackerError  # noqa: E402
from tracker.spec import ensure_model, load_spec  # noqa: E402
from tracker.triton import model_config  # noqa: E402
from tracker.triton.formats import model_info  # noqa: E402
from tracker.triton.repository import write_model  # noqa: E402
from tracker.triton.server.local import LocalTritonServer  # noqa: E402
from tracker.verdict import anytime as sequence  # noqa: E402

#: name -> (project, the default's changes, the best's changes, concurrency)
PAIRS: dict[str, tuple[str, dict[str, object], dict[str, object], int]] = {
    "quickstart": ("quickstart", {}, {"instance_group.count": 2, "max_batch_size": 32,
                                      "dynamic_batching.max_queue_delay_microseconds": 200}, 16),
    "densenet": ("densenet_onnx", {}, {"instance_group.count": 2,
                                       "parameters.intra_op_thread_count": 1}, 4),
    "threads": ("densenet_onnx", {}, {"parameters.intra_op_thread_count": 1}, 2),
}
#: the half-width (of the log-ratio) the "time to +-10%" column asks for
TARGET = math.log(1.1)


def serve(name: str, tmp: Path) -> tuple[Any, dict[int, tuple[str, Any]], Any]:
    """The spec, both copies' (name, served config) by 0 (the default) and 1, and the merged
    repository to serve."""
    project, base, best = PAIRS[name][:3]
    spec = load_spec(ROOT / "projects" / project / "study.yaml")
    ensure_model(spec)
    info = model_info(spec.model)
    written = []
    for baseline, changes in ((True, base), (False, best)):
        cfg = model_config.apply(info, changes) if changes else info.config
        copy = type(cfg)()
        copy.CopyFrom(cfg)
        copy.name = f"{info.config.name}{paired.SUFFIX[baseline]}"
        written.append(write_model(tmp / name, info, copy, serving="python"))
    repo = replace(written[-1], models=tuple((r.model_name, r.served_config) for r in written),
                   productions={r.model_name: r.production_config for r in written})
    return spec, {i: (r.model_name, r.served_config) for i, r in enumerate(written)}, repo


def block(pairs: paired.Pairs, n: int, window: int) -> tuple[float | None, float]:
    """One block of copy ``n`` with ``window`` ms windows: (throughput or None, seconds)."""
    pairs.window = window
    t0 = time.monotonic()
    try:
        levels = pairs.block(n)
    except TrackerError as exc:  # a failed block is reported, the run goes on
        print(f"  block failed: {str(exc).splitlines()[0][:160]}", flush=True)
        return None, time.monotonic() - t0
    got = [m.throughput for m in levels[0].measurements.values()] if levels else []
    return (got[0] if got else None), time.monotonic() - t0


def run_set(name: str, windows: list[int], rounds: int, restart: bool,
            rng: random.Random) -> dict[str, Any]:
    level = PAIRS[name][3]
    readings: dict[int, list[tuple[float | None, float | None, float]]] = {w: [] for w in windows}
    with tempfile.TemporaryDirectory(prefix="pair-blocks-") as tmp, \
            LocalTritonServer() as server:
        spec, served, repo = serve(name, Path(tmp))
        ctx = SimpleNamespace(spec=spec, server=server)
        rows = {0: SimpleNamespace(concurrency=level), 1: SimpleNamespace(concurrency=level)}
        pairs = paired.Pairs(ctx, rows, windows[0], served)  # type: ignore[arg-type]
        server.apply_trial(repo)
        for r in range(rounds):
            if restart and r:  # the restart strategy: a fresh server, fresh sessions
                server.apply_trial(repo)
            for w in rng.sample(windows, len(windows)):
                got: dict[int, float | None] = {}
                took = 0.0
                for n in rng.sample([0, 1], 2):
                    got[n], seconds = block(pairs, n, w)
                    took += seconds
                readings[w].append((got[0], got[1], took))
            print(f"{name} round {r + 1}/{rounds}: " + "; ".join(
                f"{w} ms {_fmt(readings[w][-1][1])}/{_fmt(readings[w][-1][0])}"
                for w in windows) + f" (load {os.getloadavg()[0]:.1f})", flush=True)
    return {str(w): summarize(readings[w]) for w in windows}


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def summarize(got: list[tuple[float | None, float | None, float]]) -> dict[str, Any]:
    """One window length's figures from its pairs (default, best, seconds)."""
    both = [(a, b) for a, b, _ in got if a and b]
    logs = [math.log(b / a) for a, b in both]
    pair_s = statistics.median(t for *_, t in got)
    sd = statistics.stdev(logs) if len(logs) > 1 else math.nan
    need = next((n for n in range(3, 1000) if sequence.factor(n) * sd < TARGET), None) \
        if math.isfinite(sd) else None
    return {"pairs": len(logs), "ratio": round(math.exp(statistics.median(logs)), 3)
            if logs else None, "sd_log": round(sd, 3), "pair_s": round(pair_s, 2),
            "pairs_to_10pct": need, "s_to_10pct": None if need is None
            else round(need * pair_s, 1),
            "cv_default_pct": _cv([a for a, _ in both]), "cv_best_pct": _cv([b for _, b in both]),
            "default": [round(a, 1) for a, _ in both], "best": [round(b, 1) for _, b in both]}


def _cv(values: list[float]) -> float | None:
    if len(values) < 2:
        return None
    return round(100 * statistics.stdev(values) / statistics.mean(values), 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", default="quickstart,densenet")
    parser.add_argument("--windows", default="200,500,1000,2000", help="window lengths, ms")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--restart", action="store_true",
                        help="restart the server before every round")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    windows = [int(w) for w in args.windows.split(",")]
    names = args.pairs.split(",")
    unknown = [n for n in names if n not in PAIRS]
    if unknown:
        parser.error(f"--pairs: unknown {unknown}; known: {sorted(PAIRS)}")
    out: dict[str, Any] = {"rounds": args.rounds, "windows_ms": windows, "restart": args.restart,
                           "load_before": round(os.getloadavg()[0], 2)}
    rng = random.Random(args.seed)
    t0 = time.monotonic()
    for name in names:
        out[name] = run_set(name, windows, args.rounds, args.restart, rng)
    out["load_after"] = round(os.getloadavg()[0], 2)
    out["wall_s"] = round(time.monotonic() - t0, 1)
    print(f"\nload average {out['load_before']} before, {out['load_after']} after, "
          f"{out['wall_s']} s")
    print("| pairs | window ms | pairs | median ratio | sd of log-ratio | pair s | s to +-10% "
          "| CV default % | CV best % |\n|---|---|---|---|---|---|---|---|---|")
    for name in names:
        for w, f in out[name].items():
            print(f"| {name} | {w} | {f['pairs']} | {f['ratio']} | {f['sd_log']} | "
                  f"{f['pair_s']} | {f['s_to_10pct']} | {f['cv_default_pct']} | "
                  f"{f['cv_best_pct']} |")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
