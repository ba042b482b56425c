"""Record a landscape shaped like Model Analyzer's default automatic search space.

    nice -n 5 .venv/bin/python benchmarks/record_ma_landscape.py [--out CSV] [--counts 1,2]

Every point of instance_group.count 1-5 x max_batch_size 1..128 (powers of two) x concurrency
1..1024 (powers of two), dynamic batching on (no queue delay: Model Analyzer's default), for
the quickstart model on the embedded Triton (benchmarks/data/ma_landscape_study.yaml): one
server start per configuration, then every concurrency level measured with the tuner's own
level runner (tracker.measure.level.measure_level), with no early stop, so that the replay in
benchmarks/search_efficiency.py can answer any search strategy's request. Levels from
concurrency 2 up are driven by ``load.processes`` load processes (concurrency 1 cannot be
split): one Python client cannot keep 1024 requests in flight and still time them.
``client_limited`` marks a level where a load process was busy over the tuner's warning
threshold (the client, not the server, may have set the throughput).

The CSV (benchmarks/data/ma_landscape_quickstart.csv) starts with comment lines holding the
command, the date, the machine (cores, ``uptime`` before and after) and the wall time. Rows
are written as they are measured, so an interrupted recording keeps what it measured.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import datetime
import os
import platform
import random
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, TextIO

HERE = Path(__file__).resolve().parent
SPEC = HERE / "data" / "ma_landscape_study.yaml"
OUT = HERE / "data" / "ma_landscape_quickstart.csv"
COUNTS = (1, 2, 3, 4, 5)
BATCHES = (1, 2, 4, 8, 16, 32, 64, 128)
MULTI_FROM = 2           # concurrency from which load.processes processes drive the load
COLUMNS = ("instance_group.count", "max_batch_size", "concurrency", "perf_throughput",
           "perf_latency_p50", "perf_latency_p99", "stable", "valid", "measurement_s",
           "windows", "processes", "client_overhead_pct", "client_limited", "errors")


def _uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True,
                              check=False).stdout.strip()
    except OSError:
        return "uptime unavailable"


async def _measure_config(server: Any, repo: Any, spec: Any, levels: list[int],
                          writer: Any, fh: TextIO, key: tuple[int, int],
                          multi_from: int) -> None:
    from tracker.measure.inputs import input_specs, make_samples
    from tracker.measure.kinds import Concurrency
    from tracker.measure.level import measure_level
    from tracker.measure.loadgen import Level, LocalLoad
    from tracker.measure.monitor_sampler import Sampler
    from tracker.measure.procs import InProcessLoad, ProcessLoad
    from tracker.measure.sweep import settings_from
    from tracker.measure.transport import make_transport

    load = spec.load
    url = server.endpoints.grpc
    samples = make_samples(repo.served_config, load.batch_size, load.input_data)
    datatypes = {s.name: s.datatype for s in input_specs(repo.served_config)}
    transport = make_transport("grpc", url, repo.model_name, load.request_timeout_s)
    payloads = transport.payloads(samples, datatypes)
    single = InProcessLoad(LocalLoad(transport, payloads, (Concurrency(),)))
    multi: ProcessLoad | None = None
    sampler = Sampler(())
    try:
        for c in levels:
            procs = load.processes if c >= multi_from else 1
            if procs > 1 and multi is None:
                multi = ProcessLoad(procs, "grpc", url, repo.model_name,
                                    load.request_timeout_s, payloads, (Concurrency(),))
                await multi.open()
            driver = multi if procs > 1 and multi is not None else single
            settings = settings_from(load)
            settings = type(settings)(windows=settings.windows,
                                      warmup_requests=settings.warmup_requests,
                                      timeout_s=settings.timeout_s,
                                      batch_size=settings.batch_size,
                                      processes=procs, kinds=(Concurrency(),))
            m = await measure_level(driver, Level(concurrency=c), settings, transport.stats,
                                    sampler)
            overhead = m.client_overhead_pct
            limited = overhead is not None and overhead > settings.overhead_warn_pct
            writer.writerow([*key, c, f"{m.throughput:.2f}", _fmt(m.latency_p50_ms),
                             _fmt(m.latency_p99_ms), str(m.stable).lower(),
                             str(m.valid).lower(), f"{m.duration_s:.3f}", m.windows, procs,
                             _fmt(overhead), str(limited).lower(), m.errors])
            fh.flush()
            print(f"  count={key[0]} mbs={key[1]:<3} c={c:<4} {m.throughput:9.1f} infer/s  "
                  f"p99 {_fmt(m.latency_p99_ms):>8} ms  stable={m.stable}  "
                  f"{m.duration_s:.2f} s  procs={procs} busy={_fmt(overhead)}", flush=True)
    finally:
        if multi is not None:
            await multi.close()
        await transport.close()


def _fmt(v: float | None) -> str:
    return "" if v is None else f"{v:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--spec", type=Path, default=SPEC,
                        help="the study whose model, server and load are recorded "
                             "(benchmarks/data/ma_landscape_retune_study.yaml: the changed model)")
    parser.add_argument("--counts", default=",".join(map(str, COUNTS)))
    parser.add_argument("--batches", default=",".join(map(str, BATCHES)))
    parser.add_argument("--shuffle", type=int, default=None, metavar="SEED",
                        help="measure the configurations in a seeded random order (a second "
                             "pass whose load drift does not follow the grid order)")
    parser.add_argument("--multi-from", type=int, default=MULTI_FROM,
                        help="lowest concurrency driven by load.processes processes")
    args = parser.parse_args()
    counts = [int(x) for x in args.counts.split(",")]
    batches = [int(x) for x in args.batches.split(",")]

    from tracker.spec import ensure_model, load_spec
    from tracker.triton import model_config
    from tracker.triton.formats import model_info
    from tracker.triton.repository import write_repository
    from tracker.triton.server.modes import make_server

    spec = load_spec(args.spec)
    ensure_model(spec)
    info = model_info(spec.model)
    levels = spec.load.concurrency_levels()
    started = datetime.datetime.now(datetime.timezone.utc)
    t0 = time.monotonic()
    load_before = _uptime()
    command = " ".join(["nice -n", str(os.getpriority(os.PRIO_PROCESS, 0)), ".venv/bin/python",
                        "benchmarks/record_ma_landscape.py",
                        *map(shlex.quote, sys.argv[1:])])
    server = make_server(spec.server)
    work = Path(tempfile.mkdtemp(prefix="ma-landscape-"))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", newline="") as fh:
        fh.write(f"# recorded {started:%Y-%m-%d %H:%M} UTC with: {command}\n")
        fh.write(f"# spec: benchmarks/data/{args.spec.name} (window {spec.load.window_ms} ms, "
                 f"max_tries {spec.load.max_tries}, warm-up {spec.load.warmup_requests} "
                 f"requests, {spec.load.processes} load processes from concurrency "
                 f"{args.multi_from}); dynamic batching on, no queue delay\n")
        fh.write(f"# machine: {platform.machine()} {os.cpu_count()} cores, "
                 f"{platform.system()} {platform.release()}, shared with other jobs; "
                 f"uptime before: {load_before}\n")
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(COLUMNS)
        order = [(count, mbs) for count in counts for mbs in batches]
        if args.shuffle is not None:
            random.Random(args.shuffle).shuffle(order)
        try:
            for count, mbs in order:
                cfg = model_config.apply(info, {
                    "instance_group.count": count, "max_batch_size": mbs,
                    "dynamic_batching.max_queue_delay_microseconds": 0})
                repo = write_repository(work / f"c{count}-b{mbs}", info, cfg, serving="python")
                server.apply_trial(repo)
                asyncio.run(_measure_config(server, repo, spec, levels, writer, fh,
                                            (count, mbs), args.multi_from))
        finally:
            server.stop()
            shutil.rmtree(work, ignore_errors=True)
            wall = time.monotonic() - t0
            fh.write(f"# wall {wall:.0f} s; uptime after: {_uptime()}\n")
    print(f"wrote {args.out} in {wall:.0f} s")


if __name__ == "__main__":
    main()
