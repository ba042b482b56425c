"""Request inputs: random data shaped after the model config, or the user's data file.

Random data (what perf_analyzer does without ``--input-data``): every non-optional input gets
one tensor of its data type and shape, ``[batch_size] + dims`` when ``max_batch_size > 0``.
Floats are uniform in [0, 1), integers in [0, 10), booleans random, strings random ASCII of
128 characters (perf_analyzer's default string length). A variable dimension (-1) needs a
shape from the data file, as with perf_analyzer's ``--shape``. With ``load.input_fill: zero``
(perf_analyzer's ``--input-data zero``) every non-string input is zeros instead; strings stay
random, as perf_analyzer makes them.

User data (``load.input_data``):
- JSON in perf_analyzer's ``--input-data`` layout: ``{"data": [{"INPUT0": [...]}, ...]}``,
  where each value is a (nested) list, ``{"content": [...], "shape": [...]}`` or
  ``{"b64": "..."}`` (raw little-endian bytes); each entry is one sample.
- ``.npz``: one array per input name; the first axis indexes samples (an array with exactly
  the input's rank is one sample).
A sample is one batch item (the input's dims); for batching models it is repeated
``batch_size`` times in a request. Requests cycle through the samples.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from tracker.errors import MeasurementError
from tracker.triton.client import DTYPES

STRING_LENGTH = 128


@dataclass(frozen=True)
class InputSpec:
    """One model input: name, wire datatype, numpy dtype, dims (without batch), batching."""

    name: str
    datatype: str
    dtype: Any
    dims: tuple[int, ...]
    batching: bool


Array = npt.NDArray[Any]
Sample = dict[str, Array]  # input name -> the full request tensor


def input_specs(config: Any) -> list[InputSpec]:
    """The inputs a request must carry, from a ``ModelConfig`` (optional inputs skipped)."""
    from tritonclient.grpc import model_config_pb2

    specs = []
    batching = config.max_batch_size > 0
    for inp in config.input:
        if inp.optional:
            continue
        type_name = model_config_pb2.DataType.Name(inp.data_type)
        if type_name not in DTYPES:
            raise MeasurementError(f"input {inp.name!r} has data type {type_name}; the load "
                                   f"generator supports {sorted(DTYPES)}")
        datatype, dtype = DTYPES[type_name]
        specs.append(InputSpec(inp.name, datatype, dtype, tuple(int(d) for d in inp.dims),
                               batching))
    if not specs:
        raise MeasurementError(f"model {config.name!r} declares no (non-optional) inputs")
    return specs


def _check_batch(specs: Sequence[InputSpec], batch_size: int, max_batch_size: int) -> None:
    if batch_size < 1:
        raise MeasurementError(f"load.batch_size must be >= 1, but got {batch_size}")
    batching = any(s.batching for s in specs)
    if not batching and batch_size > 1:
        raise MeasurementError(f"load.batch_size must be 1 for a model without batching "
                               f"(max_batch_size 0), but got {batch_size}")
    if batching and batch_size > max_batch_size:
        raise MeasurementError(f"load.batch_size must be <= max_batch_size "
                               f"({max_batch_size}), but got {batch_size}")


def random_tensor(spec: InputSpec, shape: Sequence[int], rng: np.random.Generator) -> Array:
    if spec.datatype == "BYTES":
        letters = rng.integers(97, 123, size=(int(np.prod(shape)), STRING_LENGTH), dtype=np.uint8)
        return np.array([row.tobytes() for row in letters], dtype=np.object_).reshape(shape)
    if spec.datatype == "BOOL":
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if spec.datatype == "BF16":
        return (rng.random(size=shape, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)
    if np.issubdtype(spec.dtype, np.integer):
        return rng.integers(0, 10, size=shape).astype(spec.dtype)
    return rng.random(size=shape).astype(spec.dtype)


def random_samples(config: Any, batch_size: int = 1, seed: int = 0,
                   fill: str = "random") -> list[Sample]:
    """One request's worth of inputs made for ``config``: random, or with ``fill`` "zero"
    zeros (strings stay random)."""
    specs = input_specs(config)
    _check_batch(specs, batch_size, config.max_batch_size)
    rng = np.random.default_rng(seed)
    sample: Sample = {}
    for spec in specs:
        if any(d < 0 for d in spec.dims):
            raise MeasurementError(
                f"input {spec.name!r} has variable dims {list(spec.dims)}; give its shape "
                f"with load.input_data (a .json with \"shape\" or an .npz file)")
        shape = [batch_size, *spec.dims] if spec.batching else list(spec.dims)
        zero = fill == "zero" and spec.datatype != "BYTES"
        sample[spec.name] = (np.zeros(shape, dtype=spec.dtype) if zero
                             else random_tensor(spec, shape, rng))
    return [sample]


def _fits(dims: Sequence[int], shape: Sequence[int]) -> bool:
    return len(dims) == len(shape) and all(d < 0 or d == s for d, s in zip(dims, shape,
                                                                           strict=True))


def _to_request(spec: InputSpec, item: Array, batch_size: int, where: str) -> Array:
    """A sample (one batch item) as the request tensor: checked against dims, batch added."""
    if not _fits(spec.dims, item.shape):
        raise MeasurementError(f"{where}: input {spec.name!r} must have shape "
                               f"{list(spec.dims)} (-1 = any), but got {list(item.shape)}")
    if not spec.batching:
        return item
    return np.repeat(item[np.newaxis], batch_size, axis=0)


def _json_value(spec: InputSpec, value: Any, where: str) -> Array:
    shape = None
    if isinstance(value, Mapping):
        if "b64" in value:
            if spec.datatype == "BYTES":
                raise MeasurementError(f"{where}: b64 content is not supported for string "
                                       f"input {spec.name!r}; give a list of strings")
            raw = base64.b64decode(value["b64"])
            arr: Array = np.frombuffer(raw, dtype=np.dtype(spec.dtype).newbyteorder("<"))
            shape = value.get("shape") or [d for d in spec.dims]
            if any(d < 0 for d in shape):
                raise MeasurementError(f"{where}: input {spec.name!r} has variable dims; "
                                       "give \"shape\" with \"b64\"")
            return arr.astype(spec.dtype).reshape(shape)
        if "content" not in value:
            raise MeasurementError(f"{where}: input {spec.name!r} must be a list, "
                                   "{\"content\": [...], \"shape\": [...]} or {\"b64\": ...}")
        shape, value = value.get("shape"), value["content"]
    try:
        if spec.datatype == "BYTES":
            flat = np.array([str(v).encode() if not isinstance(v, bytes) else v
                             for v in np.asarray(value, dtype=object).ravel()], dtype=np.object_)
            arr = flat.reshape(np.asarray(value, dtype=object).shape)
        else:
            arr = np.asarray(value, dtype=spec.dtype)
        if shape is not None:
            arr = arr.reshape(shape)
        elif arr.ndim == 1 and len(spec.dims) != 1 and all(d > 0 for d in spec.dims):
            arr = arr.reshape(spec.dims)  # a flat list, as perf_analyzer accepts
    except (ValueError, TypeError) as exc:
        raise MeasurementError(f"{where}: input {spec.name!r}: {exc}") from exc
    return arr


def _known_names(given: Mapping[str, Any], config: Any, where: str) -> None:
    """MeasurementError naming an input the data gives that the model does not have."""
    names = [inp.name for inp in config.input]
    unknown = sorted(set(given) - set(names))
    if unknown:
        raise MeasurementError(f"{where}: input {unknown[0]!r} is not an input of model "
                               f"{config.name!r} (its inputs: {names})")


def json_sample(entry: object, config: Any, specs: Sequence[InputSpec], batch_size: int,
                where: str) -> Sample:
    """One request from one entry of a JSON data file (``{INPUT: value, ...}``)."""
    if not isinstance(entry, Mapping):
        raise MeasurementError(f"{where}: each entry must map input names to data")
    _known_names(entry, config, where)
    sample: Sample = {}
    for spec in specs:
        if spec.name not in entry:
            raise MeasurementError(f"{where}: input {spec.name!r} is missing "
                                   f"(the model needs {[s.name for s in specs]})")
        item = _json_value(spec, entry[spec.name], where)
        sample[spec.name] = _to_request(spec, item, batch_size, where)
    return sample


def load_samples(path: str | Path, config: Any, batch_size: int = 1) -> list[Sample]:
    """Requests built from a user data file (.json or .npz), one per sample."""
    p = Path(path)
    specs = input_specs(config)
    _check_batch(specs, batch_size, config.max_batch_size)
    if p.suffix == ".json":
        try:
            doc = json.loads(p.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise MeasurementError(f"cannot read input data {p}: {exc}") from exc
        entries = doc.get("data") if isinstance(doc, Mapping) else None
        if not isinstance(entries, list) or not entries:
            raise MeasurementError(f"{p}: input data must be {{\"data\": [{{INPUT: ...}}, ...]}}"
                                   " with at least one entry")
        return [json_sample(entry, config, specs, batch_size, f"{p} data[{i}]")
                for i, entry in enumerate(entries)]
    if p.suffix == ".npz":
        try:
            with np.load(p, allow_pickle=False) as npz:
                arrays = {k: npz[k] for k in npz.files}
        except (OSError, ValueError) as exc:
            raise MeasurementError(f"cannot read input data {p}: {exc}") from exc
        _known_names(arrays, config, str(p))
        return _npz_samples(arrays, specs, batch_size, str(p))
    raise MeasurementError(f"input data must be a .json or .npz file, but got {p}")


def _npz_samples(arrays: Mapping[str, Array], specs: Sequence[InputSpec], batch_size: int,
                 where: str) -> list[Sample]:
    per_input: dict[str, list[Array]] = {}
    for spec in specs:
        if spec.name not in arrays:
            raise MeasurementError(f"{where}: input {spec.name!r} is missing (the file has "
                                   f"{sorted(arrays)})")
        arr = arrays[spec.name]
        if spec.datatype == "BYTES":
            arr = np.vectorize(lambda v: v if isinstance(v, bytes) else str(v).encode(),
                               otypes=[np.object_])(arr)
        else:
            arr = arr.astype(spec.dtype)
        per_input[spec.name] = [arr] if arr.ndim == len(spec.dims) else list(arr)
    counts = {len(v) for v in per_input.values()} - {1}
    if len(counts) > 1:
        raise MeasurementError(f"{where}: inputs have different sample counts "
                               f"{ {k: len(v) for k, v in per_input.items()} }")
    n = counts.pop() if counts else 1
    return [{spec.name: _to_request(spec, per_input[spec.name][i % len(per_input[spec.name])],
                                    batch_size, f"{where} sample {i}") for spec in specs}
            for i in range(n)]


def make_samples(config: Any, batch_size: int = 1, input_data: str | Path | None = None,
                 seed: int = 0, fill: str = "random") -> list[Sample]:
    """The requests to send: from ``input_data`` when given, else made (``fill``: random
    or zero)."""
    if input_data is not None:
        return load_samples(input_data, config, batch_size)
    return random_samples(config, batch_size, seed, fill)
