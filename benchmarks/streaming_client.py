"""Does the built-in streaming client measure what tritonclient measures, and keep as many
streams open? One local Triton serving projects/streaming_lm's tiny_lm (decoupled, one token
per response; 2 instances, max_batch_size 64 so the server holds many streams), in one run:

    .venv/bin/python benchmarks/streaming_client.py [--rounds 3] [--concurrency 4]
        [--levels 16,64,256] [--prompt 128] [--tokens 16]

The reference client is minimal: tritonclient's asyncio client, one pre-built pair of
InferInputs, CONCURRENCY coroutines each opening one ``stream_infer`` per request and reading
it to its end; per request it takes the time to the first response, the first-to-last span
over (responses - 1) (the inter-token latency) and the end. Only the requests that ended in
the last ``tail_s`` of its run count, the span a built-in measurement reports (its last 3
windows).

(a) agreement, at CONCURRENCY streams: reference, built-in, reference, ..., reference; each
    built-in median TTFT and ITL is compared with the mean of the reference runs just before
    and after it (a shared machine's drift biases neither side); the figure is the median of
    those per-round ratios (want TTFT within 10%).
(b) capacity, at each of LEVELS: both clients once; "effective streams" = requests/s x mean
    end-to-end latency (Little's law): the number of streams the client really kept open. A
    client sustains a level when it ran error-free and kept >= 90% of the streams open.
Medians and ratios, not single runs. Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
MODEL_DIR = ROOT / "projects" / "streaming_lm" / "tiny_lm"
MODEL = "tiny_lm"
SUSTAINED = 0.9


@dataclass
class Run:
    requests: int
    errors: int
    seconds: float
    ttft_p50_ms: float | None
    itl_p50_ms: float | None
    latency_avg_ms: float | None

    @property
    def rps(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    def streams(self) -> float:
        return self.rps * (self.latency_avg_ms or 0.0) / 1000.0


async def reference(url: str, concurrency: int, seconds: float, prompt: int, tokens: int,
                    tail_s: float = 3.0) -> Run:
    """The minimal tritonclient.grpc.aio streaming loop (see the module's docstring)."""
    import tritonclient.grpc.aio as grpcclient
    from tritonclient.grpc import InferInput

    client = grpcclient.InferenceServerClient(url)
    ids = InferInput("INPUT_IDS", [1, prompt], "INT32")
    ids.set_data_from_numpy(np.arange(prompt, dtype=np.int32).reshape(1, prompt))
    count = InferInput("MAX_TOKENS", [1, 1], "INT32")
    count.set_data_from_numpy(np.array([[tokens]], dtype=np.int32))
    request = {"model_name": MODEL, "inputs": [ids, count]}
    done: list[tuple[float, float, float | None, float]] = []  # end, ttft, itl, e2e
    errors: list[float] = []
    stop = False

    async def one_request() -> None:
        async def requests():  # type: ignore[no-untyped-def]
            yield request

        t0 = time.perf_counter()
        first = last = 0.0
        n = 0
        try:
            async for result, error in client.stream_infer(requests(), stream_timeout=10):
                if error is not None:
                    raise error
                t = time.perf_counter()
                if result.get_response().outputs:
                    first = first or t
                    last, n = t, n + 1
        except Exception:
            errors.append(time.perf_counter())
            return
        end = time.perf_counter()
        done.append((end, first - t0, (last - first) / (n - 1) if n > 1 else None, end - t0))

    async def worker() -> None:
        while not stop:
            await one_request()

    tasks = [asyncio.create_task(worker()) for _ in range(concurrency)]
    await asyncio.sleep(max(seconds - tail_s, 0.5))
    start = time.perf_counter()
    await asyncio.sleep(tail_s)
    end = time.perf_counter()
    stop = True
    await asyncio.gather(*tasks)
    await client.close()
    span = [d for d in done if start <= d[0] < end]
    itls = [d[2] for d in span if d[2] is not None]
    return Run(len(span), sum(1 for e in errors if start <= e < end), end - start,
               statistics.median(d[1] for d in span) * 1000 if span else None,
               statistics.median(itls) * 1000 if itls else None,
               statistics.fmean(d[3] for d in span) * 1000 if span else None)


def builtin(server: object, config: object, concurrency: int, prompt: int, tokens: int,
            windows: int) -> tuple[Run, float]:
    """One built-in level (1 s windows, ``windows`` tries); (its figures, its wall time)."""
    from tracker.measure.sweep import EntryLoad, sweep
    from tracker.spec import LoadSection

    load = LoadSection.model_validate({
        "concurrency": [concurrency], "window_ms": 1000, "max_tries": windows,
        "warmup_requests": min(concurrency, 20), "stability_pct": 10,
        "stream": {"input_tokens": {"input": "INPUT_IDS", "length": prompt},
                   "output_tokens": {"input": "MAX_TOKENS", "length": tokens}, "samples": 1}})
    t0 = time.perf_counter()
    (m,) = sweep(server.endpoints, {MODEL: EntryLoad(config, load)}).measurements  # type: ignore[attr-defined]
    wall = time.perf_counter() - t0
    return Run(m.requests, m.errors, m.duration_s, m.ttft_p50_ms, m.itl_p50_ms,
               m.latency_avg_ms), wall


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--levels", default="16,64,256")
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--tokens", type=int, default=16)
    args = parser.parse_args()
    levels = [int(v) for v in args.levels.split(",")]
    load_start = os.getloadavg()

    from tracker.spec import ServerSection
    from tracker.triton import model_config
    from tracker.triton.server.local import LocalTritonServer

    repo = Path(tempfile.mkdtemp(prefix="streaming-bench-"))
    shutil.copytree(MODEL_DIR, repo / MODEL)
    text = (MODEL_DIR / "config.pbtxt").read_text()
    text = text.replace("max_batch_size: 8", "max_batch_size: 64").replace("count: 1", "count: 2")
    (repo / MODEL / "config.pbtxt").write_text(text)
    config = model_config.parse(text)
    try:
        with LocalTritonServer(ServerSection(startup_timeout_s=120)) as server:
            server.start(repo)
            url = server.endpoints.grpc
            assert url is not None
            c, p, t = args.concurrency, args.prompt, args.tokens
            refs = [asyncio.run(reference(url, c, 6.0, p, t))]
            ours: list[Run] = []
            for _ in range(args.rounds):
                run, wall = builtin(server, config, c, p, t, windows=6)
                ours.append(run)
                refs.append(asyncio.run(reference(url, c, max(wall, 4.0), p, t)))
            rows = []
            for i, run in enumerate(ours):
                before, after = refs[i], refs[i + 1]
                ref_ttft = statistics.fmean(r.ttft_p50_ms or 0 for r in (before, after))
                ref_itl = statistics.fmean(r.itl_p50_ms or 0 for r in (before, after))
                rows.append((run, ref_ttft, ref_itl, _ratio(run.ttft_p50_ms, ref_ttft),
                             _ratio(run.itl_p50_ms, ref_itl)))
            capacity = []
            for level in levels:
                mine, _ = builtin(server, config, level, p, t, windows=4)
                theirs = asyncio.run(reference(url, level, 7.0, p, t))
                capacity.append((level, mine, theirs))
    finally:
        shutil.rmtree(repo, ignore_errors=True)

    print(f"agreement at concurrency {args.concurrency} (prompt {args.prompt} tokens, "
          f"{args.tokens} tokens out; medians per run):")
    print("round  builtin TTFT ms  ref TTFT ms  ratio   builtin ITL ms  ref ITL ms  ratio")
    for i, (run, rt, ri, tr, ir) in enumerate(rows, 1):
        print(f"{i:5d}  {run.ttft_p50_ms or 0:15.2f}  {rt:11.2f}  {tr or 0:5.3f}   "
              f"{run.itl_p50_ms or 0:14.3f}  {ri:10.3f}  {ir or 0:5.3f}")
    ttft_ratio = statistics.median(r[3] for r in rows if r[3] is not None)
    itl_ratio = statistics.median(r[4] for r in rows if r[4] is not None)
    print(f"median TTFT ratio {ttft_ratio:.3f} (want 0.90-1.10), ITL ratio {itl_ratio:.3f}")
    print("\ncapacity: streams kept open (requests/s x mean e2e latency)")
    print("level  builtin req/s  streams  errors   ref req/s  streams  errors")

    def sustained(run: Run, level: int) -> bool:
        return run.errors == 0 and run.requests > 0 and run.streams() >= SUSTAINED * level

    for level, mine, theirs in capacity:
        print(f"{level:5d}  {mine.rps:13.1f}  {mine.streams():7.1f}  {mine.errors:6d}   "
              f"{theirs.rps:9.1f}  {theirs.streams():7.1f}  {theirs.errors:6d}")
    ours_max = max((lv for lv, m, _ in capacity if sustained(m, lv)), default=0)
    ref_max = max((lv for lv, _, r in capacity if sustained(r, lv)), default=0)
    print(f"most concurrent streams sustained: builtin {ours_max}, tritonclient {ref_max}")
    load_end = os.getloadavg()
    print(f"load average (1/5/15 min): start {load_start}, end {load_end}")
    print(json.dumps({
        "ttft_ratio": round(ttft_ratio, 4), "itl_ratio": round(itl_ratio, 4),
        "ttft_within_10pct": abs(ttft_ratio - 1) <= 0.10,
        "builtin_ttft_p50_ms": [round(r[0].ttft_p50_ms or 0, 3) for r in rows],
        "ref_ttft_p50_ms": [round(r.ttft_p50_ms or 0, 3) for r in refs],
        "builtin_itl_p50_ms": [round(r[0].itl_p50_ms or 0, 4) for r in rows],
        "ref_itl_p50_ms": [round(r.itl_p50_ms or 0, 4) for r in refs],
        "capacity": [{"level": lv, "builtin_streams": round(m.streams(), 1),
                      "builtin_rps": round(m.rps, 2), "builtin_errors": m.errors,
                      "ref_streams": round(r.streams(), 1), "ref_rps": round(r.rps, 2),
                      "ref_errors": r.errors} for lv, m, r in capacity],
        "builtin_max_streams": ours_max, "ref_max_streams": ref_max,
        "sustains_at_least_as_many": ours_max >= ref_max,
        "concurrency": args.concurrency, "prompt": args.prompt, "tokens": args.tokens,
        "rounds": args.rounds, "loadavg_start": [round(v, 2) for v in load_start],
        "loadavg_end": [round(v, 2) for v in load_end]}))


if __name__ == "__main__":
    main()
