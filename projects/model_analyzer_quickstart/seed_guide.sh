#!/usr/bin/env bash
# Triton's performance-tuning guide ("Deploying your trained model using Triton") end to end,
# its measuring commands with the program name changed: the densenet_onnx model repository,
# `perf_analyzer -m densenet_onnx --concurrency-range 1:4`, then `model-analyzer profile
# --model-repository=models --profile-models=densenet_onnx --output-model-repository-path=results`.
# DenseNet-121 comes from projects/densenet_onnx (random weights, the guide's input and
# output). About 6 minutes on 2 CPU cores. Run from anywhere:
#   bash projects/model_analyzer_quickstart/seed_guide.sh
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/../../scripts/env.sh"
cd "$here"
export MLFLOW_TRACKING_URI="${MLFLOW_TRACKING_URI:-sqlite:///$here/mlflow.db}"

mkdir -p models/densenet_onnx/1
[ -f models/densenet_onnx/1/model.onnx ] ||
    python ../densenet_onnx/make_model.py models/densenet_onnx/1/model.onnx
cat > models/densenet_onnx/config.pbtxt <<'PBTXT'
name: "densenet_onnx"
backend: "onnxruntime"
max_batch_size: 0
input: [
  {
    name: "data_0",
    data_type: TYPE_FP32,
    dims: [ 1, 3, 224, 224]
  }
]
output: [
  {
    name: "prob_1",
    data_type: TYPE_FP32,
    dims: [ 1, 1000, 1, 1 ]
  }
]
PBTXT

# The guide runs perf_analyzer against `tritonserver --model-repository=/mnt/models`. The
# embedded Triton has no onnxruntime backend, so here the command adds Perf Analyzer's
# in-process flags: the tracker serves the repository itself (the ONNX model through its
# onnxruntime shim). Against a Triton of your own, the guide's command runs as it is.
tracker perf-analyzer -m densenet_onnx --concurrency-range 1:4 \
    --service-kind triton_c_api --model-repository models

rm -rf results
tracker model-analyzer profile --model-repository=models --profile-models=densenet_onnx \
    --output-model-repository-path=results
