"""Read an ONNX model's inputs and outputs and make the default config Triton would make.

Triton's ONNX Runtime backend auto-completes a missing config.pbtxt from the model: one
`input`/`output` per graph input/output (initializers are not inputs), the ONNX element type
mapped to `TYPE_*`, and the shape. A model batches when every input and output has a variable
first dimension (a `dim_param`, or an unknown/0/-1 size); then `max_batch_size` gets the
default (4), a `dynamic_batching {}` is added and the dims leave the batch dimension out.
Otherwise `max_batch_size` is 0 and dims are the full shape. Other variable dims become -1.
A tensor left with no dims (a scalar, or `[batch]` only) gets `dims: [1]` with
`reshape { shape: [] }`, which is how Triton spells it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import onnx
from google.protobuf.message import DecodeError
from tritonclient.grpc import model_config_pb2

from tracker.errors import ModelError

PLATFORM = "onnxruntime_onnx"
BACKEND = "onnxruntime"

_T = onnx.TensorProto
#: ONNX element type -> Triton data type, for every type Triton supports.
ONNX_TO_TRITON: dict[int, int] = {
    _T.BOOL: model_config_pb2.TYPE_BOOL,
    _T.UINT8: model_config_pb2.TYPE_UINT8,
    _T.UINT16: model_config_pb2.TYPE_UINT16,
    _T.UINT32: model_config_pb2.TYPE_UINT32,
    _T.UINT64: model_config_pb2.TYPE_UINT64,
    _T.INT8: model_config_pb2.TYPE_INT8,
    _T.INT16: model_config_pb2.TYPE_INT16,
    _T.INT32: model_config_pb2.TYPE_INT32,
    _T.INT64: model_config_pb2.TYPE_INT64,
    _T.FLOAT16: model_config_pb2.TYPE_FP16,
    _T.FLOAT: model_config_pb2.TYPE_FP32,
    _T.DOUBLE: model_config_pb2.TYPE_FP64,
    _T.BFLOAT16: model_config_pb2.TYPE_BF16,
    _T.STRING: model_config_pb2.TYPE_STRING,
}


@dataclass(frozen=True)
class Tensor:
    """One graph input or output: Triton data type and shape (-1 for a variable dim)."""

    name: str
    data_type: int
    shape: tuple[int, ...]


@dataclass(frozen=True)
class OnnxModel:
    path: Path
    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]

    @property
    def can_batch(self) -> bool:
        """Every input and output has a variable first dimension."""
        return all(t.shape and t.shape[0] == -1 for t in (*self.inputs, *self.outputs))


def _tensor(path: Path, kind: str, value: onnx.ValueInfoProto) -> Tensor:
    if value.type.WhichOneof("value") != "tensor_type":
        raise ModelError(f"{path.name}: {kind} {value.name!r} is not a tensor "
                         f"({value.type.WhichOneof('value')}); Triton serves tensors only")
    ttype = value.type.tensor_type
    if ttype.elem_type not in ONNX_TO_TRITON:
        onnx_name = onnx.TensorProto.DataType.Name(ttype.elem_type)
        supported = sorted(onnx.TensorProto.DataType.Name(k) for k in ONNX_TO_TRITON)
        raise ModelError(f"{path.name}: {kind} {value.name!r} has ONNX type {onnx_name}, which "
                         f"Triton does not support (supported: {', '.join(supported)})")
    if not ttype.HasField("shape"):
        raise ModelError(f"{path.name}: {kind} {value.name!r} has no shape (unknown rank); "
                         "give the model a shape or write the config.pbtxt by hand")
    shape = tuple(d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else -1
                  for d in ttype.shape.dim)
    return Tensor(value.name, ONNX_TO_TRITON[ttype.elem_type], shape)


def read_onnx(path: Path) -> OnnxModel:
    """The inputs and outputs of the ONNX model at `path` (weights are not loaded)."""
    try:
        proto = onnx.load(str(path), load_external_data=False)
    except FileNotFoundError as exc:
        raise ModelError(f"ONNX model {path} does not exist") from exc
    except (OSError, DecodeError, ValueError, RuntimeError) as exc:
        raise ModelError(f"cannot read ONNX model {path}: {exc}") from exc
    graph = proto.graph
    initializers = {init.name for init in graph.initializer}
    inputs = tuple(_tensor(path, "input", v) for v in graph.input if v.name not in initializers)
    outputs = tuple(_tensor(path, "output", v) for v in graph.output)
    if not outputs:
        raise ModelError(f"{path} is not a usable ONNX model: its graph has no outputs")
    return OnnxModel(path, inputs, outputs)


def _fill(entry: model_config_pb2.ModelInput | model_config_pb2.ModelOutput, tensor: Tensor,
          batching: bool) -> None:
    entry.name = tensor.name
    entry.data_type = tensor.data_type
    dims = tensor.shape[1:] if batching else tensor.shape
    if dims:
        entry.dims.extend(dims)
    else:
        entry.dims.append(1)
        entry.reshape.SetInParent()  # reshape { shape: [] }: the tensor is a scalar per item


def default_config(model: OnnxModel, name: str, *, batching: bool,
                   max_batch_size: int) -> model_config_pb2.ModelConfig:
    """The config Triton's auto-complete makes; instance_group is left to Triton's default."""
    cfg = model_config_pb2.ModelConfig(name=name, platform=PLATFORM, backend=BACKEND)
    if batching:
        cfg.max_batch_size = max_batch_size
        if max_batch_size > 1:
            cfg.dynamic_batching.SetInParent()
    for tensor in model.inputs:
        _fill(cfg.input.add(), tensor, batching)
    for tensor in model.outputs:
        _fill(cfg.output.add(), tensor, batching)
    return cfg


def rebatch_io(cfg: model_config_pb2.ModelConfig, *, batched: bool) -> None:
    """Rewrite input/output dims in place for a change of `max_batch_size` between 0 and > 0.

    Batched dims leave the batch dimension out; unbatched dims carry it as -1 (so a model that
    can batch still takes any batch size, but Triton does not form batches).
    Raises ValueError (with the tensor name) when a dims list has no variable first dim.
    """
    for tensor in (*cfg.input, *cfg.output):
        dims = list(tensor.dims)
        scalar = tensor.HasField("reshape") and not tensor.reshape.shape and dims == [1]
        if not batched:
            tensor.ClearField("dims")
            if scalar:
                tensor.dims.append(-1)
                tensor.ClearField("reshape")
                continue
            tensor.dims.extend([-1, *dims])
            if tensor.HasField("reshape"):
                tensor.reshape.shape.insert(0, -1)
            continue
        if not dims or dims[0] != -1:
            raise ValueError(f"{tensor.name!r} has dims {dims}: no variable batch dimension")
        tensor.ClearField("dims")
        rest = dims[1:]
        if tensor.HasField("reshape") and tensor.reshape.shape:
            del tensor.reshape.shape[0]
        if rest:
            tensor.dims.extend(rest)
        else:
            tensor.dims.append(1)
            tensor.reshape.SetInParent()
