"""Model directories of the non-ONNX formats, written as a user would have them."""

from __future__ import annotations

import json
from pathlib import Path

SCALE_MODEL = '''
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.scale = float(config["parameters"]["SCALE"]["string_value"])

    def execute(self, requests):
        out = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            y = (x * self.scale).astype(np.float32)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", y)]))
        return out
'''

SCALE_CONFIG = '''name: "{name}"
backend: "python"
max_batch_size: 8
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
dynamic_batching {{ }}
parameters {{ key: "SCALE" value: {{ string_value: "2" }} }}
'''


def python_scale_model(root: Path, name: str = "pyscale") -> Path:
    """A Python-backend model directory: OUTPUT0 = INPUT0 * parameters.SCALE (default 2),
    FP32 [batch, 4], with a helper file beside model.py that travels with it."""
    model_dir = root / name
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "1" / "model.py").write_text(SCALE_MODEL)
    (model_dir / "1" / "notes.txt").write_text("a file beside model.py\n")
    (model_dir / "config.pbtxt").write_text(SCALE_CONFIG.format(name=name))
    return model_dir


def torchscript_model(root: Path, name: str = "resnet_ts") -> Path:
    """A TorchScript model directory as Triton's PyTorch backend takes it (the .pt file is a
    stand-in: nothing here loads it)."""
    model_dir = root / name
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "1" / "model.pt").write_bytes(b"not a real TorchScript archive")
    (model_dir / "config.pbtxt").write_text(f'''name: "{name}"
platform: "pytorch_libtorch"
max_batch_size: 8
input [ {{ name: "INPUT__0" data_type: TYPE_FP32 dims: [ 3, 224, 224 ] }} ]
output [ {{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 1000 ] }} ]
''')
    return model_dir


def spec(path: Path, model_dir: Path, extra: str = "") -> Path:
    path.write_text(f"model: {{name: {model_dir.name}, path: {model_dir}}}\n{extra}")
    return path


def python_model(repo: Path, name: str, code: str, config: str) -> Path:
    """``repo/<name>``: ``1/model.py`` holding ``code`` and a config.pbtxt from ``config``
    (its ``@NAME@`` replaced by ``name``)."""
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "1" / "model.py").write_text(code)
    (repo / name / "config.pbtxt").write_text(config.replace("@NAME@", name))
    return repo / name


def prompts_file(folder: Path) -> Path:
    """A streaming model's ``load.input_data``: prompts of 4 and 7 tokens (PROMPT), asking 3
    and 2 tokens back (MAX_TOKENS)."""
    path = folder / "prompts.json"
    path.write_text(json.dumps({"data": [
        {"PROMPT": {"content": list(range(n)), "shape": [n]}, "MAX_TOKENS": [k]}
        for n, k in ((4, 3), (7, 2))]}))
    return path
