"""Probes: a fixed set of requests whose answers say whether a configuration computes what the
default configuration computes (docs/tuning.md, "Every proposal computes what the model
computes").

A :class:`ProbeSet` holds the requests and the default's answers to them (an answer is the
outputs by name, or the error message when the request failed). :func:`ask` sends them to a
model on a server, one at a time or all at once (so that a dynamic batcher gathers them into
batches of different requests); :func:`compare` says whether other answers are the same:
integer, bool and string outputs equal, floating outputs within ``atol + rtol * |expected|``.
:func:`dumps`/:func:`loads` store a probe set as one ``.npz`` (no pickles), the artifact that
a resumed or scaled-out study and a deployment compare against.

Only this module knows the comparison; the study (study/check_outputs.py) and the deployment
(deploy/) call it. A sequence model's probes would be whole sequences sent under correlation
IDs: that is :func:`ask`'s ``send`` argument (one request by default).
"""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from tracker.errors import TrackerError

Array = np.ndarray[Any, Any]
Tensors = dict[str, tuple[str, Array]]   # input name -> (Triton datatype, array)
Answer = dict[str, Array] | str          # the outputs by name, or why the request failed
ARTIFACT = "check/reference.npz"         # the stored probe set on a study's parent run
HEAD = 4                                 # values shown of an expected/got array
COPIES = 8                               # each probe sent this many times when together


class Infers(Protocol):
    """What :func:`ask` needs of a client (TritonClient, HttpTritonClient, the deploy one)."""

    def infer_tensors(self, name: str, tensors: Mapping[str, tuple[str, Array]], *,
                      version: int | None = None,
                      outputs: Sequence[str] = ()) -> dict[str, Array]: ...


Send = Callable[[Infers, str, Tensors, Sequence[str], "int | None"], dict[str, Array]]


def send_one(client: Infers, model: str, tensors: Tensors, outputs: Sequence[str],
             version: int | None) -> dict[str, Array]:
    """One probe as one request (a sequence model's probe would be a whole sequence)."""
    return client.infer_tensors(model, tensors, version=version, outputs=outputs)


@dataclass(frozen=True)
class Tolerance:
    rtol: float
    atol: float
    ignore: frozenset[str] = frozenset()


@dataclass(frozen=True)
class ProbeSet:
    """The probes, the outputs compared, and the default configuration's answers."""

    inputs: list[Tensors]
    outputs: list[str]
    answers: list[Answer] = field(default_factory=list)


@dataclass(frozen=True)
class Verdict:
    """The comparison of a configuration's answers with the default's. ``max_abs_diff`` is
    the largest difference of any compared value (inf: a shape, string or error differs)."""

    passed: bool
    max_abs_diff: float
    detail: str = ""  # empty when passed: which output, which probe, expected and got


def _answer(client: Infers, model: str, tensors: Tensors, outputs: Sequence[str],
            version: int | None, send: Send) -> Answer:
    try:
        return send(client, model, tensors, outputs, version)
    except TrackerError as err:
        return f"error: {err}"


def ask(client: Infers, model: str, probes: Sequence[Tensors], outputs: Sequence[str], *,
        version: int | None = None, together: bool = False, send: Send = send_one
        ) -> list[Answer]:
    """The answers of ``model`` to ``probes``: one after another, or (``together``) each
    probe :data:`COPIES` times, every request in its own thread, all released at once, so
    that they reach the server's scheduler within microseconds of each other and the
    instances are busy while the rest queue (the answers: ``copies x len(probes)``, probe
    order repeated)."""
    if not together or len(probes) < 2:
        return [_answer(client, model, p, outputs, version, send) for p in probes]
    requests = list(probes) * COPIES
    start = threading.Barrier(len(requests))

    def one(tensors: Tensors) -> Answer:
        start.wait()
        return _answer(client, model, tensors, outputs, version, send)

    with ThreadPoolExecutor(max_workers=len(requests), thread_name_prefix="probe") as pool:
        return list(pool.map(one, requests))


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
            how: str = "") -> Verdict:
    """Whether ``got`` (answers to ``reference``'s probes) are the default's answers.
    ``how`` names how they were sent, for the message ("sent together")."""
    largest, first = 0.0, ""
    sent = f" ({how})" if how else ""
    wanted = list(reference.answers) * (len(got) // max(len(reference.answers), 1))
    for k, (want, have) in enumerate(zip(wanted, got, strict=True)):
        i = k % len(reference.answers)
        if isinstance(want, str) or isinstance(have, str):
            if isinstance(want, str) and isinstance(have, str):
                continue  # both refuse the probe: the same function, as far as it shows
            largest = float("inf")
            first = first or (f"probe {i}{sent}: the default answered "
                              f"{_show_answer(want)}, this configuration "
                              f"{_show_answer(have)}")
            continue
        for out in reference.outputs:
            if out in tol.ignore:
                continue
            ok, diff = _difference(want[out], have[out], tol)
            largest = max(largest, diff)
            if not ok and not first:
                first = (f"output {out!r} of probe {i}{sent}: expected {_head(want[out])}"
                         f"{_shape(want[out], have[out])}, got {_head(have[out])}")
    if first:
        first += (f"; largest difference {largest:.3g} (allowed: atol {tol.atol:g} + "
                  f"rtol {tol.rtol:g} x |expected|)")
    return Verdict(not first, largest, first)


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
    meta: dict[str, Any] = {"outputs": probes.outputs, "inputs": [], "errors": {}}
    for i, tensors in enumerate(probes.inputs):
        meta["inputs"].append([[name, dt] for name, (dt, _) in tensors.items()])
        for j, (_, array) in enumerate(tensors.values()):
            arrays[f"in_{i}_{j}"] = _stored(array)
    for i, answer in enumerate(probes.answers):
        if isinstance(answer, str):
            meta["errors"][str(i)] = answer
            continue
        for j, out in enumerate(probes.outputs):
            arrays[f"out_{i}_{j}"] = _stored(answer[out])
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
        for i in range(len(inputs)):
            error = meta["errors"].get(str(i))
            answers.append(error if error is not None else {
                out: _restored(npz[f"out_{i}_{j}"]) for j, out in enumerate(meta["outputs"])})
    return ProbeSet(inputs, list(meta["outputs"]), answers)
