"""A Triton model repository with an ensemble, written as a user would have it (not part of
the project): ``pipe`` = ``prep`` (Python: UINT8 bytes -> FP32 features, sleeps per execution:
the slow step) -> ``net`` (ONNX, served through the shim on the embedded server) -> ``post``
(Python: the top class as a BYTES label). And ``other``: an independent Python model."""

from __future__ import annotations

from pathlib import Path

from tests.support import models

PREP = '''
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        time.sleep(0.003)  # per execution: batching and instances both help
        out = []
        for request in requests:
            raw = pb_utils.get_input_tensor_by_name(request, "IMAGE").as_numpy()
            x = (raw[..., :8].astype(np.float32) / 255.0 - 0.5).astype(np.float32)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("FEATURES", x)]))
        return out
'''

POST = '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for request in requests:
            scores = pb_utils.get_input_tensor_by_name(request, "SCORES").as_numpy()
            top = np.argmax(scores, axis=-1)
            labels = np.array([[f"class_{int(k)}".encode()] for k in top.ravel()],
                              dtype=np.object_).reshape(scores.shape[:-1] + (1,))
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("LABEL", labels)]))
        return out
'''

OTHER = '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x * 2)]))
        return out
'''

ENSEMBLE = '''name: "pipe"
platform: "ensemble"
max_batch_size: 8
input [ { name: "IMAGE" data_type: TYPE_UINT8 dims: [ 16 ] } ]
output [ { name: "LABEL" data_type: TYPE_STRING dims: [ 1 ] } ]
ensemble_scheduling { step [
  { model_name: "prep" model_version: -1
    input_map { key: "IMAGE" value: "IMAGE" } output_map { key: "FEATURES" value: "f" } },
  { model_name: "net" model_version: -1
    input_map { key: "INPUT0" value: "f" } output_map { key: "OUTPUT0" value: "s" } },
  { model_name: "post" model_version: -1
    input_map { key: "SCORES" value: "s" } output_map { key: "LABEL" value: "LABEL" } } ] }
'''


def _python(root: Path, name: str, code: str, config: str) -> None:
    (root / name / "1").mkdir(parents=True)
    (root / name / "1" / "model.py").write_text(code)
    (root / name / "config.pbtxt").write_text(f'name: "{name}"\nbackend: "python"\n' + config)


def ensemble_repository(root: Path) -> Path:
    """The repository (see the module docstring); returns its root."""
    root.mkdir(parents=True, exist_ok=True)
    _python(root, "prep", PREP, '''max_batch_size: 8
dynamic_batching { }
instance_group [ { count: 1 kind: KIND_CPU } ]
input [ { name: "IMAGE" data_type: TYPE_UINT8 dims: [ 16 ] } ]
output [ { name: "FEATURES" data_type: TYPE_FP32 dims: [ 8 ] } ]
''')
    models.dynamic_batch(root / "net" / "1" / "model.onnx")
    (root / "net" / "config.pbtxt").write_text(
        'name: "net"\nbackend: "onnxruntime"\nmax_batch_size: 8\n')
    _python(root, "post", POST, '''max_batch_size: 8
input [ { name: "SCORES" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "LABEL" data_type: TYPE_STRING dims: [ 1 ] } ]
''')
    _python(root, "other", OTHER, '''max_batch_size: 8
dynamic_batching { }
input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] } ]
''')
    (root / "pipe" / "1").mkdir(parents=True)
    (root / "pipe" / "config.pbtxt").write_text(ENSEMBLE)
    return root


BLS = '''
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Business Logic Scripting: every request is sent on to `net`, its answer returned."""

    def execute(self, requests):
        out = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            call = pb_utils.InferenceRequest(model_name="net", inputs=[x],
                                             requested_output_names=["OUTPUT0"])
            got = call.exec()
            if got.has_error():
                raise pb_utils.TritonModelException(got.error().message())
            y = pb_utils.get_output_tensor_by_name(got, "OUTPUT0").as_numpy()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", y)]))
        return out
'''


def bls_repository(root: Path) -> Path:
    """:func:`ensemble_repository` plus ``bls``: a Python model that calls ``net`` through
    BLS for every request (whom it calls, only its code knows: the spec lists it)."""
    ensemble_repository(root)
    _python(root, "bls", BLS, '''max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 8 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
''')
    return root
