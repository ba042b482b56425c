"""Probes: a fixed set of requests whose answers say whether a configuration computes what the
default configuration computes (docs/output-check.md).

A :class:`ProbeSet` holds the requests and the default's answers to them (an answer is the
outputs by name, or the error message when the request failed). :func:`ask` sends them to a
model on a server, one at a time or all at once (so that a dynamic batcher gathers them into
batches of different requests); :func:`compare` says whether other answers are the same:
integer, bool and string outputs equal, floating outputs within ``atol + rtol * |expected|``.
:func:`dumps`/:func:`loads` store a probe set as one ``.npz`` (no pickles), the artifact that
a resumed or scaled-out study and a deployment compare against.

Only this module knows the comparison; the study (outputs/trials.py) and the deployment
(deploy/) call it. A stateful model's probe is a whole sequence (:func:`send_sequence`): its
inputs are the steps stacked on a first axis, each step sent as one request under the probe's
own correlation ID (start flag on the first, end flag on the last), and its answer is the
steps' outputs stacked the same way; a stateful decoupled model's steps are each streamed, and
the answer is every step's responses in order. A decoupled model's probe is one request whose
answer is its whole response stream (:func:`send_stream`). :meth:`ProbeSet.ask` sends a probe
set's probes the way they were made, whatever the configuration asked now is.

Correlation IDs are never used twice on one load of a model: a check sends the probes one at a
time at positions ``0 .. n-1`` and, together, at the positions after them
(:meth:`ProbeSet.together_from`), so a model that keeps each sequence's state for its
lifetime (Triton's ``sequence_py``) never sees a start for an ID it holds.
"""

from __future__ import annotations

import dataclasses
import io
import json
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tracker.errors import MeasurementError, TrackerError
from tracker.triton.infer import InferClient, Request, answer, joined, sequence_answers

Array = np.ndarray[Any, Any]
Tensors = dict[str, tuple[str, Array]]   # input name -> (Triton datatype, array)
Answer = dict[str, Array] | str          # the outputs by name, or why the request failed
ARTIFACT = "check/reference.npz"         # the stored probe set on a study's parent run
HEAD = 4                                 # values shown of an expected/got array
COPIES = 8                               # each probe sent this many times when together


BARRIER_S = 60.0  # the longest the requests sent together wait for each other to start
Send = Callable[[InferClient, Request, int], dict[str, Array]]  # a probe at a position
#: the correlation ID of the sequence probe at position ``k`` of an ask is ``ID_BASE + k``:
#: the same in the default's answers and in every trial's, so that a model whose outputs
#: depend on the ID (Triton's simple_dyna_sequence adds it on the last step) is compared with
#: the answer to the same ID. Each trial serves a fresh load of the model, and one check uses
#: each position once (the module docstring).
ID_BASE = 1_000_001


def send_one(client: InferClient, request: Request, position: int = 0) -> dict[str, Array]:
    """One probe as one request."""
    return client.infer_tensors(request)


def send_stream(client: InferClient, request: Request, position: int = 0) -> dict[str, Array]:
    """One probe of a decoupled model: one request, its whole response stream as one answer
    (every response's outputs stacked on a first axis)."""
    return answer(client, request, stream=True)


def _sequence_sender(ids: str, stream: bool) -> Send:
    def send(client: InferClient, request: Request, position: int = 0) -> dict[str, Array]:
        return send_sequence(client, request, corrid=ID_BASE + position,
                             string_ids=ids == "string", stream=stream)
    return send


def send_sequence(client: InferClient, request: Request, *, corrid: int = ID_BASE,
                  string_ids: bool = False, stream: bool = False) -> dict[str, Array]:
    """One probe as one whole sequence: step ``j`` is every input's ``[j]``, sent under
    correlation ID ``corrid`` (``string_ids``: as a decimal string); the outputs of the steps
    stacked on a first axis. ``stream`` (a decoupled model): each step is streamed, and the
    answer is every step's responses in order (:func:`~tracker.triton.infer.joined` of the
    steps' own)."""
    tensors, outputs = request.tensors, request.outputs
    steps = [{n: (dt, a[j]) for n, (dt, a) in tensors.items()}
             for j in range(len(next(iter(tensors.values()))[1]))]
    answers = sequence_answers(client, dataclasses.replace(
        request, sequence_id=str(corrid) if string_ids else corrid), steps, stream)
    return joined(answers, outputs) if stream else {
        out: np.stack([a[out] for a in answers]) for out in outputs}


@dataclass(frozen=True)
class Tolerance:
    rtol: float
    atol: float
    ignore: frozenset[str] = frozenset()


@dataclass(frozen=True)
class ProbeSet:
    """The probes, the outputs compared, and the default configuration's answers.
    ``sequence`` (``"uint"`` or ``"string"``, the correlation IDs' kind): each probe is a
    whole sequence, its steps stacked on the inputs' first axis."""

    inputs: list[Tensors]
    outputs: list[str]
    answers: list[Answer] = field(default_factory=list)
    sequence: str = ""
    stream: bool = False  # a decoupled model's: each answer is a whole response stream

    def requests(self, i: int) -> int:
        """How many requests the probe asked at position ``i`` is (a sequence's steps; else
        one)."""
        tensors = self.inputs[i % len(self.inputs)]
        return len(next(iter(tensors.values()))[1]) if self.sequence else 1

    def positions(self) -> list[Tensors]:
        """Every position a check that also sends the probes together asks: for a sequence
        set, the probes one at a time and then each probe :data:`COPIES` times (each position
        has its own correlation ID, so the default answers each one), else each probe once."""
        return list(self.inputs) * (1 + COPIES if self.sequence else 1)

    def together_from(self) -> int:
        """The first position of the probes sent together: after those sent one at a time
        for a sequence set (so no correlation ID is used twice), else 0."""
        return len(self.inputs) if self.sequence else 0

    def ask(self, client: InferClient, model: str, *, version: int | None = None,
            together: bool = False, times: list[float] | None = None,
            every_position: bool = False, start: int | None = None) -> list[Answer]:
        """:func:`ask` with this set's probes, sent as they were made (whole sequences), from
        position ``start`` (default: 0, or :meth:`together_from` when ``together``);
        ``every_position``: one at a time at each of :meth:`positions` (the reference)."""
        asked = self.positions() if every_position else self.inputs
        begin = start if start is not None else self.together_from() if together else 0
        return ask(client, Request(model, {}, self.outputs, version), asked,
                   together=together, times=times, start=begin,
                   send=_sequence_sender(self.sequence, self.stream) if self.sequence
                   else send_stream if self.stream else send_one)


@dataclass(frozen=True)
class Comparison:
    """The comparison of a configuration's answers with the default's. ``max_abs_diff`` is
    the largest difference of any compared value (inf: a shape, string or error differs)."""

    passed: bool
    max_abs_diff: float
    detail: str = ""  # empty when passed: which output, which probe, expected and got
    error: str = ""   # the configuration's first error answer where the default answered


def _answer(client: InferClient, request: Request, send: Send, position: int) -> Answer:
    try:
        return send(client, request, position)
    except TrackerError as err:
        return f"error: {err}"


def ask(client: InferClient, asked: Request, probes: Sequence[Tensors], *,
        together: bool = False, send: Send = send_one, times: list[float] | None = None,
        start: int = 0) -> list[Answer]:
    """The answers to ``probes``, each sent as ``asked`` (its model, outputs and version)
    with the probe's inputs: one after another (each one's seconds
    appended to ``times``), or (``together``) each probe :data:`COPIES` times, every
    request in its own thread, all released at once, so that they reach the server's
    scheduler within microseconds of each other and the instances are busy while the rest
    queue (the answers: ``copies x len(probes)``, probe order repeated). The request at
    index ``k`` is at position ``start + k`` (its correlation ID, for a sequence)."""
    if not together or len(probes) < 2:
        answers = []
        for k, p in enumerate(probes):
            started = time.perf_counter()
            answers.append(_answer(client, dataclasses.replace(asked, tensors=p), send,
                                   start + k))
            if times is not None:
                times.append(time.perf_counter() - started)
        return answers
    requests = list(probes) * COPIES
    gate = threading.Barrier(len(requests), timeout=BARRIER_S)

    def one(k: int) -> Answer:
        try:
            gate.wait()
        except threading.BrokenBarrierError as err:
            raise MeasurementError(f"the {len(requests)} probe requests sent together did "
                                   f"not all start within {BARRIER_S:g} s") from err
        return _answer(client, dataclasses.replace(asked, tensors=requests[k]), send, start + k)

    pool = ThreadPoolExecutor(max_workers=len(requests), thread_name_prefix="probe")
    try:
        futures = [pool.submit(one, k) for k in range(len(requests))]
        return [f.result() for f in futures]
    except BaseException:
        # Ctrl-C while the requests were being handed out: the threads already waiting for
        # the rest would wait for ever, and so would the pool's shutdown below
        gate.abort()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _head(array: Array) -> str:
    """The first few values, as a list (``, ...`` when there are more)."""
    shown = ", ".join(f"{v:.6g}" if isinstance(v, float) else str(v)[:40]
                      for v in array.ravel()[:HEAD].tolist())
    return f"[{shown}{', ...' if array.size > HEAD else ''}]"


def _difference(expected: Array, got: Array, tol: Tolerance) -> tuple[bool, float]:
    """(whether ``got`` passes as ``expected``, the largest absolute difference)."""
    if expected.shape != got.shape:
        return False, float("inf")
    if expected.size == 0:
        return True, 0.0
    if expected.dtype.kind == "f" and got.dtype.kind == "f":
        e, g = expected.astype(np.float64), got.astype(np.float64)
        same_nan = np.isnan(e) == np.isnan(g)
        diff = np.where(np.isnan(e) | np.isnan(g), np.where(same_nan, 0.0, np.inf),
                        np.abs(g - e))
        ok = bool(same_nan.all() and np.all(diff <= tol.atol + tol.rtol * np.abs(
            np.nan_to_num(e))))
        return ok, float(np.max(diff))
    if expected.dtype.kind in "biu" and got.dtype.kind in "biu":
        diff_i = np.abs(got.astype(np.float64) - expected.astype(np.float64))
        largest = float(np.max(diff_i))
        return largest == 0.0, largest
    same = bool(np.array_equal(expected, got))
    return same, 0.0 if same else float("inf")


def compare(reference: ProbeSet, got: Sequence[Answer], tol: Tolerance,
            how: str = "", start: int = 0) -> Comparison:
    """Whether ``got`` (answers to ``reference``'s probes, the first at position ``start``)
    are the default's answers. ``how`` names how they were sent, for the message ("sent
    together")."""
    largest, first, error = 0.0, "", ""
    sent = f" ({how})" if how else ""
    kind = "sequence probe" if reference.sequence else "probe"  # a sequence: steps first
    # the answer at position p is the reference's at p (a sequence set: every position),
    # else the probe's (position p asks probe p mod the probe count)
    wanted = [reference.answers[(start + k) % len(reference.answers)] for k in range(len(got))]
    for k, (want, have) in enumerate(zip(wanted, got, strict=True)):
        i = k % len(reference.inputs)
        if isinstance(want, str) or isinstance(have, str):
            if isinstance(want, str) and isinstance(have, str):
                continue  # both refuse the probe: the same function, as far as it shows
            largest = float("inf")
            if isinstance(have, str) and not error:
                error = f"{kind} {i}{sent}: {have.removeprefix('error: ')}"
            first = first or (f"{kind} {i}{sent}: the default answered "
                              f"{_show_answer(want)}, this configuration "
                              f"{_show_answer(have)}")
            continue
        for out in reference.outputs:
            if out in tol.ignore:
                continue
            ok, diff = _difference(want[out], have[out], tol)
            largest = max(largest, diff)
            if not ok and not first:
                first = (f"output {out!r} of {kind} {i}{sent}: expected {_head(want[out])}"
                         f"{_shape(want[out], have[out])}, got {_head(have[out])}")
    if first:
        first += (f"; largest difference {largest:.3g} (allowed: atol {tol.atol:g} + "
                  f"rtol {tol.rtol:g} x |expected|)")
    return Comparison(not first, largest, first, error)


def _shape(want: Array, have: Array) -> str:
    if want.shape == have.shape:
        return ""
    return f" (shape {list(want.shape)}, got shape {list(have.shape)})"


def _show_answer(answer: Answer) -> str:
    return answer[:300] if isinstance(answer, str) else "its outputs"


# ---- storage -------------------------------------------------------------------------------

def _stored(array: Array) -> Array:
    return array.astype(np.bytes_) if array.dtype == np.object_ else array


def _restored(array: Array) -> Array:
    return array.astype(np.object_) if array.dtype.kind == "S" else array


def dumps(probes: ProbeSet) -> bytes:
    """The probe set as ``.npz`` bytes: ``in_<i>_<j>``/``out_<i>_<j>`` arrays and a JSON
    ``meta`` (input names and datatypes, output names, error answers)."""
    arrays: dict[str, Array] = {}
    meta: dict[str, Any] = {"outputs": probes.outputs, "inputs": [], "errors": {},
                            "sequence": probes.sequence, "stream": probes.stream,
                            "answers": len(probes.answers)}
    for i, tensors in enumerate(probes.inputs):
        meta["inputs"].append([[name, dt] for name, (dt, _) in tensors.items()])
        for j, (_, array) in enumerate(tensors.values()):
            arrays[f"in_{i}_{j}"] = _stored(array)
    for i, got in enumerate(probes.answers):
        if isinstance(got, str):
            meta["errors"][str(i)] = got
            continue
        for j, out in enumerate(probes.outputs):
            arrays[f"out_{i}_{j}"] = _stored(got[out])
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    return buf.getvalue()


def loads(data: bytes) -> ProbeSet:
    """A probe set from :func:`dumps`'s bytes."""
    with np.load(io.BytesIO(data), allow_pickle=False) as npz:
        meta = json.loads(npz["meta"].tobytes().decode())
        inputs = [{name: (dt, _restored(npz[f"in_{i}_{j}"]))
                   for j, (name, dt) in enumerate(names)}
                  for i, names in enumerate(meta["inputs"])]
        answers: list[Answer] = []
        for i in range(int(meta.get("answers", len(inputs)))):
            error = meta["errors"].get(str(i))
            answers.append(error if error is not None else {
                out: _restored(npz[f"out_{i}_{j}"]) for j, out in enumerate(meta["outputs"])})
    return ProbeSet(inputs, list(meta["outputs"]), answers, str(meta.get("sequence", "")),
                    bool(meta.get("stream", False)))
