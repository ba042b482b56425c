"""Inference against a deployment: turn a pandas DataFrame or a dict of numpy arrays into the
model's input tensors (shapes and types from its config), send it, return the outputs.

DataFrame rules (``mlflow deployments predict`` reads its JSON input into one):
- one column whose index labels are the model's inputs (what ``{"inputs": {"INPUT0": [[...]],
  ...}}``, the input file of NVIDIA's mlflow-triton plugin, reads as): each cell is that
  input's whole tensor, batch dimension included;
- columns named after the model's inputs: one column per input, one row per batch item; a
  cell is a scalar or a (nested) list holding one item's tensor;
- otherwise, for a model with exactly one input: each row is one item, the row's values
  (in column order) reshaped to the input's dims.
A model without batching (``max_batch_size: 0``) gets the whole array as its tensor.

A stateful model (a sequence batcher a client sends sequences to) gets the inputs as the steps
of one sequence: their first axis (a DataFrame's rows) is the step, each step is one request
(one batch item where the model batches) under one fresh correlation ID, the first with the
start flag and the last with the end flag; each output is every step's output, in order, on
a first axis.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
from tritonclient.grpc import model_config_pb2

from tracker.errors import DeployError
from tracker.triton import sequence
from tracker.triton.client import DTYPES
from tracker.triton.infer import Request, answer, sequence_answers

if TYPE_CHECKING:
    import pandas as pd
    from tritonclient.grpc.model_config_pb2 import ModelConfig

    from tracker.triton.infer import ControlClient

Array = np.ndarray[Any, Any]


def _fit(name: str, array: Array, dims: list[int], batching: bool, np_type: Any) -> Array:
    """Reshape ``array`` to the input's shape (a leading batch dimension when ``batching``)."""
    want = ([-1] if batching else []) + dims
    per_item = int(np.prod(dims)) if all(d > 0 for d in dims) else None
    if per_item is not None and array.size > 0 and (
            array.size % per_item == 0 if batching else array.size == per_item):
        array = array.reshape(want)
    elif array.ndim != len(want) or any(w > 0 and w != a for w, a in zip(want, array.shape,
                                                                         strict=True)):
        raise DeployError(f"input {name!r} needs shape {want} (-1: any size), but got "
                          f"{list(array.shape)}")
    try:
        return array.astype(np_type)
    except (TypeError, ValueError) as exc:
        raise DeployError(f"input {name!r} needs values of type {np.dtype(np_type).name}, "
                          f"but got {array.dtype}: {exc}") from exc


def to_arrays(config: ModelConfig, data: pd.DataFrame | Mapping[str, Any]) -> dict[str, Array]:
    """The model's inputs from a DataFrame or a mapping name -> array (see the module doc)."""
    import pandas as pd

    names = [i.name for i in config.input]
    raw: dict[str, Array] = {}
    if isinstance(data, pd.DataFrame):
        if len(data.columns) == 1 and set(names) == {str(i) for i in data.index}:
            column = data[data.columns[0]]
            raw = {str(i): np.asarray(column[i]) for i in data.index}
        elif set(names) <= {str(c) for c in data.columns}:
            for name in names:
                col = data[name].tolist()
                raw[name] = np.stack([np.asarray(v) for v in col]) if col else np.asarray(col)
        elif len(names) == 1:
            raw[names[0]] = data.to_numpy()
        else:
            raise DeployError(f"the DataFrame's columns must name the model's inputs {names}, "
                              f"but got {[str(c) for c in data.columns]}")
    elif isinstance(data, Mapping):
        unknown = sorted(set(map(str, data)) - set(names))
        missing = sorted(set(names) - set(map(str, data)))
        if unknown or missing:
            raise DeployError(f"inputs must be exactly the model's inputs {names}, but "
                              f"missing {missing} and unknown {unknown}")
        raw = {name: np.asarray(data[name]) for name in names}
    else:
        raise DeployError("inputs must be a pandas DataFrame or a dict of numpy arrays, but got "
                          f"{type(data).__name__}")
    out: dict[str, Array] = {}
    for inp in config.input:
        type_name = model_config_pb2.DataType.Name(inp.data_type)
        if type_name not in DTYPES:
            raise DeployError(f"input {inp.name!r} has data type {type_name}, which is not "
                              "supported")
        out[inp.name] = _fit(inp.name, raw[inp.name], list(inp.dims),
                             config.max_batch_size > 0 or sequence.sends_sequences(config),
                             DTYPES[type_name][1])
    return out


def infer_version(client: ControlClient, name: str, config: ModelConfig,
                  arrays: Mapping[str, Array], *, version: int | None = None,
                  ) -> dict[str, Array]:
    """One inference on ``name`` (``version``, or the newest ready one when None) with
    ``arrays`` (from :func:`to_arrays`); every declared output comes back. A stateful model
    gets them as the steps of one sequence (module doc). A decoupled model gets each request
    over a gRPC stream, and each output is its responses' values stacked on a first axis, in
    order (a model that streams one token per response answers its tokens).

    Raises :class:`ServerError` with Triton's message when a request or an output fails.
    """
    types = {i.name: DTYPES[model_config_pb2.DataType.Name(i.data_type)][0]
             for i in config.input}
    tensors = {inp_name: (types[inp_name], array) for inp_name, array in arrays.items()}
    request = Request(name, tensors, [o.name for o in config.output], version)
    decoupled = sequence.is_decoupled(config)
    if not sequence.sends_sequences(config):
        return answer(client, request, decoupled)
    answers = sequence_answers(client, dataclasses.replace(
        request, sequence_id=sequence.one_step_id(config)), _steps(config, tensors), decoupled)
    together = np.concatenate if decoupled or config.max_batch_size > 0 else np.stack
    return {out: together([a[out] for a in answers]) for out in request.outputs}


Tensors = dict[str, tuple[str, Array]]


def _steps(config: ModelConfig, tensors: Tensors) -> list[Tensors]:
    """The steps of one sequence: the first axis of every input (a batching model's step keeps
    that axis, as its batch of one item)."""
    counts = {name: len(array) for name, (_, array) in tensors.items()}
    if len(set(counts.values())) != 1 or 0 in counts.values():
        raise DeployError(f"a stateful model's inputs are the steps of one sequence on their "
                          f"first axis, the same number for every input, but they have "
                          f"{counts} steps")
    batching = config.max_batch_size > 0
    return [{k: (t, a[j:j + 1] if batching else a[j]) for k, (t, a) in tensors.items()}
            for j in range(next(iter(counts.values())))]


def to_lists(outputs: Mapping[str, Array]) -> dict[str, Any]:
    """Outputs as nested lists that JSON writes: a BYTES (``TYPE_STRING``) output's items
    become text (UTF-8; bytes that are not UTF-8 keep backslash escapes)."""
    def text(item: Any) -> Any:
        return item.decode("utf-8", errors="backslashreplace") if isinstance(item, bytes) \
            else item

    out: dict[str, Any] = {}
    for name, array in outputs.items():
        if array.dtype == np.object_ and array.size:
            array = np.vectorize(text, otypes=[np.object_])(array)
        out[name] = array.tolist()
    return out
