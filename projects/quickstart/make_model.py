"""Build the quickstart model: INPUT0 FP32 [batch, 64] -> MatMul 64x16 + bias -> Relu -> OUTPUT0.

    python make_model.py OUTPUT_PATH [--batch dynamic|fixed] [--seed N]

Small on purpose: it serves thousands of inferences/s on two CPU cores, so a study over it
finishes in a minute and shows the server-side knobs (batching, instances) rather than compute.
Weights come from a seeded numpy RNG, so the same seed gives the same file byte for byte.
`--batch` defaults to `fixed` when the file name contains "fixed", else `dynamic`.
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


def build(batch: str = "dynamic", seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    weight = (rng.standard_normal((IN_FEATURES, OUT_FEATURES)) / np.sqrt(IN_FEATURES))
    bias = rng.standard_normal(OUT_FEATURES) * 0.1
    first: int | str = "batch" if batch == "dynamic" else 1
    graph = helper.make_graph(
        nodes=[
            helper.make_node("MatMul", ["INPUT0", "W"], ["mm"], name="matmul"),
            helper.make_node("Add", ["mm", "B"], ["pre"], name="bias"),
            helper.make_node("Relu", ["pre"], ["OUTPUT0"], name="relu"),
        ],
        name="quickstart",
        inputs=[helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, [first, IN_FEATURES])],
        outputs=[helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT,
                                               [first, OUT_FEATURES])],
        initializer=[numpy_helper.from_array(weight.astype(np.float32), "W"),
                     numpy_helper.from_array(bias.astype(np.float32), "B")],
    )
    model = helper.make_model(graph, producer_name="triton-tracker/quickstart",
                              opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    return model


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", type=Path)
    parser.add_argument("--batch", choices=["dynamic", "fixed"], default=None)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    batch = args.batch or ("fixed" if "fixed" in args.output.name else "dynamic")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(build(batch, args.seed), str(args.output))
    print(f"wrote {args.output} ({batch} batch)")


if __name__ == "__main__":
    main()
