"""Build the re-tune project's changed model: the quickstart model retrained with one more layer.

    python make_model.py OUTPUT_PATH [--hidden N] [--seed N]

INPUT0 FP32 [batch, 64] -> MatMul 64xN + bias -> Relu -> MatMul Nx16 + bias -> Relu -> OUTPUT0.
The same name, inputs and outputs as projects/quickstart/make_model.py's model (so a study of it
can start from the quickstart study), other weights and a hidden layer of N (128 by default):
what a retrained export with one more layer looks like to Triton. Weights come from a seeded
numpy RNG, so the same seed gives the same file byte for byte.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8  # readable by the onnxruntime in older Triton images too
IN_FEATURES, OUT_FEATURES = 64, 16
HIDDEN = 128


def _dense(rng: np.random.Generator, n_in: int, n_out: int) -> tuple[np.ndarray, np.ndarray]:
    weight = rng.standard_normal((n_in, n_out)) / np.sqrt(n_in)
    return weight.astype(np.float32), (rng.standard_normal(n_out) * 0.1).astype(np.float32)


def build(hidden: int = HIDDEN, seed: int = 1) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    w1, b1 = _dense(rng, IN_FEATURES, hidden)
    w2, b2 = _dense(rng, hidden, OUT_FEATURES)
    graph = helper.make_graph(
        nodes=[
            helper.make_node("MatMul", ["INPUT0", "W1"], ["mm1"], name="matmul1"),
            helper.make_node("Add", ["mm1", "B1"], ["pre1"], name="bias1"),
            helper.make_node("Relu", ["pre1"], ["hidden"], name="relu1"),
            helper.make_node("MatMul", ["hidden", "W2"], ["mm2"], name="matmul2"),
            helper.make_node("Add", ["mm2", "B2"], ["pre2"], name="bias2"),
            helper.make_node("Relu", ["pre2"], ["OUTPUT0"], name="relu2"),
        ],
        name="quickstart",
        inputs=[helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT,
                                              ["batch", IN_FEATURES])],
        outputs=[helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT,
                                               ["batch", OUT_FEATURES])],
        initializer=[numpy_helper.from_array(w1, "W1"), numpy_helper.from_array(b1, "B1"),
                     numpy_helper.from_array(w2, "W2"), numpy_helper.from_array(b2, "B2")],
    )
    model = helper.make_model(graph, producer_name="triton-tracker/retune",
                              opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    return model


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", type=Path)
    parser.add_argument("--hidden", type=int, default=HIDDEN)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(build(args.hidden, args.seed), str(args.output))
    print(f"wrote {args.output} (hidden layer of {args.hidden})")


if __name__ == "__main__":
    main()
