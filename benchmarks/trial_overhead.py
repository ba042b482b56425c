"""What one trial costs before any measurement: from "trial config written" to "READY and
the first inference answered", per way of getting a config to Triton.

    python benchmarks/trial_overhead.py [--trials 9] [--docker-trials 5] [--no-docker]

Modes, all with the quickstart model (projects/quickstart) served through the onnxruntime
shim, configs alternating between 1 and 2 instances and different max_batch_size:

- local restart: the wheel's tritonserver is stopped and started on each trial's repository
  (the stop of the previous trial's server is included);
- local reload: one server in explicit mode; each trial is a load with a config override
  (local restart and reload take turns trial by trial, so both see the same machine load);
- docker restart: as local restart, in a container of the local test image (the Docker daemon
  is started as tests do; null where it cannot start).

The first trial of each mode is a warm-up and not counted. Medians, because the machine may
be shared. The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests.support.docker_host

from tracker.spec import ServerSection, ensure_model, load_spec  # noqa: E402
from tracker.triton import model_config  # noqa: E402
from tracker.triton.formats import model_info  # noqa: E402
from tracker.triton.repository import write_repository  # noqa: E402
from tracker.triton.server.base import TritonServer  # noqa: E402
from tracker.triton.server.docker import DockerTritonServer  # noqa: E402
from tracker.triton.server.local import LocalTritonServer  # noqa: E402

CONFIGS = [{"instance_group.count": 1 + i % 2, "max_batch_size": 4 + 4 * (i % 3)}
           for i in range(32)]


def quickstart() -> model_config.ModelInfo:
    """The quickstart model, built as a study builds it (its spec's model.build)."""
    spec = load_spec(ROOT / "projects" / "quickstart" / "study.yaml")
    ensure_model(spec)
    return model_info(spec.model)


def run(modes: dict[str, Callable[[], TritonServer]], info: model_config.ModelInfo, workdir: Path,
        trials: int) -> dict[str, list[float]]:
    """Seconds per trial (warm-up excluded) for each mode. The modes take turns trial by
    trial, so a change in the machine's load hits them alike."""
    times: dict[str, list[float]] = {label: [] for label in modes}
    servers = {label: make() for label, make in modes.items()}
    try:
        for i in range(trials + 1):
            for label, server in servers.items():
                cfg = model_config.apply(info, CONFIGS[i % len(CONFIGS)], supports_batching=True)
                folder = workdir / label.replace(" ", "-") / "repo"  # no spaces: servers.md
                repo = write_repository(folder, info, cfg, serving="python", ort_threads=(1, 1))
                t0 = time.perf_counter()  # the trial config is written
                server.apply_trial(repo)
                with server.client() as client:
                    client.infer_once(repo.model_name, repo.served_config)
                elapsed = time.perf_counter() - t0
                if i:
                    times[label].append(elapsed)
                print(f"  {label:15s} trial {i:2d}{' (warm-up)' if not i else '':10s} "
                      f"{elapsed:6.3f} s", flush=True)
    finally:
        for server in servers.values():
            server.stop()
    return times


def docker_image() -> tuple[str, object] | None:
    """The test image tag and the daemon handle, or None (with the reason printed)."""
    from tests.support import docker_host

    try:
        daemon = docker_host.start_daemon()
    except docker_host.DockerUnavailable as exc:
        print(f"docker: skipped ({exc})")
        return None
    import docker

    client = docker.from_env(timeout=120)
    try:
        tag = docker_host.ensure_image(client)
    finally:
        client.close()
    return tag, daemon


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=9, help="timed trials per local mode")
    parser.add_argument("--docker-trials", type=int, default=5)
    parser.add_argument("--no-docker", action="store_true")
    args = parser.parse_args()
    print(f"trial overhead on {os.cpu_count()} CPU cores; quickstart model, python-backend "
          "shim; medians of the timed trials")
    with tempfile.TemporaryDirectory(prefix="trial-overhead-") as tmp:
        workdir = Path(tmp)
        info = quickstart()
        local = run({"local restart": LocalTritonServer,
                     "local reload": lambda: LocalTritonServer(ServerSection(strategy="reload"))},
                    info, workdir, args.trials)
        restart, reload = local["local restart"], local["local reload"]
        docker_s = None
        found = None if args.no_docker else docker_image()
        if found is not None:
            tag, daemon = found
            try:
                made = {"docker restart": lambda: DockerTritonServer(ServerSection(image=tag))}
                times = run(made, info, workdir, args.docker_trials)["docker restart"]
                docker_s = statistics.median(times)
            finally:
                daemon.stop()  # type: ignore[attr-defined]
    restart_s, reload_s = statistics.median(restart), statistics.median(reload)
    print(f"local restart  median {restart_s:.3f} s  (min {min(restart):.3f}, "
          f"max {max(restart):.3f})")
    print(f"local reload   median {reload_s:.3f} s  (min {min(reload):.3f}, "
          f"max {max(reload):.3f})")
    if docker_s is not None:
        print(f"docker restart median {docker_s:.3f} s")
    print(f"restart / reload: {restart_s / reload_s:.1f}x")
    print(json.dumps({"local_restart_s": round(restart_s, 4), "local_reload_s": round(reload_s, 4),
                      "docker_restart_s": None if docker_s is None else round(docker_s, 4),
                      "restart_over_reload": round(restart_s / reload_s, 2)}))


if __name__ == "__main__":
    main()
