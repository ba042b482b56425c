"""Build a model whose answers depend on which requests share its batch:
INPUT0 FP32 [batch, 16] -> OUTPUT0 = INPUT0 . W + mean over the batch of INPUT0 . V.

    python make_model.py OUTPUT_PATH [--seed N]

The batch mean stands for a BatchNorm layer exported in training mode, or any op that mixes
batch items: one request at a time it is a plain linear layer (the mean of one item is the
item), but once Triton's dynamic batcher puts several requests into one batch, every
request's answer moves with the others'. The output check (docs/tuning.md) must refuse every
configuration that batches it. Weights come from a seeded numpy RNG (same seed, same file).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8
FEATURES, OUT = 16, 8


def build(seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    weight = rng.standard_normal((FEATURES, OUT)) / np.sqrt(FEATURES)
    mix = rng.standard_normal((FEATURES, OUT)) / np.sqrt(FEATURES)
    graph = helper.make_graph(
        nodes=[
            helper.make_node("MatMul", ["INPUT0", "W"], ["own"], name="own"),
            helper.make_node("ReduceMean", ["INPUT0"], ["mean"], axes=[0], keepdims=1,
                             name="batch_mean"),
            helper.make_node("MatMul", ["mean", "V"], ["mixed"], name="mixed"),
            helper.make_node("Add", ["own", "mixed"], ["OUTPUT0"], name="add"),
        ],
        name="batch_dependent",
        inputs=[helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, ["batch", FEATURES])],
        outputs=[helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, ["batch", OUT])],
        initializer=[numpy_helper.from_array(weight.astype(np.float32), "W"),
                     numpy_helper.from_array(mix.astype(np.float32), "V")],
    )
    model = helper.make_model(graph, producer_name="triton-tracker/batch_dependent",
                              opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    return model


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(build(args.seed), str(args.output))
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
