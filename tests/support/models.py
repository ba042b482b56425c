"""Small ONNX models for tests, written with the `onnx` helper API (no STRING tensors, so the
Python-backend shim can serve every one of them).

Each function writes the model to `path` and returns `path`. Weights are fixed (seeded) so the
outputs are deterministic.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8

Dim = int | str


def _save(path: Path, nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto],
          outputs: list[onnx.ValueInfoProto], inits: Sequence[onnx.TensorProto] = ()) -> Path:
    graph = helper.make_graph(nodes, path.stem, inputs, outputs, initializer=list(inits))
    model = helper.make_model(graph, producer_name="tracker-tests",
                              opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def _linear(path: Path, first: Dim, features_in: int, features_out: int) -> Path:
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((features_in, features_out)).astype(np.float32)
    return _save(
        path,
        [helper.make_node("MatMul", ["INPUT0", "W"], ["mm"]),
         helper.make_node("Relu", ["mm"], ["OUTPUT0"])],
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, [first, features_in])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, [first, features_out])],
        [numpy_helper.from_array(weight, "W")],
    )


def dynamic_batch(path: Path, features_in: int = 8, features_out: int = 4) -> Path:
    """INPUT0 FP32 [batch, 8] -> MatMul -> Relu -> OUTPUT0 FP32 [batch, 4]."""
    return _linear(path, "batch", features_in, features_out)


def fixed_batch(path: Path, features_in: int = 8, features_out: int = 4) -> Path:
    """INPUT0 FP32 [2, 8] -> MatMul -> Relu -> OUTPUT0 FP32 [2, 4] (cannot batch)."""
    return _linear(path, 2, features_in, features_out)


def multi_input(path: Path) -> Path:
    """INPUT0 FP32 [batch, 4] + INPUT1 FP32 [batch, 4] -> OUTPUT0 (sum) and OUTPUT1
    (difference), both FP32 [batch, 4]; INPUT2 FP32 [batch, seq, 3] -> OUTPUT2 FP32
    [batch, seq, 3] (a variable inner dim)."""
    f = TensorProto.FLOAT
    return _save(
        path,
        [helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
         helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"]),
         helper.make_node("Identity", ["INPUT2"], ["OUTPUT2"])],
        [helper.make_tensor_value_info("INPUT0", f, ["batch", 4]),
         helper.make_tensor_value_info("INPUT1", f, ["batch", 4]),
         helper.make_tensor_value_info("INPUT2", f, ["batch", "seq", 3])],
        [helper.make_tensor_value_info("OUTPUT0", f, ["batch", 4]),
         helper.make_tensor_value_info("OUTPUT1", f, ["batch", 4]),
         helper.make_tensor_value_info("OUTPUT2", f, ["batch", "seq", 3])],
    )


def int64_input(path: Path, vocab: int = 16, width: int = 4) -> Path:
    """INPUT_IDS INT64 [batch, 6] -> Gather(embedding vocab x width) -> EMBEDDINGS FP32
    [batch, 6, width]."""
    table = np.random.default_rng(1).standard_normal((vocab, width)).astype(np.float32)
    return _save(
        path,
        [helper.make_node("Gather", ["EMB", "INPUT_IDS"], ["EMBEDDINGS"], axis=0)],
        [helper.make_tensor_value_info("INPUT_IDS", TensorProto.INT64, ["batch", 6])],
        [helper.make_tensor_value_info("EMBEDDINGS", TensorProto.FLOAT, ["batch", 6, width])],
        [numpy_helper.from_array(table, "EMB")],
    )


def fp16_output(path: Path) -> Path:
    """INPUT0 FP32 [batch, 8] -> Cast -> OUTPUT0 FP16 [batch, 8]."""
    return _save(
        path,
        [helper.make_node("Cast", ["INPUT0"], ["OUTPUT0"], to=TensorProto.FLOAT16)],
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT16, ["batch", 8])],
    )


def batch_only(path: Path) -> Path:
    """SCORES FP32 [batch] -> Neg -> NEGATED FP32 [batch]: no dims left after the batch dim."""
    return _save(
        path,
        [helper.make_node("Neg", ["SCORES"], ["NEGATED"])],
        [helper.make_tensor_value_info("SCORES", TensorProto.FLOAT, ["batch"])],
        [helper.make_tensor_value_info("NEGATED", TensorProto.FLOAT, ["batch"])],
    )


def all_types(path: Path, elem_types: Sequence[int]) -> Path:
    """One Identity input/output pair `IN_<i>`/`OUT_<i>` [batch, 2] per ONNX element type."""
    nodes, inputs, outputs = [], [], []
    for i, elem in enumerate(elem_types):
        nodes.append(helper.make_node("Identity", [f"IN_{i}"], [f"OUT_{i}"]))
        inputs.append(helper.make_tensor_value_info(f"IN_{i}", elem, ["batch", 2]))
        outputs.append(helper.make_tensor_value_info(f"OUT_{i}", elem, ["batch", 2]))
    return _save(path, nodes, inputs, outputs)


#: name -> writer, for tests that run over every model here
ALL = {
    "dynamic_batch": dynamic_batch,
    "fixed_batch": fixed_batch,
    "multi_input": multi_input,
    "int64_input": int64_input,
    "fp16_output": fp16_output,
    "batch_only": batch_only,
}


def noisy(path: Path) -> Path:
    """INPUT0 FP32 [batch, 4] -> OUTPUT0 = 2 x INPUT0 (deterministic) and NOISE = uniform
    random numbers of the same shape (a new draw on every call: not deterministic)."""
    return _save(
        path,
        [helper.make_node("Add", ["INPUT0", "INPUT0"], ["OUTPUT0"]),
         helper.make_node("RandomUniformLike", ["INPUT0"], ["NOISE"])],
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, ["batch", 4]),
         helper.make_tensor_value_info("NOISE", TensorProto.FLOAT, ["batch", 4])],
    )


def negated(onnx_path: Path, out: Path) -> Path:
    """The same model with its weights negated: same inputs and outputs, other answers."""
    model = onnx.load(str(onnx_path))
    for init in model.graph.initializer:
        init.CopyFrom(numpy_helper.from_array(-numpy_helper.to_array(init), init.name))
    onnx.save(model, str(out))
    return out
