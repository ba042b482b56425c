"""How fast the sample DenseNet-121 runs in plain onnxruntime on this machine (no Triton).

    .venv/bin/python benchmarks/densenet_ort.py [--runs 30]

Builds projects/densenet_onnx's model (both batch variants) in a temporary folder, then times
`InferenceSession.run` at batch 1 with 1 and 2 intra-op threads and onnxruntime's default, and
at batch 4 (dynamic variant). Prints medians (the machine is shared and noisy) and, as the last
line, one JSON object. This is the ceiling a Triton trial on the same cores can approach.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

PROJECT = Path(__file__).resolve().parent.parent / "projects" / "densenet_onnx"


def build(out: Path) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, str(PROJECT / "make_model.py"), str(out)], check=True,
                   capture_output=True)
    return time.perf_counter() - start


def time_runs(path: Path, batch: int, threads: int, runs: int) -> float:
    """Median seconds per `run` call."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    feed = {"data_0": np.random.default_rng(0).standard_normal(
        (batch, 3, 224, 224)).astype(np.float32)}
    for _ in range(3):
        session.run(None, feed)
    seconds = []
    for _ in range(runs):
        start = time.perf_counter()
        session.run(None, feed)
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    result: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        fixed, dynamic = Path(tmp) / "model.onnx", Path(tmp) / "model_dynamic.onnx"
        result["build_s"] = round(build(fixed), 2)
        build(dynamic)
        print(f"built DenseNet-121 in {result['build_s']:.2f} s")
        for threads in (1, 2, 0):
            median = time_runs(fixed, 1, threads, args.runs)
            label = f"threads_{threads or 'default'}"
            result[f"batch1_{label}_infer_per_s"] = round(1 / median, 1)
            result[f"batch1_{label}_ms"] = round(median * 1000, 1)
            print(f"batch 1, intra-op threads {threads or 'default'}: median "
                  f"{median * 1000:.1f} ms = {1 / median:.1f} infer/s")
        median = time_runs(dynamic, 4, 0, max(args.runs // 2, 5))
        result["batch4_threads_default_infer_per_s"] = round(4 / median, 1)
        print(f"batch 4, default threads: median {median * 1000:.1f} ms = "
              f"{4 / median:.1f} infer/s")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
