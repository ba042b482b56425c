"""An ONNX stateful model (the graph reads the sequence controls as inputs, as Triton's own
simple_sequence does): the completed config leaves the control inputs to the server."""

from __future__ import annotations

from pathlib import Path

import onnx
from onnx import TensorProto, helper

from tests.support.models import _save
from tracker.triton import formats

CONFIG = '''name: "seq"
platform: "onnxruntime_onnx"
max_batch_size: 8
sequence_batching {
  control_input [
    { name: "START" control [{ kind: CONTROL_SEQUENCE_START int32_false_true: [0, 1] }] },
    { name: "READY" control [{ kind: CONTROL_SEQUENCE_READY int32_false_true: [0, 1] }] }
  ]
}
'''


def _graph(path: Path) -> Path:
    io = [helper.make_tensor_value_info(n, TensorProto.INT32, ["batch", 1])
          for n in ("INPUT", "START", "READY")]
    out = helper.make_tensor_value_info("OUTPUT", TensorProto.INT32, ["batch", 1])
    nodes = [helper.make_node("Add", ["INPUT", "START"], ["SUM"]),
             helper.make_node("Mul", ["SUM", "READY"], ["OUTPUT"])]
    return _save(path, nodes, io, [out])


def test_control_inputs_of_the_graph_are_left_to_the_server(tmp_path: Path) -> None:
    model = tmp_path / "seq"
    _graph(model / "1" / "model.onnx")
    (model / "config.pbtxt").write_text(CONFIG)
    info = formats.load_model_info(model, "seq")
    assert [i.name for i in info.config.input] == ["INPUT"]
    assert [o.name for o in info.config.output] == ["OUTPUT"]
    assert info.config.HasField("sequence_batching")
    assert not info.config.HasField("dynamic_batching")
    assert onnx.load(str(model / "1" / "model.onnx")).graph.input[1].name == "START"
