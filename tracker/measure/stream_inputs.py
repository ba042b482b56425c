"""Requests with drawn lengths: a prompt of N tokens and an output length, per request.

``load.stream.input_tokens`` names the input that carries the prompt: its variable dimension
(-1) gets the drawn number of token ids (integers in [0, 32000), a seeded RNG; floats in
[0, 1); a string input: that many random words in one element). ``load.stream.output_tokens``
names the input that holds the number of tokens to generate (one element). The other inputs
come from ``load.input_data`` or random data as usual (measure/inputs.py), and
``load.stream.samples`` requests are drawn, then cycled, as with a data file. Without drawn
lengths this is just :func:`~tracker.measure.inputs.make_samples`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from tracker.errors import MeasurementError
from tracker.measure.inputs import Array, InputSpec, Sample, input_specs, make_samples
from tracker.measure.repeats import repeat_pool

if TYPE_CHECKING:
    from tracker.spec.sections import LoadSection
    from tracker.spec.streaming import LengthInput

VOCABULARY = 32000  # token ids drawn in [0, VOCABULARY)


def _spec_of(specs: list[InputSpec], field: str, name: str) -> InputSpec:
    for spec in specs:
        if spec.name == name:
            return spec
    raise MeasurementError(f"load.stream.{field}.input names {name!r}, but the model's "
                           f"inputs are {[s.name for s in specs]}")


def _prompt(spec: InputSpec, n: int, rng: np.random.Generator, batch: int) -> Array:
    dims = list(spec.dims)
    if spec.datatype == "BYTES":
        letters = rng.integers(97, 123, size=(n, 4), dtype=np.uint8)
        text = b" ".join(row.tobytes() for row in letters)
        shape = [1 if d < 0 else d for d in dims]
        arr: Array = np.full(shape, text, dtype=np.object_)
    else:
        if dims.count(-1) != 1:
            raise MeasurementError(
                f"load.stream.input_tokens.input: input {spec.name!r} must have exactly one "
                f"variable dimension (-1) to carry a prompt length, but its dims are {dims}")
        shape = [n if d < 0 else d for d in dims]
        if np.issubdtype(spec.dtype, np.integer):
            arr = rng.integers(0, VOCABULARY, size=shape).astype(spec.dtype)
        else:
            arr = rng.random(size=shape).astype(spec.dtype)
    return np.repeat(arr[np.newaxis], batch, axis=0) if spec.batching else arr


def _count(spec: InputSpec, n: int, batch: int) -> Array:
    dims = [1 if d < 0 else d for d in spec.dims] or [1]
    if int(np.prod(dims)) != 1 or spec.datatype in ("BYTES", "BOOL"):
        raise MeasurementError(
            f"load.stream.output_tokens.input: input {spec.name!r} must be one number (dims "
            f"[1]) to hold the output length, but it is {spec.datatype} {list(spec.dims)}")
    arr = np.full(dims, n, dtype=spec.dtype)
    return np.repeat(arr[np.newaxis], batch, axis=0) if spec.batching else arr


def _without(config: Any, names: set[str]) -> Any:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

    out = ModelConfig()
    out.CopyFrom(config)
    del out.input[:]
    out.input.extend(i for i in config.input if i.name not in names)
    return out


def samples_for(config: Any, load: LoadSection) -> list[Sample]:
    """The requests to send for ``config`` under ``load`` (lengths drawn where the spec says)."""
    drawn: Mapping[str, LengthInput] = load.stream.drawn
    if not drawn:  # load.repeat: the pool of distinct requests (repeats.py)
        return repeat_pool(config, load, make_samples(config, load.batch_size, load.input_data,
                                                    fill=load.input_fill))
    specs = input_specs(config)
    targets = {field: _spec_of(specs, field, d.input) for field, d in drawn.items()}
    rest = _without(config, {d.input for d in drawn.values()})
    base: list[Sample] = ([{}] if not any(not i.optional for i in rest.input)
                          else make_samples(rest, load.batch_size, load.input_data,
                                            fill=load.input_fill))
    n = max(len(base), load.stream.samples)
    rng = np.random.default_rng(load.stream.seed)
    lengths = {field: d.length.draw(rng, n) for field, d in drawn.items()}
    out: list[Sample] = []
    for i in range(n):
        sample = dict(base[i % len(base)])
        for field, spec in targets.items():
            k = lengths[field][i]
            sample[spec.name] = (_prompt(spec, k, rng, load.batch_size)
                                 if field == "input_tokens" else
                                 _count(spec, k, load.batch_size))
        out.append(sample)
    return out
