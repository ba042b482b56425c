"""Does the built-in client keep up with a C client? One local Triton, in one run:

    .venv/bin/python benchmarks/client_vs_h2load.py [--spec projects/quickstart/study.yaml]
        [--concurrency 16] [--rounds 3] [--seconds 8] [--processes 1] [--profile]

h2load (Debian ``nghttp2-client``) drives Triton's gRPC ``ModelInfer`` over one HTTP/2
connection with CONCURRENCY streams in flight (``-c 1 -m C``), posting a pre-serialized request
(the 5-byte gRPC prefix + the ``ModelInferRequest`` the built-in client sends) with the headers
``content-type: application/grpc`` and ``te: trailers``. The built-in client runs the same
CONCURRENCY over its own channel (``--processes`` load processes, as ``load.processes``), once
with its usual requests and once with ``load.shared_memory: system``. Runs alternate on the same
server: h2load, built-in, built-in+shm, h2load, ...; every figure is the server's own count of
successful inferences over a timed span after a 1 s warm-up (the same counter for all clients),
and each built-in run is compared with the mean of the h2load runs around it. Client CPU time
(user + system of this process and its load processes, or of h2load) per request is printed
for each, with the load average. ``--profile`` adds one untimed built-in run under cProfile
and prints where the client's time goes. Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import io
import json
import math
import os
import pstats
import resource
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parent.parent
WARMUP_S = 1.0


def _own_cpu_s() -> float:
    """CPU seconds of this process and its load processes (not the server it started)."""
    me = psutil.Process()
    total = sum(me.cpu_times()[:2])
    for child in me.children(recursive=False):
        with contextlib.suppress(psutil.Error):
            if child.name() != "tritonserver":
                total += sum(child.cpu_times()[:2])
    return total


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


async def builtin(ep: Any, model: str, payloads: list[Any], concurrency: int, seconds: float,
                  processes: int) -> tuple[float, float]:
    """(server infer/s, client CPU s) of the built-in load over ``seconds`` after warm-up."""
    from tracker.measure.kinds import Concurrency
    from tracker.measure.loadgen import Level, LocalLoad
    from tracker.measure.procs import InProcessLoad, Load, ProcessLoad
    from tracker.measure.transport import make_transport

    transport = make_transport("grpc", ep.grpc, model, 30.0)
    load: Load
    if processes > 1:
        procs = ProcessLoad(processes, "grpc", ep.grpc, model, 30.0, payloads, (Concurrency(),))
        await procs.open()
        load = procs
    else:
        load = InProcessLoad(LocalLoad(transport, payloads, (Concurrency(),)))
    try:
        await load.start(Level(concurrency=concurrency))
        await asyncio.sleep(WARMUP_S)
        s1, c1, t1 = await transport.stats(), _own_cpu_s(), time.perf_counter()
        await asyncio.sleep(seconds)
        s2, c2, t2 = await transport.stats(), _own_cpu_s(), time.perf_counter()
        await load.stop()
    finally:
        await load.close()
        await transport.close()
    return (s2.success_count - s1.success_count) / (t2 - t1), c2 - c1


def h2load(ep: Any, model: str, body: Path, concurrency: int, seconds: float) -> tuple[float,
                                                                                        float]:
    """(server infer/s, h2load CPU s) over ``seconds`` after the same warm-up."""
    from tracker.triton.client import TritonClient

    url = f"http://{ep.grpc}/inference.GRPCInferenceService/ModelInfer"
    cmd = ["h2load", url, "-d", str(body), "-H", "content-type: application/grpc",
           "-H", "te: trailers", "-c", "1", "-m", str(concurrency),
           "-D", str(math.ceil(WARMUP_S + seconds + 0.5))]
    cpu0 = _children_cpu_s()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    with TritonClient(ep) as client:
        time.sleep(WARMUP_S)
        s1, t1 = client.statistics(model), time.perf_counter()
        time.sleep(seconds)
        s2, t2 = client.statistics(model), time.perf_counter()
    out, _ = proc.communicate(timeout=seconds + 60)
    if proc.returncode != 0 or s2.success_count == s1.success_count:
        sys.exit(f"h2load failed (status {proc.returncode}):\n{out[-2000:]}")
    return (s2.success_count - s1.success_count) / (t2 - t1), _children_cpu_s() - cpu0


def profile_builtin(ep: Any, model: str, payloads: list[Any], concurrency: int) -> str:
    prof = cProfile.Profile()
    prof.enable()
    asyncio.run(builtin(ep, model, payloads, concurrency, 3.0, 1))
    prof.disable()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(12)
    return "\n".join(line for line in text.getvalue().splitlines()[4:] if line.strip())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", default=str(ROOT / "projects" / "quickstart" / "study.yaml"))
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    if shutil.which("h2load") is None:
        sys.exit("h2load is not installed (Debian: apt-get install nghttp2-client)")

    from tracker.measure.inputs import input_specs, make_samples
    from tracker.measure.shm import leftovers, system_regions
    from tracker.measure.transport import grpc_payloads
    from tracker.spec import ensure_model, load_spec
    from tracker.triton.client import TritonClient
    from tracker.triton.formats import model_info
    from tracker.triton.repository import write_repository
    from tracker.triton.server.modes import make_server

    spec = load_spec(args.spec)
    ensure_model(spec)
    info = model_info(spec.model)
    c = args.concurrency
    fig: dict[str, list[float]] = {k: [] for k in ("h2", "plain", "shm", "h2_cpu", "plain_cpu",
                                                   "shm_cpu")}
    with tempfile.TemporaryDirectory(prefix="h2load-bench-") as tmp, make_server(spec.server) \
            as server:
        repo = write_repository(Path(tmp), info, info.config, serving="python")
        server.apply_trial(repo)
        ep, model, cfg = server.endpoints, repo.model_name, repo.served_config
        samples = make_samples(cfg, 1, None)
        types = {s.name: s.datatype for s in input_specs(cfg)}
        plain = grpc_payloads(model, samples, types)
        body = Path(tmp) / "request.bin"
        body.write_bytes(b"\x00" + struct.pack(">I", len(plain[0])) + plain[0])
        print(f"{model} (default config) on the wheel's Triton, concurrency {c}, "
              f"{args.rounds} rounds of {args.seconds:g} s, {args.processes} load process(es); "
              f"request {len(plain[0]):,} bytes; load average {os.getloadavg()[0]:.1f}")
        with TritonClient(ep) as client, system_regions(client, "grpc", model, cfg, samples,
                                                        types, 1) as shm_payloads:
            runs = [h2load(ep, model, body, c, args.seconds)]
            for r in range(args.rounds):
                p = asyncio.run(builtin(ep, model, plain, c, args.seconds, args.processes))
                s = asyncio.run(builtin(ep, model, shm_payloads, c, args.seconds,
                                        args.processes))
                runs.append(h2load(ep, model, body, c, args.seconds))
                h2 = (runs[-2][0] + runs[-1][0]) / 2
                for key, got in (("plain", p), ("shm", s)):
                    fig[key].append(got[0] / h2)
                    fig[f"{key}_cpu"].append(1e6 * got[1] / (got[0] * args.seconds))
                fig["h2"].append(h2)
                h2_span = math.ceil(WARMUP_S + args.seconds + 0.5)  # h2load's whole run
                fig["h2_cpu"].append(1e6 * runs[-1][1] / (runs[-1][0] * h2_span))
                print(f"round {r + 1}: h2load {h2:8.1f} infer/s | built-in {p[0]:8.1f} "
                      f"({p[0] / h2:.3f}) | built-in+shm {s[0]:8.1f} ({s[0] / h2:.3f}) | "
                      f"client CPU us/request: h2load {fig['h2_cpu'][-1]:.0f}, built-in "
                      f"{fig['plain_cpu'][-1]:.0f}, +shm {fig['shm_cpu'][-1]:.0f}")
            if args.profile:
                print("where the built-in client's time goes (cProfile, 3 s, by own time):")
                print(profile_builtin(ep, model, plain, c))
        print(f"load average after: {os.getloadavg()[0]:.1f}; shared-memory regions left: "
              f"{leftovers() or 'none'}")
    med = {k: statistics.median(v) for k, v in fig.items()}
    print(f"built-in / h2load at concurrency {c}: {med['plain']:.3f} (shm {med['shm']:.3f}; "
          f"rounds {', '.join(f'{x:.3f}' for x in fig['plain'])}); want >= 0.95")
    print(f"client CPU per request (median): h2load {med['h2_cpu']:.0f} us, built-in "
          f"{med['plain_cpu']:.0f} us, built-in + shared memory {med['shm_cpu']:.0f} us")
    print(json.dumps({"ratio": round(med["plain"], 4), "ratio_shm": round(med["shm"], 4),
                      "h2load_infer_s": round(med["h2"], 1),
                      "cpu_us_per_request": {k: round(med[f"{k}_cpu"], 1)
                                             for k in ("h2", "plain", "shm")}}))


if __name__ == "__main__":
    main()
