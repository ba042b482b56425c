"""How much a study writes to the MLflow artifact store, and how much of it is the model.

    python benchmarks/artifact_store.py projects/densenet_onnx/study.yaml [--n-trials 7]

Runs `tracker tune SPEC` in a fresh folder (fresh sqlite MLflow and Optuna stores beside the
copied project), then reports the size of `mlruns/` (the artifact root), the model file's
size, what is left besides the model, and the largest artifact of each trial run. The last
line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def tree_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spec", type=Path)
    parser.add_argument("--n-trials", type=int, default=None)
    args = parser.parse_args()
    spec = args.spec.resolve()
    with tempfile.TemporaryDirectory(prefix="artifact-store-") as tmp:
        work = Path(tmp) / spec.parent.name
        shutil.copytree(spec.parent, work)
        env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{work / 'mlflow.db'}"}
        cmd = [str(Path(sys.executable).parent / "tracker"), "tune", spec.name, "--no-bar"]
        if args.n_trials is not None:
            cmd += ["--n-trials", str(args.n_trials)]
        started = time.monotonic()
        proc = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"tracker tune failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
        store = tree_bytes(work / "mlruns")
        model = max((p for p in work.glob("*.onnx")), key=lambda p: p.stat().st_size)
        copies = len([p for p in (work / "mlruns").rglob(model.name)])
        runs = [d for d in (work / "mlruns").glob("*/*") if (d / "artifacts").is_dir()]
        per_run = sorted(tree_bytes(d / "artifacts") for d in runs)
        result = {"spec": str(args.spec), "store_bytes": store,
                  "model_bytes": model.stat().st_size, "model_copies": copies,
                  "besides_model_bytes": store - copies * model.stat().st_size,
                  "runs": len(runs), "smallest_run_bytes": per_run[0] if per_run else 0,
                  "median_run_bytes": per_run[len(per_run) // 2] if per_run else 0,
                  "wall_s": round(time.monotonic() - started, 1)}
    print(f"artifact store after the study: {store:,} bytes in {len(runs)} runs")
    print(f"model file {model.name}: {result['model_bytes']:,} bytes, stored {copies} time(s)")
    print(f"besides the model: {result['besides_model_bytes']:,} bytes "
          f"(median run {result['median_run_bytes']:,} bytes)")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
