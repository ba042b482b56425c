"""What a version switch costs the clients of a served model, and how long it takes.

    .venv/bin/python benchmarks/deploy_switch.py [--switches 4] [--clients 2]

Builds the quickstart model, logs it as MLflow models with two alternating configs in a
temporary sqlite registry, starts the wheel's Triton in explicit model control mode, deploys
v1, then, while CLIENTS threads send requests without a version in a closed loop, deploys
v2..vN one after the other through the `triton` target (load beside, check, drop the old) and
finally a version whose config Triton refuses (rollback). Prints, per switch and as medians:
the switch's wall time, requests served and failed during it, and client latency p99 during
switches vs. steady state. Last line: one JSON object. The machine is shared: read medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = [{"max_batch_size": 8, "instance_group.count": 1},
           {"max_batch_size": 32, "instance_group.count": 2,
            "dynamic_batching.max_queue_delay_microseconds": 200}]


def model_dir(root: Path, onnx: Path, values: dict[str, Any], broken: bool = False) -> Path:
    from tracker.triton import model_config
    from tracker.triton.formats.onnx import from_onnx, production_config

    cfg = production_config(model_config.apply(from_onnx(onnx, "quickstart"), values))
    if broken:
        cfg.dynamic_batching.preferred_batch_size.append(cfg.max_batch_size * 4)
    d = root / "quickstart"
    (d / "1").mkdir(parents=True)
    (d / "1" / "model.onnx").write_bytes(onnx.read_bytes())
    (d / "config.pbtxt").write_text(model_config.dumps(cfg))
    return d


class Clients:
    def __init__(self, url: str, n: int) -> None:
        self.url = url
        self.records: list[tuple[float, float, bool]] = []  # (end time, latency s, ok)
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self.loop, daemon=True) for _ in range(n)]

    def loop(self) -> None:
        import tritonclient.grpc as grpcclient

        client = grpcclient.InferenceServerClient(self.url)
        x = grpcclient.InferInput("INPUT0", [1, 64], "FP32")
        x.set_data_from_numpy(np.ones((1, 64), np.float32))
        deadline = time.monotonic() + 600
        while not self.stop.is_set() and time.monotonic() < deadline:
            t0 = time.monotonic()
            try:
                ok = client.infer("quickstart", [x], client_timeout=10).as_numpy(
                    "OUTPUT0") is not None
            except Exception:
                ok = False
            t1 = time.monotonic()
            self.records.append((t1, t1 - t0, ok))
        client.close()

    def window(self, start: float, end: float) -> list[tuple[float, float, bool]]:
        return [r for r in list(self.records) if start <= r[0] <= end]


def p99(latencies: list[float]) -> float:
    return float(np.percentile(latencies, 99) * 1000) if latencies else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--switches", type=int, default=4)
    parser.add_argument("--clients", type=int, default=2)
    args = parser.parse_args()
    os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] = "false"
    with tempfile.TemporaryDirectory(prefix="deploy-switch-") as tmp_name:
        tmp = Path(tmp_name)
        os.chdir(tmp)
        uri = f"sqlite:///{tmp / 'mlflow.db'}"
        os.environ["MLFLOW_TRACKING_URI"] = os.environ["MLFLOW_REGISTRY_URI"] = uri
        import mlflow

        from tracker.deploy import service
        from tracker.deploy.settings import resolve_settings
        from tracker.errors import DeployError
        from tracker.spec import ServerSection
        from tracker.tracking import flavor, registry
        from tracker.triton.server.local import LocalTritonServer

        onnx = tmp / "model.onnx"
        subprocess.run([sys.executable, str(ROOT / "projects/quickstart/make_model.py"),
                        str(onnx)], check=True, capture_output=True)
        client = mlflow.MlflowClient()
        exp = client.create_experiment("switch")
        for i in range(args.switches + 2):
            broken = i == args.switches + 1
            run = client.create_run(exp).info.run_id
            logged = flavor.log_triton_model(
                model_dir(tmp / f"m{i}", onnx, CONFIGS[i % 2], broken), run)
            registry.register_version(client, "quickstart", registry.VersionRequest(
                source=logged.model_uri, run_id=run, model_id=logged.model_id))
        repo = tmp / "serving"
        repo.mkdir()
        rows: list[dict[str, float]] = []
        with LocalTritonServer(ServerSection(startup_timeout_s=60)) as server:
            server.start(repo, explicit=True)
            settings = resolve_settings("triton", {"url": server.endpoints.grpc,
                                                   "repository": str(repo),
                                                   "log": str(server.log_path)})
            service.deploy(settings, "quickstart", "models:/quickstart/1")
            clients = Clients(server.endpoints.grpc, args.clients)
            for t in clients.threads:
                t.start()
            time.sleep(2.0)
            steady_end = time.monotonic()
            steady = clients.window(steady_end - 1.5, steady_end)
            for version in range(2, args.switches + 3):
                start = time.monotonic()
                try:
                    service.deploy(settings, "quickstart", f"models:/quickstart/{version}")
                    outcome = "switched"
                except DeployError:
                    outcome = "rolled back"
                end = time.monotonic()
                during = clients.window(start, end)
                row = {"version": version, "seconds": end - start,
                       "requests": len(during), "failed": sum(not r[2] for r in during),
                       "p99_ms": p99([r[1] for r in during]),
                       "rolled_back": float(outcome == "rolled back")}
                rows.append(row)
                print(f"v{version}: {outcome} in {row['seconds']:.2f} s; {row['requests']} "
                      f"requests during it, {row['failed']} failed, p99 {row['p99_ms']:.1f} ms")
                time.sleep(1.0)
            clients.stop.set()
            for t in clients.threads:
                t.join(timeout=15)
        switched = [r for r in rows if not r["rolled_back"]]
        result = {
            "switches": len(switched),
            "switch_s_median": statistics.median(r["seconds"] for r in switched),
            "rollback_s": next((r["seconds"] for r in rows if r["rolled_back"]), None),
            "failed_requests": int(sum(r["failed"] for r in rows)),
            "requests_during_switches": int(sum(r["requests"] for r in rows)),
            "p99_ms_steady": p99([r[1] for r in steady]),
            "p99_ms_during_switch_median": statistics.median(r["p99_ms"] for r in switched),
            "clients": args.clients,
        }
        print(f"median switch {result['switch_s_median']:.2f} s, rollback "
              f"{result['rollback_s'] or float('nan'):.2f} s, {result['failed_requests']} failed "
              f"of {result['requests_during_switches']} requests during switches; p99 "
              f"{result['p99_ms_steady']:.1f} ms steady vs "
              f"{result['p99_ms_during_switch_median']:.1f} ms (median) during a switch")
        print(json.dumps(result))


if __name__ == "__main__":
    main()
