"""How much does this machine's own speed wander? A busy loop counted in short spans.

    python benchmarks/cpu_flicker.py [--seconds 60] [--span-ms 50] [--procs 1]

The paired confirmation (tracker/confirm/paired.py) compares two configurations measured one
after the other, seconds apart; whatever changes the machine's speed between the two blocks is
in the pair's ratio. This measures that change with nothing but the CPU: ``--procs`` processes
each run a pure-Python loop and count its iterations in consecutive spans of ``--span-ms``;
the counts are then averaged over longer spans (0.05 to 4 s). For each length it prints

- ``sd``: the spread of the averages over the run (slow drift counts here);
- ``adjacent``: the Allan deviation, the typical difference between two adjacent spans of that
  length divided by sqrt(2): what two blocks of that length taken one after the other differ
  by when nothing differs but the moment. Two blocks' log-ratio then spreads about
  ``sqrt(2) x adjacent``.

White noise (independent spans) halves ``adjacent`` for every 4-fold length; flat
``adjacent`` across lengths is flicker noise, which longer blocks do not average away.
Nothing else should run meanwhile (the tool's own tests, a study): their load is what it would
measure. The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import multiprocessing as mp
import os
import statistics
import time

LENGTHS_S = (0.05, 0.1, 0.25, 0.5, 1.0, 1.5, 2.0, 4.0)


def count(seconds: float, span_s: float) -> list[int]:
    """Iterations of a busy loop in each span of ``span_s`` for ``seconds``."""
    out: list[int] = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        n, stop = 0, time.perf_counter() + span_s
        while time.perf_counter() < stop:
            for _ in range(200):
                n += 1
        out.append(n)
    return out


def figures(counts: list[int], span_s: float) -> dict[str, dict[str, float]]:
    """Per length: the averages' relative sd and their Allan deviation."""
    mean = statistics.fmean(counts)
    x = [c / mean for c in counts]
    out: dict[str, dict[str, float]] = {}
    for length in LENGTHS_S:
        k = max(1, round(length / span_s))
        avg = [statistics.fmean(x[i:i + k]) for i in range(0, len(x) - k + 1, k)]
        if len(avg) < 4:
            continue
        diffs = [b - a for a, b in itertools.pairwise(avg)]
        allan = math.sqrt(0.5 * statistics.fmean(d * d for d in diffs))
        out[f"{length:g}s"] = {"sd": round(statistics.stdev(avg), 4),
                               "adjacent": round(allan, 4), "spans": len(avg)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--span-ms", type=float, default=50.0)
    ap.add_argument("--procs", type=int, default=1)
    a = ap.parse_args()
    if a.procs < 1 or a.seconds <= 0 or a.span_ms <= 0:
        ap.error(f"--procs must be >= 1 and --seconds, --span-ms > 0, but got {a.procs}, "
                 f"{a.seconds:g} and {a.span_ms:g}")
    span_s = a.span_ms / 1000.0
    load = os.getloadavg()[0]
    print(f"{a.procs} busy loop(s) for {a.seconds:g} s in {a.span_ms:g} ms spans; load average "
          f"{load:.2f} at the start")
    with mp.Pool(a.procs) as pool:
        runs = pool.starmap(count, [(a.seconds, span_s)] * a.procs)
    per_proc = [figures(c, span_s) for c in runs]
    print(f"{'length':>8} " + " ".join(f"{'proc ' + str(i) + ' sd/adjacent':>22}"
                                       for i in range(a.procs)))
    for length in per_proc[0]:
        print(f"{length:>8} " + " ".join(
            f"{p[length]['sd']:>10.3f} / {p[length]['adjacent']:<9.3f}" for p in per_proc
            if length in p))
    med = {length: round(statistics.median(p[length]["adjacent"] for p in per_proc
                                           if length in p), 4)
           for length in per_proc[0]}
    if "1.5s" in med:
        print(f"two adjacent 1.5 s blocks' log-ratio would spread about "
              f"{math.sqrt(2) * med['1.5s']:.3f} from the machine alone")
    print(json.dumps({"seconds": a.seconds, "span_ms": a.span_ms, "procs": a.procs,
                      "load_start": round(load, 2), "adjacent_median": med,
                      "per_proc": per_proc}))


if __name__ == "__main__":
    main()
