"""What Triton's response cache buys on the quickstart model, as ratios: one local Triton (the
wheel's, started with ``--cache-config local,size=...``) serving the quickstart model's default
config with and without ``response_cache { enable: true }``, at 0%, 50% and 90% repeated
inputs (``load.repeat``), in one run:

    .venv/bin/python benchmarks/response_cache.py [--rounds 3] [--concurrency 8]

Both configs run on the same server (the reload strategy: the flags stay, the model's config
is reloaded), alternating off, on, off, on, ... within each repeat share, so a machine whose
speed drifts biases neither side; each round draws its own requests (the cache keeps what
earlier rounds inserted). Each measurement is one level of ``tracker.measure.sweep``
(1 s windows, stability 10%) with the metrics endpoint sampled for the cache's own figures.
Figures per repeat share: throughput on / off (median of the rounds' ratios), p50 latency
on / off, and the cache hit ratio the server reported with the cache on. Last line: one JSON
object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "projects" / "quickstart" / "study.yaml"
SHARES = (0.0, 50.0, 90.0)
CACHE_BYTES = 64 * 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()

    from tracker.measure.monitors import TritonMetricsMonitor
    from tracker.measure.sweep import EntryLoad, sweep
    from tracker.spec import LoadSection, ServerSection, ensure_model, load_spec
    from tracker.spec.load_repeat import RepeatSection
    from tracker.triton import model_config
    from tracker.triton.formats import model_info
    from tracker.triton.repository import write_repository
    from tracker.triton.server.local import LocalTritonServer

    spec = load_spec(SPEC)
    ensure_model(spec)
    info = model_info(spec.model)
    flags = (f"--cache-config=local,size={CACHE_BYTES}",)
    configs = {"off": info.config, "on": model_config.apply(info, {"response_cache.enable": True})}
    out: dict[str, Any] = {"concurrency": args.concurrency, "rounds": args.rounds,
                           "load_before": round(os.getloadavg()[0], 1)}
    print(f"quickstart model (default config) on the wheel's Triton with a {CACHE_BYTES >> 20} "
          f"MB response cache, concurrency {args.concurrency}, {args.rounds} rounds; load "
          f"average before: {out['load_before']}")
    server = LocalTritonServer(ServerSection(strategy="reload"))
    with tempfile.TemporaryDirectory(prefix="cache-bench-") as tmp, server:
        repos = {k: write_repository(Path(tmp) / k, info, cfg, serving="python")
                 for k, cfg in configs.items()}
        for share in SHARES:
            got: dict[str, list[Any]] = {"off": [], "on": []}
            for r in range(args.rounds):
                # a seed per round: the cache keeps what earlier rounds inserted
                load = LoadSection(concurrency=[args.concurrency], window_ms=1000,
                                   max_tries=10, warmup_requests=200,
                                   repeat=RepeatSection(pct=share, distinct=20000,
                                                        seed=1000 * int(share) + r))
                for key in (("off", "on") if r % 2 == 0 else ("on", "off")):
                    server.apply_trial(repos[key], flags)
                    ep = server.endpoints
                    monitor = TritonMetricsMonitor(ep.metrics or "", ())
                    entry = EntryLoad(repos[key].served_config, load)
                    (m,) = sweep(ep, {repos[key].model_name: entry},
                                 monitors=[monitor]).measurements
                    got[key].append(m)
            ratios = [a.throughput / b.throughput for a, b in zip(got["on"], got["off"],
                                                                   strict=True)]
            lat = [a.latency_p50_ms / b.latency_p50_ms for a, b in zip(got["on"], got["off"],
                                                                         strict=True)
                   if a.latency_p50_ms and b.latency_p50_ms]
            hits = [m.monitors.get("cache_hit_ratio", 0.0) for m in got["on"]]
            row = {"throughput_ratio": round(statistics.median(ratios), 3),
                   "throughput_ratio_range": [round(min(ratios), 3), round(max(ratios), 3)],
                   "p50_ratio": round(statistics.median(lat), 3) if lat else None,
                   "hit_pct": round(statistics.median(hits), 1),
                   "off_infer_s": round(statistics.median(m.throughput for m in got["off"]), 1),
                   "on_infer_s": round(statistics.median(m.throughput for m in got["on"]), 1)}
            out[f"repeat_{share:g}"] = row
            print(f"repeat {share:>4g}%: throughput on/off {row['throughput_ratio']:.3f} "
                  f"(rounds {row['throughput_ratio_range'][0]:.3f}.."
                  f"{row['throughput_ratio_range'][1]:.3f}; off {row['off_infer_s']} infer/s, "
                  f"on {row['on_infer_s']} infer/s), p50 on/off {row['p50_ratio']}, cache hits "
                  f"{row['hit_pct']}% of lookups")
    out["load_after"] = round(os.getloadavg()[0], 1)
    print(f"load average after: {out['load_after']}")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
