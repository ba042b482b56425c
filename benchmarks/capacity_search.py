"""Does the capacity search find the capacity, and for how much measuring? The search
(tracker/search/capacity.py) against a dense sweep of offered rates in 2% steps, measured in
the same sweep of the same server, on three configurations of the quickstart model served by
the embedded Triton.

    nice python benchmarks/capacity_search.py [--repeats 5] [--sla-ms 100] [--window-ms 500]
                                              [--max-tries 4] [--trace]

Per configuration and repeat, one sweep: a closed-loop anchor (concurrency 16, charged to
neither) gives the rate ``X``; the dense sweep climbs from ``0.5 X`` in 2% steps; when it
reaches ``0.8 X``, or a rate of it fails, the search starts (its own closed-loop probe, then
its rates) and the two take turns level by level, so the search's rates and the dense
sweep's rates near the edge are measured in the same minute: on a shared machine the
capacity follows the load of the moment, and the error is taken within one repeat, never
across repeats.

Both judge a rate by the search's rule: a reading holds by
:func:`tracker.search.capacity.why_not`, a rate that failed is measured once more, and it
holds when one of its readings held. The dense sweep stops after three rates in a row failed
after one held (or at ``3 X``). Its ground truth is the held rate that splits its rates into
"held below, failed above" with the fewest rates contradicting the split (ties: their
median). Not "the highest rate that held": that is the maximum of many noisy readings and
rides on one lucky reading above the edge; nor "the last rate below the first rate that
failed twice": on 2 shared cores a rate at half the capacity fails both readings now and then
(a stall of a tenth of a second breaks a p99), and over forty rates one of them would end the
sweep far below the edge.

Printed: each configuration's search capacity and ground truth (medians and spread over the
repeats), the relative error (per repeat, then the median), the measuring seconds of each,
and how closed-loop "best throughput under the SLA" (a concurrency sweep 1..16) and the
capacity rank the configurations (Kendall tau). The machine's load is printed before and
after; ``--trace`` prints every reading.
The last line is JSON: ``capacity_error`` (the worst configuration's median relative error),
``search_cost_share`` (the search's measuring time, its probe included, over the dense
sweep's, all repeats), and the figures behind them.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tracker.measure.entry import EntryLoad  # noqa: E402
from tracker.measure.goodput import request_slo  # noqa: E402
from tracker.measure.sweep import Probe, sweep  # noqa: E402
from tracker.measure.types import SweepLevel  # noqa: E402
from tracker.search.capacity import (  # noqa: E402
    Bisection,
    CapacityPlan,
    CapacitySettings,
    achieved_rps,
    why_not,
)
from tracker.search.objective import pick_best_level  # noqa: E402
from tracker.spec import LoadSection, ensure_model, load_spec  # noqa: E402
from tracker.spec.sections import ServerSection  # noqa: E402
from tracker.triton import model_config  # noqa: E402
from tracker.triton.formats import model_info  # noqa: E402
from tracker.triton.repository import write_repository  # noqa: E402
from tracker.triton.server.modes import make_server  # noqa: E402

#: name -> the changes to the quickstart model's default config
CONFIGS: dict[str, dict[str, object]] = {
    "default": {},
    "2 instances": {"instance_group.count": 2, "max_batch_size": 8},
    "queue 20 ms": {"max_batch_size": 8,
                    "dynamic_batching.max_queue_delay_microseconds": 20000},
}
STEP = 1.02
START_SHARE = 0.5  # the dense sweep starts at half the closed-loop anchor's rate ...
TOP_SHARE = 3.0    # ... and ends at 3x it, or after
FAILS = 3          # this many rates in a row failed (twice each) after one held
SEARCH_AT = 0.8    # the search starts when the dense sweep reaches 80% of the anchor's rate


class Interleaved:
    """One sweep's plan: a closed-loop anchor (the dense sweep's range; charged to neither),
    the dense sweep climbing from :data:`START_SHARE` of its rate, and, once the dense sweep
    reaches :data:`SEARCH_AT` of it or a rate of it fails, the capacity search (its own
    closed-loop probe, then its rates), a level of each in turn; each level's wall time is
    charged to its owner."""

    def __init__(self, settings: CapacitySettings) -> None:
        self.search = CapacityPlan(settings)
        self.settings = settings
        self.dense = Bisection()        # the dense sweep's readings, judged by the same rule
        self.owner: list[str] = []      # "anchor" | "search" | "dense", per level
        self.seconds = {"anchor": 0.0, "search": 0.0, "dense": 0.0}
        self.reason = ""
        self._mark = time.perf_counter()
        self._own: list[SweepLevel] = []
        self._search: int | Probe | None = None
        self._started = False
        self._dense: float | None = None
        self.top = self.start_search = 0.0

    def _after_dense(self, level: SweepLevel) -> float | None:
        """Record a dense reading; the next dense rate (the same one after its first failed
        reading), or None: :data:`FAILS` rates in a row failed after one held, or the top."""
        rate = float(next(iter(level.measurements.values())).request_rate or 0.0)
        s = self.settings
        self.dense.tell(rate, why_not(level, s.constraints, s.max_error_pct, s.bursty) is None)
        verdict = self.dense.verdict(rate)
        if verdict is None:
            return rate
        rates = sorted({r for r, _ in self.dense.history})
        tail = [self.dense.verdict(r) for r in rates[-FAILS:]]
        if (len(tail) == FAILS and not any(tail) and any(self.dense.verdict(r) for r in rates)) \
                or rate * STEP > self.top:
            return None
        return rate * STEP

    def _dense_verdicts(self) -> list[bool | None]:
        return [self.dense.verdict(r) for r, _ in self.dense.history]

    def _record(self, last: SweepLevel, who: str) -> None:
        if who == "anchor":
            if last.valid:
                x = min(achieved_rps(m) for m in last.measurements.values())
                self._dense, self.top = round(START_SHARE * x, 1), TOP_SHARE * x
                self.start_search = SEARCH_AT * x
        elif who == "dense":
            self._dense = self._after_dense(last)
        else:
            self._own.append(last)
            self._search = self.search.next(self._own)
        if not self._started and (self._dense is None or self._dense >= self.start_search
                                  or any(ok is False for ok in self._dense_verdicts())):
            self._started = True
            self._search = self.search.next([])

    def next(self, done: Sequence[SweepLevel]) -> int | Probe | None:
        now = time.perf_counter()
        if self.owner:
            self.seconds[self.owner[-1]] += now - self._mark
        self._mark = now
        if not done:
            self.owner.append("anchor")
            return Probe(concurrency=self.settings.probe_concurrency)
        who = self.owner[-1]
        self._record(done[-1], who)
        if self._search is not None and (who != "search" or self._dense is None):
            nxt, self._search = self._search, None
            self.owner.append("search")
            return nxt
        if self._dense is not None:
            rate, self._dense = self._dense, None
            self.owner.append("dense")
            return Probe(request_rate=round(rate, 1))
        self.reason = self.search.reason
        return None


def truth(dense: Bisection) -> float:
    """The dense sweep's capacity: the held rate that splits its rates into "held below,
    failed above" with the fewest rates contradicting the split (ties: their median), 0
    when none held. Each rate is judged as the search judges it (held when one of its two
    readings held); a rate undecided when the sweep ended counts as failed."""
    rates = sorted({r for r, _ in dense.history})
    held = [dense.verdict(r) is True for r in rates]
    cost = {r: held[:i].count(False) + held[i + 1:].count(True)
            for i, r in enumerate(rates) if held[i]}
    if not cost:
        return 0.0
    best = min(cost.values())
    return statistics.median_low([r for r, c in cost.items() if c == best])


def serve(name: str, tmp: Path) -> tuple[Any, Any]:
    """A server with configuration ``name`` of the quickstart model loaded, and its config."""
    spec = load_spec(ROOT / "projects" / "quickstart" / "study.yaml")
    ensure_model(spec)
    info = model_info(spec.model)
    cfg = model_config.apply(info, CONFIGS[name]) if CONFIGS[name] else info.config
    repo = write_repository(tmp / name.replace(" ", "_"), info, cfg, serving="python")
    server = make_server(ServerSection())
    server.start(repo.path, explicit=True)
    server.load(info.config.name)
    return server, repo.served_config


def closed_loop_best(endpoints: Any, cfg: Any, load: LoadSection,
                     sla: dict[str, Any]) -> float:
    """Model Analyzer's figure: the best throughput of a concurrency sweep under the SLA."""
    closed = load.model_copy(update={"concurrency": [1, 2, 4, 8, 16]})
    name = str(cfg.name)
    result = sweep(endpoints, {name: EntryLoad(cfg, closed)}, sla)
    choice = pick_best_level(result.levels, {f"{name}/{k}": v for k, v in sla.items()},
                             {f"{name}/perf_throughput": "maximize"})
    return choice.metrics[f"{name}/perf_throughput"] if choice.feasible else 0.0


def one(name: str, args: argparse.Namespace, tmp: Path, repeat: int) -> dict[str, Any]:
    sla = {"perf_latency_p99": {"max": args.sla_ms}}
    load = LoadSection(concurrency=[16], arrival="poisson", window_ms=args.window_ms,
                       max_tries=args.max_tries, warmup_requests=20,
                       capacity_tolerance_pct=5.0, capacity_max_probes=8)
    settings = CapacitySettings(sla, load.max_error_pct, True, 5.0, 8, 16)
    server, cfg = serve(name, tmp / f"r{repeat}")
    try:
        plan = Interleaved(settings)
        entry = EntryLoad(cfg, load, slo=request_slo(sla))

        def show(level: SweepLevel) -> None:
            if args.trace:
                m = next(iter(level.measurements.values()))
                why = why_not(level, sla, load.max_error_pct, True)
                print(f"  {plan.owner[-1]:<6} rate {m.request_rate or 0:8,.1f} achieved "
                      f"{achieved_rps(m):8,.1f} p99 {m.latency_p99_ms or 0:7.1f} ms "
                      f"windows {m.windows} {'held' if why is None else why}", flush=True)

        sweep(server.endpoints, {str(cfg.name): entry}, sla, plan=plan, on_level=show)
        closed = closed_loop_best(server.endpoints, cfg, load, sla) if repeat == 0 else None
    finally:
        server.stop()
    return {"capacity": plan.search.search.bracket()[0] or 0.0, "truth": truth(plan.dense),
            "search_s": plan.seconds["search"],
            "dense_s": plan.seconds["dense"], "search_rates": len(plan.search.search.history),
            "dense_rates": len(plan.dense.history), "closed_loop": closed}


def kendall_tau(a: Sequence[float], b: Sequence[float]) -> float:
    """Kendall's tau-a of two rankings of the same items."""
    n, score = len(a), 0
    for i in range(n):
        for j in range(i + 1, n):
            x, y = a[i] - a[j], b[i] - b[j]
            score += (x * y > 0) - (x * y < 0)
    return score / (n * (n - 1) / 2) if n > 1 else 0.0


def spread(values: Sequence[float]) -> str:
    return (f"{statistics.median(values):,.1f} (min {min(values):,.1f}, max "
            f"{max(values):,.1f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--sla-ms", type=float, default=100.0)
    parser.add_argument("--window-ms", type=int, default=500)
    parser.add_argument("--max-tries", type=int, default=4)
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--trace", action="store_true", help="print every rate measured")
    args = parser.parse_args()
    names = args.configs.split(",")
    load_before = os.getloadavg()
    print(f"load average before: {load_before[0]:.1f} {load_before[1]:.1f} "
          f"{load_before[2]:.1f} on {os.cpu_count()} cores; SLA p99 <= {args.sla_ms:g} ms")
    rows: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    rng = random.Random(7)
    with tempfile.TemporaryDirectory(prefix="capacity-bench-") as tmp:
        for repeat in range(args.repeats):
            order = names[:]
            rng.shuffle(order)
            for name in order:
                got = one(name, args, Path(tmp), repeat)
                rows[name].append(got)
                print(f"repeat {repeat} {name:<12} search {got['capacity']:8,.1f}/s in "
                      f"{got['search_rates']} readings ({got['search_s']:.0f} s)   dense "
                      f"{got['truth']:8,.1f}/s in {got['dense_rates']} readings "
                      f"({got['dense_s']:.0f} s)", flush=True)
    out: dict[str, Any] = {}
    errors, capacities, closed = {}, {}, {}
    for name in names:
        runs = rows[name]
        err = [abs(r["capacity"] - r["truth"]) / r["truth"] for r in runs if r["truth"] > 0]
        errors[name] = statistics.median(err) if err else float("nan")
        capacities[name] = statistics.median(r["capacity"] for r in runs)
        closed[name] = next(r["closed_loop"] for r in runs if r["closed_loop"] is not None)
        print(f"{name:<12} capacity {spread([r['capacity'] for r in runs])}  truth "
              f"{spread([r['truth'] for r in runs])}  median error "
              f"{100 * errors[name]:.1f}%  closed-loop best under the SLA "
              f"{closed[name]:,.1f} infer/s")
        out[name] = {"capacity": [r["capacity"] for r in runs],
                     "truth": [r["truth"] for r in runs], "median_error": errors[name],
                     "closed_loop": closed[name]}
    search_s = sum(r["search_s"] for rs in rows.values() for r in rs)
    dense_s = sum(r["dense_s"] for rs in rows.values() for r in rs)
    tau = kendall_tau([closed[n] for n in names], [capacities[n] for n in names])
    load_after = os.getloadavg()
    print(f"search measuring {search_s:.0f} s, dense sweep {dense_s:.0f} s: share "
          f"{search_s / dense_s:.2f}; Kendall tau (closed-loop vs capacity ranking) {tau:+.2f}")
    print(f"load average after: {load_after[0]:.1f} {load_after[1]:.1f} {load_after[2]:.1f}")
    print(json.dumps({"capacity_error": max(errors.values()),
                      "search_cost_share": search_s / dense_s if dense_s else None,
                      "kendall_tau": tau, "repeats": args.repeats, "sla_ms": args.sla_ms,
                      "load_before": load_before, "load_after": load_after,
                      "configs": out}))


if __name__ == "__main__":
    main()
