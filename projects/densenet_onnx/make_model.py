"""Build a DenseNet-121 ONNX model with random weights (the network of Triton's densenet_onnx).

    python make_model.py OUTPUT_PATH [--batch fixed|dynamic] [--seed N]

The architecture is DenseNet-121 (Huang et al.): conv 7x7/2 + max pool 3x3/2, four dense blocks
of 6, 12, 24 and 16 layers (growth rate 32, bottleneck 4 x growth), transitions halving the
channels with a 1x1 conv and 2x2 average pool, final BN + ReLU, global average pool and a
1000-way classifier as a 1x1 conv followed by softmax, built with the `onnx` helper API. Batch
norms stay BatchNormalization nodes (pre-activation: they precede the convs, so they cannot be
folded into them; onnxruntime fuses what it can). Weights are drawn from a seeded numpy RNG
(He-normal), so the same seed gives the same file byte for byte; the model computes like the
real one but its predictions mean nothing.

Input `data_0` FP32 [1, 3, 224, 224], output `prob_1` FP32 [1, 1000, 1, 1], as in Triton's
guide. `--batch dynamic` makes the first dim symbolic (`batch`) so Triton can batch it; it
defaults to `dynamic` when the file name contains "dynamic", else `fixed`.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8  # readable by the onnxruntime in older Triton images too
BLOCKS = (6, 12, 24, 16)
GROWTH = 32
BN_SIZE = 4
INIT_FEATURES = 64
CLASSES = 1000
INPUT, OUTPUT = "data_0", "prob_1"


class _Builder:
    """Collects nodes and initializers; each layer helper returns its output tensor name."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []

    def _param(self, name: str, array: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(array.astype(np.float32), name))
        return name

    def conv(self, name: str, x: str, cin: int, cout: int, k: int, stride: int = 1,
             pad: int = 0, bias: bool = False) -> str:
        std = np.sqrt(2.0 / (cin * k * k))
        inputs = [x, self._param(f"{name}_w", self.rng.standard_normal((cout, cin, k, k)) * std)]
        if bias:
            inputs.append(self._param(f"{name}_b", np.zeros(cout)))
        self.nodes.append(helper.make_node(
            "Conv", inputs, [name], name=name, kernel_shape=[k, k], strides=[stride, stride],
            pads=[pad] * 4))
        return name

    def bn_relu(self, name: str, x: str, channels: int) -> str:
        scale = 1.0 + 0.05 * self.rng.standard_normal(channels)
        shift = 0.05 * self.rng.standard_normal(channels)
        params = [self._param(f"{name}_{p}", v) for p, v in (
            ("scale", scale), ("bias", shift), ("mean", np.zeros(channels)),
            ("var", np.ones(channels)))]
        self.nodes.append(helper.make_node("BatchNormalization", [x, *params], [f"{name}_bn"],
                                           name=f"{name}_bn", epsilon=1e-5))
        self.nodes.append(helper.make_node("Relu", [f"{name}_bn"], [f"{name}_relu"],
                                           name=f"{name}_relu"))
        return f"{name}_relu"

    def op(self, kind: str, name: str, inputs: list[str], **attrs: Any) -> str:
        self.nodes.append(helper.make_node(kind, inputs, [name], name=name, **attrs))
        return name


def _dense_block(b: _Builder, block: int, x: str, channels: int, layers: int) -> tuple[str, int]:
    features = [x]
    for i in range(1, layers + 1):
        name = f"b{block}_l{i}"
        joined = features[0] if len(features) == 1 else b.op("Concat", f"{name}_in", features,
                                                              axis=1)
        h = b.bn_relu(f"{name}_n1", joined, channels + (i - 1) * GROWTH)
        h = b.conv(f"{name}_c1", h, channels + (i - 1) * GROWTH, BN_SIZE * GROWTH, 1)
        h = b.bn_relu(f"{name}_n2", h, BN_SIZE * GROWTH)
        features.append(b.conv(f"{name}_c2", h, BN_SIZE * GROWTH, GROWTH, 3, pad=1))
    return b.op("Concat", f"b{block}_out", features, axis=1), channels + layers * GROWTH


def build(batch: str = "fixed", seed: int = 0) -> onnx.ModelProto:
    b = _Builder(seed)
    x = b.conv("conv0", INPUT, 3, INIT_FEATURES, 7, stride=2, pad=3)
    x = b.bn_relu("norm0", x, INIT_FEATURES)
    x = b.op("MaxPool", "pool0", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    channels = INIT_FEATURES
    for block, layers in enumerate(BLOCKS, start=1):
        x, channels = _dense_block(b, block, x, channels, layers)
        if block < len(BLOCKS):
            x = b.bn_relu(f"t{block}_n", x, channels)
            x = b.conv(f"t{block}_c", x, channels, channels // 2, 1)
            x = b.op("AveragePool", f"t{block}_pool", [x], kernel_shape=[2, 2], strides=[2, 2])
            channels //= 2
    x = b.bn_relu("norm5", x, channels)
    x = b.op("GlobalAveragePool", "pool5", [x])
    x = b.conv("fc6", x, channels, CLASSES, 1, bias=True)
    b.op("Softmax", OUTPUT, [x], axis=1)
    first: int | str = "batch" if batch == "dynamic" else 1
    graph = helper.make_graph(
        b.nodes, "densenet121",
        inputs=[helper.make_tensor_value_info(INPUT, TensorProto.FLOAT, [first, 3, 224, 224])],
        outputs=[helper.make_tensor_value_info(OUTPUT, TensorProto.FLOAT,
                                               [first, CLASSES, 1, 1])],
        initializer=b.inits)
    model = helper.make_model(graph, producer_name="triton-tracker/densenet_onnx",
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
    batch = args.batch or ("dynamic" if "dynamic" in args.output.name else "fixed")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(build(batch, args.seed), str(args.output))
    print(f"wrote {args.output} ({batch} batch)")


if __name__ == "__main__":
    main()
