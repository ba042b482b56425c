"""Build the densenet_pipeline model repository and its request data.

    python make_repository.py OUTPUT_DIR
    python make_repository.py --images images.npz

OUTPUT_DIR becomes a Triton model repository:

- ``preprocess/``  Python backend: ``IMAGE`` (BYTES [1], an encoded PNG or JPEG file) ->
  decoded with PIL, resized to 256 x 256, centre-cropped to 224 x 224, scaled to [0, 1] and
  normalised by ImageNet's mean and standard deviation -> ``PIXELS`` FP32 [3, 224, 224];
- ``densenet/``    DenseNet-121 with random weights (projects/densenet_onnx/make_model.py,
  ``--batch dynamic``): ``data_0`` FP32 [3, 224, 224] -> ``prob_1`` FP32 [1000, 1, 1];
- ``postprocess/`` Python backend: ``prob_1`` -> the top-``TOPK`` classes as BYTES strings
  ``"<score>:<index>:<label>"`` [TOPK] (Triton's classification extension's format);
- ``densenet_pipeline/`` the ensemble chaining them: ``IMAGE`` in, ``LABELS`` out.

``--images`` writes the request data (``load.input_data``, committed as ``images.npz``): eight
real JPEG files of 320 x 240 synthetic pictures (gradients and discs drawn with numpy, the same
bytes for the same seed), as a fixed-width bytes array [8, 1] under the input's name (an .npz
needs no pickle for it; the JSON input format has no binary strings).
"""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
from PIL import Image

HERE = Path(__file__).resolve().parent
DENSENET = HERE.parent / "densenet_onnx" / "make_model.py"
TEMPLATES = HERE / "repository"


def images(count: int = 8, seed: int = 0) -> list[bytes]:
    """``count`` JPEG files of 320 x 240 RGB pictures: a colour gradient with a few discs."""
    rng = np.random.default_rng(seed)
    out = []
    yy, xx = np.mgrid[0:240, 0:320]
    for _ in range(count):
        base = rng.uniform(0, 255, size=3)
        img = np.stack([(xx * rng.uniform(0.2, 0.8) + base[c]) % 256 for c in range(3)], -1)
        for _disc in range(4):
            cy, cx, r = rng.integers(0, 240), rng.integers(0, 320), rng.integers(15, 60)
            img[(yy - cy) ** 2 + (xx - cx) ** 2 < r * r] = rng.uniform(0, 255, size=3)
        buf = io.BytesIO()
        Image.fromarray(img.astype(np.uint8), "RGB").save(buf, format="JPEG", quality=85)
        out.append(buf.getvalue())
    return out


def build(out: Path) -> None:
    shutil.copytree(TEMPLATES, out, ignore=shutil.ignore_patterns("__pycache__"))
    onnx_file = out / "densenet" / "1" / "model.onnx"
    onnx_file.parent.mkdir(parents=True)
    subprocess.run([sys.executable, str(DENSENET), str(onnx_file), "--batch", "dynamic"],
                   check=True)


def write_images(path: Path) -> None:
    data = np.array([[jpeg] for jpeg in images()], dtype=np.bytes_)  # [8, 1], no pickle
    np.savez(path, IMAGE=data)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--images":
        write_images(Path(sys.argv[2]))
    elif len(sys.argv) == 2:
        build(Path(sys.argv[1]))
    else:
        sys.exit(__doc__)
