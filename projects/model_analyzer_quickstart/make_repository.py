"""Model Analyzer's quick-start model repository, written here: ``add`` and ``sub`` (Python
backend, KIND_CPU, INPUT0/INPUT1 -> OUTPUT, dims [4], no batching), ``ensemble_add_sub`` (add
and sub in one request) and ``add_sub`` (libtorch: served only in docker or remote mode).

    python make_repository.py OUTPUT_FOLDER
"""

from __future__ import annotations

import sys
from pathlib import Path

_CONFIG = """name: "{name}"
backend: "python"

input [
  {{
    name: "INPUT0"
    data_type: TYPE_FP32
    dims: [ 4 ]
  }}
]
input [
  {{
    name: "INPUT1"
    data_type: TYPE_FP32
    dims: [ 4 ]
  }}
]
output [
  {{
    name: "OUTPUT"
    data_type: TYPE_FP32
    dims: [ 4 ]
  }}
]

instance_group [{{ kind: KIND_CPU }}]
"""

_MODEL = '''import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """OUTPUT = INPUT0 {op} INPUT1."""

    def execute(self, requests):
        responses = []
        for request in requests:
            in0 = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            in1 = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            out = pb_utils.Tensor("OUTPUT", (in0 {op} in1).astype(np.float32))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses
'''

_ENSEMBLE = """name: "ensemble_add_sub"
platform: "ensemble"
input [
  { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
ensemble_scheduling {
  step [
    {
      model_name: "add"
      model_version: -1
      input_map { key: "INPUT0" value: "INPUT0" }
      input_map { key: "INPUT1" value: "INPUT1" }
      output_map { key: "OUTPUT" value: "OUTPUT0" }
    },
    {
      model_name: "sub"
      model_version: -1
      input_map { key: "INPUT0" value: "INPUT0" }
      input_map { key: "INPUT1" value: "INPUT1" }
      output_map { key: "OUTPUT" value: "OUTPUT1" }
    }
  ]
}
"""

_LIBTORCH = """name: "add_sub"
platform: "pytorch_libtorch"
max_batch_size: 8
input [
  { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 16 ] },
  { name: "INPUT__1" data_type: TYPE_FP32 dims: [ 16 ] }
]
output [
  { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 16 ] },
  { name: "OUTPUT__1" data_type: TYPE_FP32 dims: [ 16 ] }
]
instance_group [{ kind: KIND_GPU }]
"""


def write(root: Path) -> Path:
    """The repository under ``root``; returns it."""
    for name, op in (("add", "+"), ("sub", "-")):
        (root / name / "1").mkdir(parents=True, exist_ok=True)
        (root / name / "config.pbtxt").write_text(_CONFIG.format(name=name))
        (root / name / "1" / "model.py").write_text(_MODEL.format(op=op))
    (root / "ensemble_add_sub" / "1").mkdir(parents=True, exist_ok=True)
    (root / "ensemble_add_sub" / "config.pbtxt").write_text(_ENSEMBLE)
    (root / "add_sub" / "1").mkdir(parents=True, exist_ok=True)
    (root / "add_sub" / "config.pbtxt").write_text(_LIBTORCH)
    return root


if __name__ == "__main__":
    write(Path(sys.argv[1] if len(sys.argv) > 1 else "quick-start"))
