"""What the output check sees and costs on ONNX Runtime CPU (docs/tuning.md).

    python benchmarks/check_outputs.py [--model quickstart|densenet_onnx] [--out DIR]

Runs a grid study over the knobs that change how onnxruntime computes (instance count, intra-op
thread count and, for a model that batches, max_batch_size with a dynamic batcher) with the
check's tolerances opened wide (rtol = atol = 1), so every trial is measured and its
``check/max_abs_diff`` shows how far the knobs really move the outputs from the default's.
Prints one line per trial and, last, one JSON object: the largest difference, the largest
output value, and the check's share of the study's wall time: ``check_share_pct``, the sum of
``check/seconds`` over the study's wall seconds (everything the check took, the first
inferences of each fresh server included), and ``net_share_pct``, the same less
``check/warmup_s``, the probes that were the sweep's first warm-up requests (the sweep sends
that many fewer: what the check adds to the study).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tracker.invocation.session import TuneOptions  # noqa: E402
from tracker.outputs import stored as check_stored  # noqa: E402
from tracker.outputs import trials as check_outputs  # noqa: E402
from tracker.tuning.tune import tune  # noqa: E402

SPACES = {
    "quickstart": {"instance_group.count": [1, 2], "max_batch_size": [1, 32],
                   "dynamic_batching.max_queue_delay_microseconds": [500],
                   "parameters.intra_op_thread_count": [1, 2]},
    "densenet_onnx": {"instance_group.count": [1, 2],
                      "parameters.intra_op_thread_count": [1, 2]},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(SPACES), default="quickstart")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    folder = args.out or Path(tempfile.mkdtemp(prefix="check-bench-"))
    folder.mkdir(parents=True, exist_ok=True)
    project = ROOT / "projects" / args.model
    doc = yaml.safe_load((project / "study.yaml").read_text())
    doc["model"]["path"] = str(project / doc["model"]["path"])
    doc["model"]["build"] = str(project / doc["model"]["build"])
    space = SPACES[args.model]
    n = 1
    for values in space.values():
        n *= len(values)
    doc["search"] = {"sampler": "grid", "n_trials": n + 1, "seed": 1, "space": space}
    doc["confirm"] = {"enabled": False}
    doc["check"] = {"outputs": {"rtol": 1.0, "atol": 1.0}}
    spec = folder / "study.yaml"
    spec.write_text(yaml.safe_dump(doc))
    os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{folder / 'mlflow.db'}"
    os.chdir(folder)
    result = tune(spec, TuneOptions(bar=False))
    from mlflow import MlflowClient

    client = MlflowClient()
    kids = client.search_runs([result.experiment_id],
                              f"tags.mlflow.parentRunId = '{result.parent_run_id}'")
    diffs, seconds, warm = [], 0.0, 0.0
    for run in kids:
        m = run.data.metrics
        if check_outputs.MAX_DIFF in m:
            diffs.append(m[check_outputs.MAX_DIFF])
            seconds += m.get(check_outputs.SECONDS, 0.0)
            warm += m.get(check_outputs.WARMUP, 0.0)
        print({k: v for k, v in run.data.params.items() if k in space},
              m.get(check_outputs.MAX_DIFF), m.get(check_outputs.SECONDS),
              m.get(check_outputs.WARMUP))
    reference = check_stored.load_reference(client, result.parent_run_id)
    largest = max(float(abs(a).max()) for ans in reference.answers
                  if isinstance(ans, dict) for a in ans.values())
    print(json.dumps({"model": args.model, "trials": len(kids), "max_abs_diff": max(diffs),
                      "largest_output": largest, "check_s": round(seconds, 2),
                      "study_wall_s": round(result.wall_s, 1),
                      "check_share_pct": round(100 * seconds / result.wall_s, 2),
                      "warmup_s": round(warm, 2),
                      "net_share_pct": round(100 * (seconds - warm) / result.wall_s, 2),
                      "load": os.getloadavg()[0]}))


if __name__ == "__main__":
    main()
