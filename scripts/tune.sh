#!/usr/bin/env bash
# The main command: tune the default project (DenseNet-121, Triton's densenet_onnx guide) on
# the embedded Triton server, tracked in ./mlflow.db. Sets up the venv on first use.
# Extra arguments go to `mlflow run`, e.g. `bash scripts/tune.sh -P n_trials=6` or
# `bash scripts/tune.sh -P spec=projects/quickstart/study.yaml`.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$ROOT"
export MLFLOW_TRACKING_URI="${MLFLOW_TRACKING_URI:-sqlite:///$ROOT/mlflow.db}"
spec=""
for arg in "$@"; do
    case "$arg" in spec=*) spec="${arg#spec=}" ;; esac
done
default=()
if [ -z "$spec" ]; then
    spec=projects/densenet_onnx/study.yaml
    default=(-P "spec=$spec")
fi
# `mlflow run` creates the study's parent run before the spec is read: give it the spec's
# experiment (mlflow.experiment, else the model name) so both land in the same place.
experiment="${TRACKER_EXPERIMENT:-$(python - "$spec" <<'PY' 2>/dev/null || true
import sys
from tracker.spec import load_spec
spec = load_spec(sys.argv[1])
print(spec.experiment_name)
PY
)}"
exec mlflow run . --env-manager local --experiment-name "${experiment:-densenet_onnx}" \
    "${default[@]}" "$@"
