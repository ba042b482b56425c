"""Serves an ONNX file with onnxruntime from Triton's Python backend.

Copied as ``<model>/<version>/model.py`` into a trial's model repository when the server has no
onnxruntime backend (the nvidia-pytriton wheel's server has only the Python backend). Triton
still applies the trial's ``max_batch_size``, ``dynamic_batching`` and ``instance_group``: each
instance is one stub process with one InferenceSession; requests that arrive together are
concatenated along the batch dimension, run once, and the outputs split back.

Read from the config's ``parameters`` (the keys Triton's onnxruntime backend uses for the
threads, so the production config carries the same ones):

- ``onnx_file``: the ONNX file, relative to the version directory (default ``model.onnx``);
- ``intra_op_thread_count`` / ``inter_op_thread_count``: onnxruntime session threads.

KIND_GPU instances run onnxruntime's CUDA provider on the instance's device; when that
provider is missing the model refuses to load with a message saying so (rather than silently
measuring the CPU). Tensors cross the stub boundary through the stub's numpy glue when it
works with the installed numpy, else through DLPack: each wheel supports one of the two.
- nvidia-pytriton 0.7.0 (numpy < 2): the glue works; returning a DLPack output kills the
  stub process on the first request ("Stub process ... is not healthy").
- nvidia-pytriton 0.5.7 with numpy 2: the glue, built for numpy 1, hands over zero-sized
  arrays; DLPack works.
:func:`numpy_glue_works` picks the path from the numpy major version the stub runs with.

This file must stand alone: it runs in the stub's interpreter, not in the tracker package.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import numpy as np

try:  # present only inside Triton's Python backend stub
    import triton_python_backend_utils as pb_utils
except ImportError:  # imported by tests and tools for choose_providers/make_session
    pb_utils = None


def choose_providers(instance_kind: str, device_id: int = 0) -> list[Any]:
    """onnxruntime execution providers for a Triton instance kind ("GPU"/"KIND_GPU" ->
    CUDA on ``device_id`` then CPU; anything else -> CPU only)."""
    kind = str(instance_kind).upper().removeprefix("KIND_")
    if kind == "GPU":
        return [("CUDAExecutionProvider", {"device_id": int(device_id)}), "CPUExecutionProvider"]
    return ["CPUExecutionProvider"]


def _parameters(config: dict[str, Any]) -> dict[str, str]:
    params = config.get("parameters") or {}
    return {k: str(v.get("string_value", "")) for k, v in params.items()}


def make_session(args: dict[str, Any]) -> Any:
    """The InferenceSession for one instance, from the ``args`` Triton passes to
    ``initialize`` (model_config JSON, instance kind and device, repository, version)."""
    import onnxruntime as ort

    config = json.loads(args["model_config"])
    params = _parameters(config)
    path = os.path.join(args["model_repository"], str(args["model_version"]),
                        params.get("onnx_file") or "model.onnx")
    providers = choose_providers(args.get("model_instance_kind", "CPU"),
                                 int(args.get("model_instance_device_id", 0) or 0))
    wanted = [p[0] if isinstance(p, tuple) else p for p in providers]
    missing = [p for p in wanted if p not in ort.get_available_providers()]
    if missing:
        raise RuntimeError(
            f"instance kind {args.get('model_instance_kind')} needs onnxruntime provider(s) "
            f"{missing}, but this onnxruntime has only {ort.get_available_providers()} "
            "(install onnxruntime-gpu for KIND_GPU instances)")
    options = ort.SessionOptions()
    for key, attr in (("intra_op_thread_count", "intra_op_num_threads"),
                      ("inter_op_thread_count", "inter_op_num_threads")):
        if params.get(key, "").strip():
            setattr(options, attr, int(params[key]))
    return ort.InferenceSession(path, sess_options=options, providers=providers)


def numpy_glue_works(numpy_version: str = np.__version__) -> bool:
    """Whether the stub's numpy glue can carry tensors: every stub on PyPI (nvidia-pytriton up
    to 0.7.0) is built against numpy 1's ABI. A round trip inside the stub cannot tell: the
    glue fails only when the tensor crosses to the server (zero-sized arrays)."""
    return int(numpy_version.split(".")[0]) < 2


def _to_numpy(tensor: Any, glue: bool) -> np.ndarray[Any, Any]:
    if glue:
        return np.asarray(tensor.as_numpy())
    try:
        return np.from_dlpack(tensor)
    except (TypeError, BufferError, AttributeError, RuntimeError):  # e.g. BYTES tensors
        return np.asarray(tensor.as_numpy())


_CAPSULE_NOISE = "PyCapsule_GetPointer called with incorrect name"
_default_unraisablehook = sys.unraisablehook


def _quiet_capsule_noise(unraisable: Any) -> None:
    """Drop the one known-harmless message of older stubs, pass everything else on.

    With numpy 2, the stub of nvidia-pytriton 0.5.x reports an "unraisable" ValueError from a
    DLPack capsule destructor after every ``Tensor.from_dlpack``. The output is already handed
    over (responses are correct; the stub's memory stays flat over thousands of requests), but
    printing a traceback per response costs CPU during measurements and grows server.log by
    megabytes a trial. Said once, then dropped."""
    if isinstance(unraisable.exc_value, ValueError) and str(unraisable.exc_value) == _CAPSULE_NOISE:
        if not getattr(_quiet_capsule_noise, "said", False):
            _quiet_capsule_noise.said = True  # type: ignore[attr-defined]
            sys.stderr.write("tracker shim: ignoring the stub's harmless DLPack capsule "
                             f"warning ({_CAPSULE_NOISE}) from here on\n")
        return
    _default_unraisablehook(unraisable)


def _to_tensor(name: str, array: np.ndarray[Any, Any], glue: bool) -> Any:
    array = np.ascontiguousarray(array)
    if glue or array.dtype == np.object_:
        return pb_utils.Tensor(name, array)
    return pb_utils.Tensor.from_dlpack(name, array)


class TritonPythonModel:
    """The Python-backend model: one onnxruntime session per Triton instance."""

    def initialize(self, args: dict[str, Any]) -> None:
        config = json.loads(args["model_config"])
        self.batching = int(config.get("max_batch_size", 0)) > 0
        self.inputs = [i["name"] for i in config.get("input", [])]
        # a stateful model's control inputs: the server fills them, the graph reads them
        self.inputs += [c["name"] for c in
                        config.get("sequence_batching", {}).get("control_input", [])]
        self.outputs = [o["name"] for o in config.get("output", [])]
        self.session = make_session(args)
        self.glue = numpy_glue_works()
        if not self.glue:
            sys.unraisablehook = _quiet_capsule_noise

    def _run(self, feeds: dict[str, np.ndarray[Any, Any]]) -> list[np.ndarray[Any, Any]]:
        return list(self.session.run(self.outputs, feeds))

    def execute(self, requests: list[Any]) -> list[Any]:
        feeds = [{n: _to_numpy(pb_utils.get_input_tensor_by_name(r, n), self.glue)
                  for n in self.inputs}
                 for r in requests]
        try:
            results = self._batched(feeds) if self.batching and len(feeds) > 1 else [
                self._run(f) for f in feeds]
        except Exception as exc:
            error = pb_utils.TritonError(f"onnxruntime failed: {exc}")
            return [pb_utils.InferenceResponse(output_tensors=[], error=error) for _ in requests]
        return [pb_utils.InferenceResponse(
            output_tensors=[_to_tensor(n, a, self.glue)
                            for n, a in zip(self.outputs, outs, strict=True)])
            for outs in results]

    def _batched(self, feeds: list[dict[str, np.ndarray[Any, Any]]]
                 ) -> list[list[np.ndarray[Any, Any]]]:
        """Run the requests as one batch; fall back to one run each when their non-batch
        shapes differ (variable dims)."""
        first = feeds[0]
        if any(f[n].shape[1:] != first[n].shape[1:] for f in feeds for n in self.inputs):
            return [self._run(f) for f in feeds]
        sizes = [f[self.inputs[0]].shape[0] for f in feeds]
        merged = {n: np.concatenate([f[n] for f in feeds], axis=0) for n in self.inputs}
        outs = self._run(merged)
        bounds = np.cumsum(sizes)[:-1]
        split = [np.split(o, bounds, axis=0) for o in outs]
        return [[parts[i] for parts in split] for i in range(len(feeds))]

    def finalize(self) -> None:
        self.session = None
