"""What a sequence load sends: the steps, the correlation IDs and each request's flags.

A stateful model (tracker/triton/sequence.py) is sent sequences. This module builds, once per
entry load, the step requests (:func:`sequence_samples`; serialized like any load's,
measure/transport.py) and a :class:`SequencePlan`: the sequences from the user's data
(perf_analyzer's sequence layout: each entry of ``data`` a list of steps) or the lengths to
draw, and the correlation ID type. The load kind that sends them is
tracker/measure/kinds/sequences.py. Per request,
:func:`with_sequence` adds the sequence's ID and start/end flags to a pre-built payload (a few
bytes appended to the gRPC message: protobuf merges a message's fields read twice; over HTTP the
JSON header gains ``parameters``).

Correlation IDs (:class:`CorrelationIds`) never collide between load processes, load levels,
retries or runs: an ID is ``(10 ms tick since 2024 << 27) | (process << 21) | counter``, the
tick taken when a load starts (and strictly after the last one this process took), so two
starts never share a prefix, and each of up to 64 processes counts on its own. A string
CORRID gets the same number in decimal.

:func:`run_sequence` sends one whole sequence with tritonclient and returns each step's
outputs (a probe of a stateful model answers this way; the load itself never decodes).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tracker.errors import MeasurementError
from tracker.measure.inputs import Sample, input_specs, json_sample, make_samples
from tracker.measure.transport import Payload
from tracker.spec.sequence import DEFAULT_ACTIVE, DEFAULT_LENGTH
from tracker.triton.sequence import controls, is_iterative, is_sequence, sends_sequences

if TYPE_CHECKING:
    from tracker.spec.sections import LoadSection

EPOCH_S = 1_704_067_200  # 2024-01-01 UTC
TICK_NS = 10_000_000
PROCESS_BITS, COUNTER_BITS = 6, 21
MAX_PROCESSES = 1 << PROCESS_BITS
_last_tick = 0  # per process: each start takes a later tick


class CorrelationIds:
    """The correlation IDs of one load process from one start: see the module docstring."""

    def __init__(self, process: int = 0) -> None:
        if not 0 <= process < MAX_PROCESSES:
            raise MeasurementError(f"a sequence load runs at most {MAX_PROCESSES} load "
                                   f"processes, but got process index {process}")
        self.process = process
        self._rebase()

    def _rebase(self) -> None:
        global _last_tick
        tick = max((time.time_ns() // 1_000_000_000 - EPOCH_S) * 100
                   + (time.time_ns() % 1_000_000_000) // TICK_NS, _last_tick + 1)
        _last_tick = tick
        self._base = (tick << (PROCESS_BITS + COUNTER_BITS)) | (self.process << COUNTER_BITS)
        self._count = 0

    def next(self) -> int:
        """A new ID (never 0: Triton refuses a zero correlation ID)."""
        self._count += 1
        if self._count >= 1 << COUNTER_BITS:
            self._rebase()
            self._count = 1
        return self._base | self._count


@dataclass(frozen=True)
class SequencePlan:
    """How a sequence load makes its sequences (picklable: load processes get a copy).

    The step requests are the load's pre-built payloads (one per sample, in the order of
    :func:`sequence_samples`); ``sequences`` the user's sequences as lists of payload indices
    (None: draw lengths in ``[low, high]`` from ``seed`` and cycle through the payloads);
    ``protocol`` the wire format the flags are added in; ``string_ids``: the CORRID control is
    a string; ``active``: the sequences open at once in request-rate mode."""

    protocol: str = "grpc"
    sequences: tuple[tuple[int, ...], ...] | None = None
    low: int = DEFAULT_LENGTH
    high: int = DEFAULT_LENGTH
    seed: int = 0
    string_ids: bool = False
    active: int = DEFAULT_ACTIVE

    def words(self) -> str:
        """How the sequences are made, for ``tracker check`` and the logs."""
        if self.sequences is not None:
            lengths = sorted({len(s) for s in self.sequences})
            shown = f"{lengths[0]}" if len(lengths) == 1 else f"{lengths[0]}-{lengths[-1]}"
            what = f"{len(self.sequences)} sequences from load.input_data ({shown} steps)"
        elif self.low == self.high:
            what = f"{self.low} steps each"
        else:
            what = f"{self.low}-{self.high} steps each, drawn with seed {self.seed}"
        ids = "strings" if self.string_ids else "unsigned integers"
        return (f"{what}; correlation IDs: {ids}, one per sequence, unique across load "
                "processes, levels and runs")

    def steps_of(self, rng: np.random.Generator, count: int, payloads: int) -> tuple[int, ...]:
        """The payload indices (of ``payloads`` step requests) of a slot's sequence number
        ``count``."""
        if self.sequences is not None:
            return self.sequences[count % len(self.sequences)]
        n = int(rng.integers(self.low, self.high + 1))
        first = int(rng.integers(0, payloads))
        return tuple((first + j) % payloads for j in range(n))


def _sequence_value(corrid: int | str, string_ids: bool) -> dict[str, Any]:
    return {"string_param": str(corrid)} if string_ids else {"int64_param": int(corrid)}


def grpc_flags(corrid: int | str, start: bool, end: bool, string_ids: bool) -> bytes:
    """The serialized ``parameters`` of one sequence request (appended to its payload)."""
    from tritonclient.grpc import service_pb2

    req = service_pb2.ModelInferRequest()
    req.parameters["sequence_id"].CopyFrom(
        service_pb2.InferParameter(**_sequence_value(corrid, string_ids)))
    req.parameters["sequence_start"].bool_param = start
    req.parameters["sequence_end"].bool_param = end
    return bytes(req.SerializeToString())


def with_sequence(plan: SequencePlan, payload: Payload, corrid: int, start: bool,
                  end: bool) -> Payload:
    """``payload`` as step of sequence ``corrid`` (start/end flags set)."""
    if plan.protocol == "grpc":
        return payload + grpc_flags(corrid, start, end, plan.string_ids)
    body, json_size = payload
    size = json_size if json_size is not None else len(body)
    header = json.loads(body[:size])
    header["parameters"] = {"sequence_id": str(corrid) if plan.string_ids else corrid,
                            "sequence_start": start, "sequence_end": end}
    text = json.dumps(header, separators=(",", ":")).encode()
    return (text + body[size:], len(text) if json_size is not None else None)


def _is_sequence_layout(path: Path) -> list[Any] | None:
    """The ``data`` of a JSON file in perf_analyzer's sequence layout, else None."""
    if path.suffix != ".json":
        return None
    try:
        doc = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise MeasurementError(f"cannot read input data {path}: {exc}") from exc
    data = doc.get("data") if isinstance(doc, dict) else None
    if isinstance(data, list) and data and all(isinstance(d, list) for d in data):
        return data
    return None


def check_sequence_load(config: Any, load: LoadSection) -> None:
    """MeasurementError for a ``load.sequence`` on a model without a sequence batcher."""
    if load.sequence is not None and not is_sequence(config):
        raise MeasurementError(f"load.sequence is set, but model {config.name!r} has no "
                               "sequence batcher (it is not stateful): remove load.sequence")
    if load.sequence is not None and is_iterative(config):
        raise MeasurementError(f"load.sequence is set, but model {config.name!r} is an "
                               "iterative sequence model (iterative_sequence: true): each "
                               "request is a whole sequence, which the model reschedules "
                               "until it ends, so there are no steps to send; remove "
                               "load.sequence")


def sequence_samples(config: Any, load: LoadSection,
                     ) -> tuple[list[Sample], tuple[tuple[int, ...], ...] | None]:
    """The step requests of a stateful ``config`` and, from a data file in perf_analyzer's
    sequence layout, its sequences as lists of step indices (else None: lengths drawn)."""
    specs = input_specs(config)
    data = _is_sequence_layout(load.input_data) if load.input_data is not None else None
    if data is None:
        return make_samples(config, load.batch_size, load.input_data,
                            fill=load.input_fill), None
    steps: list[Sample] = []
    seqs: list[tuple[int, ...]] = []
    for i, seq in enumerate(data):
        if not seq:
            raise MeasurementError(f"{load.input_data} data[{i}]: a sequence needs at least "
                                   "one step, but this one is empty")
        seqs.append(tuple(range(len(steps), len(steps) + len(seq))))
        steps.extend(json_sample(step, config, specs, load.batch_size,
                                 f"{load.input_data} data[{i}][{j}]")
                     for j, step in enumerate(seq))
    return steps, tuple(seqs)


def id_type(config: Any, load: LoadSection) -> str:
    """"uint" or "string": what the model's CORRID control takes, checked against
    ``load.sequence.ids``; MeasurementError when they differ."""
    wanted = load.sequence.ids if load.sequence is not None else "auto"
    found = controls(config)
    if found.corrid is None:  # no CORRID control: the server takes either kind
        return "string" if wanted == "string" else "uint"
    if wanted not in ("auto", found.corrid_type):
        kind = "TYPE_STRING" if found.corrid_type == "string" else "an integer type"
        raise MeasurementError(
            f"load.sequence.ids is {wanted!r}, but model {config.name!r}'s CORRID control "
            f"{found.corrid!r} is {kind}: Triton refuses a correlation ID of the other kind; "
            f"set ids to {found.corrid_type!r} or 'auto'")
    return found.corrid_type


def sequence_plan(config: Any, load: LoadSection) -> SequencePlan | None:
    """The plan for a stateful ``config`` (None for any other model): its sequences from
    ``load.input_data`` in perf_analyzer's sequence layout, else lengths from
    ``load.sequence``; its steps are :func:`sequence_samples`' requests."""
    check_sequence_load(config, load)
    if not sends_sequences(config):
        return None
    _, sequences = sequence_samples(config, load)
    section = load.sequence
    length = section.length if section is not None else None
    return SequencePlan(
        protocol=load.protocol, sequences=sequences,
        low=(length.low or 1) if length else DEFAULT_LENGTH,
        high=(length.high or 1) if length else DEFAULT_LENGTH,
        seed=(section.seed or 0) if section is not None else 0,
        string_ids=id_type(config, load) == "string",
        active=section.active if section is not None else DEFAULT_ACTIVE)


def run_sequence(url: str, model_name: str, steps: Sequence[Sample], corrid: int | str,
                 timeout_s: float = 30.0) -> list[dict[str, np.ndarray[Any, Any]]]:
    """Send ``steps`` as one sequence (ID ``corrid``, start flag on the first, end flag on the
    last) over gRPC at ``url`` and return each step's outputs by name."""
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import np_to_triton_dtype

    if not steps:
        raise MeasurementError("a sequence needs at least one step, but got none")
    client = grpcclient.InferenceServerClient(url)
    try:
        out = []
        for j, sample in enumerate(steps):
            inputs = []
            for name, arr in sample.items():
                tensor = grpcclient.InferInput(name, list(arr.shape), np_to_triton_dtype(arr.dtype))
                tensor.set_data_from_numpy(arr)
                inputs.append(tensor)
            result = client.infer(model_name, inputs, sequence_id=corrid,
                                  sequence_start=j == 0, sequence_end=j == len(steps) - 1,
                                  client_timeout=timeout_s)
            response = result.get_response()
            out.append({o.name: result.as_numpy(o.name) for o in response.outputs})
        return out
    finally:
        client.close()
