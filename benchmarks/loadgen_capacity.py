"""Is the built-in load generator trustworthy and never the bottleneck? One local Triton
serving the quickstart model (its default config), in one run:

    .venv/bin/python benchmarks/loadgen_capacity.py [--rounds 5] [--seconds 3] [--concurrency 16]

Each round measures, back to back on the same server:
- a minimal reference client: tritonclient's asyncio client, one pre-built InferInput,
  CONCURRENCY coroutines awaiting ``client.infer`` in a loop, completions counted over SECONDS;
- the built-in client: one level of ``tracker.measure.sweep`` at CONCURRENCY (1 s windows,
  stability 10%, its usual warm-up), giving throughput and the server's count over the same
  windows.
Figures: (a) client_ratio = median built-in throughput / median reference throughput (>= 0.95
wanted), (b) count_agreement = worst |client - server| / server over the rounds (<= 1%),
(c) throughput_cv = stdev / mean of the built-in throughputs (<= 5%). The machine is shared
and noisy: medians and ratios, not single runs. Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "projects" / "quickstart" / "study.yaml"


async def reference(url: str, model: str, concurrency: int, seconds: float) -> float:
    """Infer/s of the minimal tritonclient asyncio loop (after a short warm-up)."""
    import tritonclient.grpc.aio as grpcclient
    from tritonclient.grpc import InferInput

    client = grpcclient.InferenceServerClient(url)
    inp = InferInput("INPUT0", [1, 64], "FP32")
    inp.set_data_from_numpy(np.random.default_rng(0).random((1, 64), dtype=np.float32))
    count = 0
    counting = False
    stop = False

    async def worker() -> None:
        nonlocal count
        while not stop:
            await client.infer(model, [inp])
            if counting:
                count += 1

    tasks = [asyncio.create_task(worker()) for _ in range(concurrency)]
    await asyncio.sleep(0.3)  # warm-up
    counting = True
    start = time.perf_counter()
    await asyncio.sleep(seconds)
    counting = False
    elapsed = time.perf_counter() - start
    stop = True
    await asyncio.gather(*tasks)
    await client.close()
    return count / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()

    from tracker.measure.sweep import sweep
    from tracker.spec import LoadSection, ensure_model, load_spec
    from tracker.triton.model_config import model_info
    from tracker.triton.repository import write_repository
    from tracker.triton.server.base import make_server

    spec = load_spec(SPEC)
    ensure_model(spec)
    info = model_info(spec.model)
    load = LoadSection(concurrency=[args.concurrency], window_ms=1000, stability_pct=10,
                       max_tries=10, warmup_requests=200)
    server = make_server(spec.server)
    refs: list[float] = []
    builtins: list[float] = []
    agreement: list[float] = []
    overhead: list[float] = []
    with tempfile.TemporaryDirectory(prefix="loadgen-bench-") as tmp:
        repo = write_repository(Path(tmp), info, info.config, serving="python")
        with server:
            server.apply_trial(repo)
            ep = server.endpoints
            print(f"quickstart model ({info.config.max_batch_size=}, default config) on the "
                  f"wheel's Triton, concurrency {args.concurrency}, {args.rounds} rounds")
            for r in range(args.rounds):
                ref = asyncio.run(reference(ep.grpc, repo.model_name, args.concurrency,
                                            args.seconds))
                (m,) = sweep(ep, repo.model_name, repo.served_config, load).measurements
                if not m.valid or m.server_requests is None:
                    sys.exit(f"round {r + 1}: measurement invalid: {m.invalid_reason}")
                refs.append(ref)
                builtins.append(m.throughput)
                agreement.append(abs(m.requests - m.server_requests) / m.server_requests)
                overhead.append(m.client_overhead_pct or 0.0)
                print(f"round {r + 1}: reference {ref:8.1f} infer/s | built-in "
                      f"{m.throughput:8.1f} infer/s ({'stable' if m.stable else 'UNSTABLE'}, "
                      f"{m.windows} windows, p99 {m.latency_p99_ms:.2f} ms, client busy "
                      f"{m.client_overhead_pct:.0f}%) | client {m.requests} vs server "
                      f"{m.server_requests} requests")
    ratio = statistics.median(builtins) / statistics.median(refs)
    cv = statistics.stdev(builtins) / statistics.mean(builtins) if len(builtins) > 1 else 0.0
    print(f"(a) built-in / reference throughput, medians: {ratio:.3f} (want >= 0.95)")
    print(f"(b) worst |client - server| / server count: {100 * max(agreement):.3f}% "
          f"(want <= 1%)")
    print(f"(c) built-in throughput CV over {len(builtins)} measurements: {100 * cv:.2f}% "
          f"(want <= 5%); median client busy {statistics.median(overhead):.0f}%")
    print(json.dumps({"client_ratio": round(ratio, 4),
                      "count_agreement": round(max(agreement), 6),
                      "throughput_cv": round(cv, 4)}))


if __name__ == "__main__":
    main()
