#!/usr/bin/env bash
# The main command: tune the default project (DenseNet-121, Triton's densenet_onnx guide) on
# the embedded Triton server, tracked in ./mlflow.db. Sets up the venv on first use.
# Extra arguments go to `mlflow run`, e.g. `bash scripts/tune.sh -P n_trials=6` or
# `bash scripts/tune.sh -P spec=projects/quickstart/study.yaml`.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$ROOT"
export MLFLOW_TRACKING_URI="${MLFLOW_TRACKING_URI:-sqlite:///$ROOT/mlflow.db}"
exec mlflow run . --env-manager local --experiment-name "${TRACKER_EXPERIMENT:-densenet_onnx}" \
    -P spec=projects/densenet_onnx/study.yaml "$@"
