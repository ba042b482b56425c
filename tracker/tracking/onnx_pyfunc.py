"""The ``python_function`` loader of a registered ONNX model: onnxruntime on CPU.

This file is copied into each registered model as ``code/tracker_onnx_pyfunc.py`` and named
as the pyfunc flavor's ``loader_module``, so ``mlflow.pyfunc.load_model(...)`` needs only
mlflow, numpy and onnxruntime (not this package). It imports nothing from ``tracker``.

(MLflow's own ``mlflow.onnx`` loader expects the ``.onnx`` file beside ``MLmodel``; a Triton
model directory keeps it in the version folder ``1/``.)

``predict`` takes what MLflow passes after checking the signature: one array (a model with
one input), a dict of arrays by input name, or a pandas DataFrame (one column per input, or
the flattened rows of a single input), and returns a dict of arrays by output name.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray


class OnnxSession:
    """An onnxruntime session on the model file, CPU execution provider."""

    def __init__(self, path: str) -> None:
        import onnxruntime

        self.session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
        self.inputs = self.session.get_inputs()

    def _feed(self, data: Any) -> dict[str, NDArray[Any]]:
        names = [i.name for i in self.inputs]
        if isinstance(data, dict):
            return {name: np.asarray(data[name]) for name in names}
        if hasattr(data, "columns"):  # a pandas DataFrame
            if all(name in data.columns for name in names):
                return {name: np.stack([np.asarray(v) for v in data[name]]) for name in names}
            if len(names) == 1:
                shape = [d if isinstance(d, int) and d > 0 else -1 for d in self.inputs[0].shape]
                return {names[0]: data.to_numpy().reshape([-1, *shape[1:]])}
            raise ValueError(f"a DataFrame for this model needs the columns {names}, "
                             f"but got {list(data.columns)}")
        if len(names) == 1:
            return {names[0]: np.asarray(data)}
        raise ValueError(f"this model has inputs {names}: pass a dict of arrays by name")

    def predict(self, data: Any, params: dict[str, Any] | None = None) -> dict[str, NDArray[Any]]:
        feed = self._feed(data)
        types = {i.name: i.type for i in self.inputs}
        for name, value in feed.items():  # onnxruntime wants the exact element type
            wanted = _NUMPY.get(types[name])
            if wanted is not None and value.dtype != wanted:
                feed[name] = value.astype(wanted)
        outputs = self.session.get_outputs()
        results = self.session.run([o.name for o in outputs], feed)
        return {o.name: np.asarray(r) for o, r in zip(outputs, results, strict=True)}


_NUMPY = {"tensor(float)": np.float32, "tensor(double)": np.float64,
          "tensor(float16)": np.float16, "tensor(int64)": np.int64, "tensor(int32)": np.int32,
          "tensor(int16)": np.int16, "tensor(int8)": np.int8, "tensor(uint8)": np.uint8,
          "tensor(uint16)": np.uint16, "tensor(uint32)": np.uint32,
          "tensor(uint64)": np.uint64, "tensor(bool)": np.bool_}


def _load_pyfunc(path: str, model_config: Any = None) -> OnnxSession:
    """Called by ``mlflow.pyfunc.load_model`` with the flavor's ``data`` path."""
    return OnnxSession(path)
