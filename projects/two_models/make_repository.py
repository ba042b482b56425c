"""Build the two_models model repository: two independent ONNX models one Triton serves.

    python make_repository.py OUTPUT_DIR

- ``densenet/``   DenseNet-121 with random weights, a fixed batch of 1
  (projects/densenet_onnx/make_model.py): the heavy model, about 50 inferences/s on 2 cores;
- ``quickstart/`` the 64x16 MatMul of projects/quickstart (make_model.py there), dynamic
  batches of up to 32: the light one, thousands of inferences/s.

Neither config sets how many threads onnxruntime takes, so by default each session takes one
per core and the two models fight for the same cores; the study finds how to share them.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
MODELS = {
    "densenet": (HERE.parent / "densenet_onnx" / "make_model.py", "fixed",
                 'name: "densenet"\nbackend: "onnxruntime"\nmax_batch_size: 0\n'),
    "quickstart": (HERE.parent / "quickstart" / "make_model.py", "dynamic",
                   'name: "quickstart"\nbackend: "onnxruntime"\nmax_batch_size: 32\n'
                   "dynamic_batching { }\n"),
}


def build(out: Path) -> None:
    for name, (script, batch, config) in MODELS.items():
        onnx_file = out / name / "1" / "model.onnx"
        onnx_file.parent.mkdir(parents=True)
        subprocess.run([sys.executable, str(script), str(onnx_file), "--batch", batch],
                       check=True)
        (out / name / "config.pbtxt").write_text(config)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    build(Path(sys.argv[1]))
