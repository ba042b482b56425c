"""Is the built-in load generator trustworthy and never the bottleneck? One local Triton
serving the quickstart model (its default config), in one run:

    .venv/bin/python benchmarks/loadgen_capacity.py [--rounds 5] [--concurrency 16] [--nice -10]

The reference client is minimal: tritonclient's asyncio client, one pre-built InferInput,
CONCURRENCY coroutines awaiting ``client.infer`` in a loop; each run lasts as long as the
built-in measurement before it and counts completions over the same final span (its last 3
windows), so both clients are compared after the same time under load.
The built-in client is one level of ``tracker.measure.sweep`` at CONCURRENCY (1 s windows,
stability 10%, its usual warm-up), which also gives the server's count over the same windows.
They alternate on the same server: ref, built-in, ref, built-in, ..., ref; each built-in
measurement is compared with the mean of the reference runs just before and after it, so a
machine whose speed drifts (a shared one) biases neither side.
Figures: (a) client_ratio = median of those per-round ratios (>= 0.95 wanted),
(b) count_agreement = worst |client - server| / server over the rounds (<= 1%),
(c) throughput_cv = stdev / mean of the ROUNDS built-in throughputs (<= 5%).
``--nice -10`` (root) runs client and server at a higher priority than the rest of a shared
machine. Medians and ratios, not single runs. Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "projects" / "quickstart" / "study.yaml"


async def reference(url: str, model: str, concurrency: int, seconds: float,
                    tail_s: float = 3.0) -> float:
    """Infer/s of the minimal tritonclient asyncio loop over the last ``tail_s`` of a run of
    ``seconds`` (after a short warm-up): the same span a built-in measurement reports."""
    import tritonclient.grpc.aio as grpcclient
    from tritonclient.grpc import InferInput

    client = grpcclient.InferenceServerClient(url)
    inp = InferInput("INPUT0", [1, 64], "FP32")
    inp.set_data_from_numpy(np.random.default_rng(0).random((1, 64), dtype=np.float32))
    count = 0
    stop = False

    async def worker() -> None:
        nonlocal count
        while not stop:
            await client.infer(model, [inp])
            count += 1

    tasks = [asyncio.create_task(worker()) for _ in range(concurrency)]
    await asyncio.sleep(0.3 + max(seconds - tail_s, 0.0))  # warm-up, then the untimed part
    start, first = time.perf_counter(), count
    await asyncio.sleep(tail_s)
    done, elapsed = count - first, time.perf_counter() - start
    stop = True
    await asyncio.gather(*tasks)
    await client.close()
    return done / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=10.0,
                        help="Length of the first reference run (later ones match the "
                        "built-in measurement they follow).")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--nice", type=int, default=0,
                        help="Priority change for this process and the server it starts.")
    args = parser.parse_args()
    if args.nice:
        os.nice(args.nice)

    from tracker.measure.sweep import EntryLoad, sweep
    from tracker.spec import LoadSection, ensure_model, load_spec
    from tracker.triton.formats import model_info
    from tracker.triton.repository import write_repository
    from tracker.triton.server.modes import make_server

    spec = load_spec(SPEC)
    ensure_model(spec)
    info = model_info(spec.model)
    load = LoadSection(concurrency=[args.concurrency], window_ms=1000, stability_pct=10,
                       max_tries=10, warmup_requests=200)
    server = make_server(spec.server)
    refs: list[float] = []
    builtins: list[float] = []
    ratios: list[float] = []
    agreement: list[float] = []
    overhead: list[float] = []
    with tempfile.TemporaryDirectory(prefix="loadgen-bench-") as tmp:
        repo = write_repository(Path(tmp), info, info.config, serving="python")
        with server:
            server.apply_trial(repo)
            ep = server.endpoints
            print(f"quickstart model ({info.config.max_batch_size=}, default config) on the "
                  f"wheel's Triton, concurrency {args.concurrency}, {args.rounds} rounds")
            print(f"load average before: {os.getloadavg()[0]:.1f}")
            refs.append(asyncio.run(reference(ep.grpc, repo.model_name, args.concurrency,
                                              args.seconds)))
            for r in range(args.rounds):
                (m,) = sweep(ep, {
                                 repo.model_name: EntryLoad(repo.served_config, load)}).measurements
                if not m.valid or m.server_requests is None:
                    sys.exit(f"round {r + 1}: measurement invalid: {m.invalid_reason}")
                # as long as the measurement ran (all its windows), timed over its last 3 s
                refs.append(asyncio.run(reference(ep.grpc, repo.model_name, args.concurrency,
                                                  max(args.seconds, float(m.windows)),
                                                  tail_s=m.duration_s)))
                ref = (refs[-2] + refs[-1]) / 2
                builtins.append(m.throughput)
                ratios.append(m.throughput / ref)
                agreement.append(abs(m.requests - m.server_requests) / m.server_requests)
                overhead.append(m.client_overhead_pct or 0.0)
                print(f"round {r + 1}: reference {ref:8.1f} infer/s (mean of the runs around) "
                      f"| built-in {m.throughput:8.1f} infer/s "
                      f"({'stable' if m.stable else 'UNSTABLE'}, {m.windows} windows, "
                      f"p99 {m.latency_p99_ms:.2f} ms, client busy "
                      f"{m.client_overhead_pct:.0f}%) | client {m.requests} vs server "
                      f"{m.server_requests} requests")
            print(f"load average after: {os.getloadavg()[0]:.1f}")
    ratio = statistics.median(ratios)
    cv = statistics.stdev(builtins) / statistics.mean(builtins) if len(builtins) > 1 else 0.0
    print(f"(a) built-in / reference throughput, median of {len(ratios)} rounds: {ratio:.3f} "
          f"(want >= 0.95)")
    print(f"(b) worst |client - server| / server count: {100 * max(agreement):.3f}% "
          f"(want <= 1%)")
    print(f"(c) built-in throughput CV over {len(builtins)} measurements: {100 * cv:.2f}% "
          f"(want <= 5%); median client busy {statistics.median(overhead):.0f}%")
    print(json.dumps({"client_ratio": round(ratio, 4),
                      "count_agreement": round(max(agreement), 6),
                      "throughput_cv": round(cv, 4)}))


if __name__ == "__main__":
    main()
