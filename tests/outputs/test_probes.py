"""The output comparison (tracker/outputs/probes.py): what counts as the same answer, what the
message of a different one says, and the stored form a resumed study and a deployment read."""

from __future__ import annotations

import math
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest

from tracker.errors import MeasurementError
from tracker.outputs import probes
from tracker.outputs.probes import ProbeSet, Tolerance
from tracker.triton.infer import Request

TOL = Tolerance(rtol=1e-4, atol=1e-5)


def _ref(*answers: probes.Answer, outputs: tuple[str, ...] = ("OUT",)) -> ProbeSet:
    inputs = [{"IN": ("FP32", np.zeros((1, 2), np.float32))} for _ in answers]
    return ProbeSet(inputs, list(outputs), list(answers))


def test_floats_pass_within_the_tolerance_and_fail_beyond_it() -> None:
    ref = _ref({"OUT": np.array([[1.0, 100.0]], np.float32)})
    close = probes.compare(ref, [{"OUT": np.array([[1.000005, 100.005]], np.float32)}], TOL)
    assert close.passed and 0 < close.max_abs_diff < 0.01
    far = probes.compare(ref, [{"OUT": np.array([[1.0, 100.5]], np.float32)}], TOL,
                         "sent together")
    assert not far.passed and math.isclose(far.max_abs_diff, 0.5, rel_tol=1e-3)
    assert "output 'OUT' of probe 0 (sent together)" in far.detail
    assert "expected [1, 100]" in far.detail and "got [1, 100.5]" in far.detail
    assert "largest difference 0.5" in far.detail


def test_integers_bools_and_strings_must_be_equal() -> None:
    for want, got in ((np.array([3], np.int64), np.array([4], np.int64)),
                      (np.array([True]), np.array([False])),
                      (np.array([b"a"], np.object_), np.array([b"b"], np.object_))):
        assert not probes.compare(_ref({"OUT": want}), [{"OUT": got}], TOL).passed
        assert probes.compare(_ref({"OUT": want}), [{"OUT": want.copy()}], TOL).passed


def test_shape_nan_error_and_ignored_outputs() -> None:
    ref = _ref({"OUT": np.array([1.0, np.nan], np.float32), "T": np.array([5], np.int64)},
               outputs=("OUT", "T"))
    same = {"OUT": np.array([1.0, np.nan], np.float32), "T": np.array([9], np.int64)}
    assert not probes.compare(ref, [same], TOL).passed  # T differs
    assert probes.compare(ref, [same], Tolerance(1e-4, 1e-5, frozenset({"T"}))).passed
    shape = probes.compare(ref, [{"OUT": np.ones(3, np.float32), "T": np.array([5])}], TOL)
    assert not shape.passed and "shape [2], got shape [3]" in shape.detail
    refused = probes.compare(ref, ["error: INVALID_ARGUMENT"], TOL)
    assert not refused.passed and "INVALID_ARGUMENT" in refused.detail
    # both refuse a probe (a sequence model without its correlation ID): no difference shown
    assert probes.compare(_ref("error: a"), ["error: b"], TOL).passed
    # the default refused, this configuration answers: a different function
    assert not probes.compare(_ref("error: a"), [{"OUT": np.ones(1)}], TOL).passed


def test_answers_to_repeated_probes_are_compared_with_their_own_probe() -> None:
    ref = _ref({"OUT": np.array([1.0])}, {"OUT": np.array([2.0])})
    good = [{"OUT": np.array([1.0])}, {"OUT": np.array([2.0])}] * probes.COPIES
    assert probes.compare(ref, good, TOL).passed
    bad = list(good)
    bad[-1] = {"OUT": np.array([1.0])}
    verdict = probes.compare(ref, bad, TOL)
    assert not verdict.passed and "probe 1" in verdict.detail


def test_stored_and_read_back_without_pickles() -> None:
    ref = ProbeSet(
        [{"A": ("FP32", np.arange(4, dtype=np.float32).reshape(1, 4)),
          "S": ("BYTES", np.array([[b"hello"]], np.object_))},
         {"A": ("FP32", np.ones((1, 4), np.float32)),
          "S": ("BYTES", np.array([[b"x"]], np.object_))}],
        ["OUT", "TXT"],
        [{"OUT": np.array([[0.5]], np.float32), "TXT": np.array([[b"hi"]], np.object_)},
         "error: refused"])
    back = probes.loads(probes.dumps(ref))
    assert back.outputs == ["OUT", "TXT"] and back.answers[1] == "error: refused"
    assert back.inputs[0]["S"][0] == "BYTES" and back.inputs[0]["S"][1].dtype == np.object_
    assert back.inputs[0]["S"][1][0, 0] == b"hello"
    np.testing.assert_array_equal(back.inputs[1]["A"][1], np.ones((1, 4), np.float32))
    first = back.answers[0]
    assert isinstance(first, dict) and first["TXT"][0, 0] == b"hi"
    assert probes.compare(ref, back.answers, TOL).passed


def test_sequence_and_stream_probe_sets_keep_their_kind_and_their_steps() -> None:
    """A stateful model's probe is its steps stacked (requests: the steps); a decoupled
    model's answer is its responses stacked, or flattened end to end when their shapes
    differ; both kinds survive storage."""
    from tracker.triton.infer import joined

    steps = np.arange(3, dtype=np.int32).reshape(3, 1, 1)
    seq = ProbeSet([{"IN": ("INT32", steps)}], ["SUM"], [{"SUM": steps.astype(np.int64)}],
                   sequence="uint")
    assert seq.requests(0) == 3 and _ref({"OUT": np.ones(1)}).requests(0) == 1
    back = probes.loads(probes.dumps(seq))
    assert back.sequence == "uint" and not back.stream
    assert probes.loads(probes.dumps(ProbeSet([], ["Y"], [], stream=True))).stream
    same = joined([{"Y": np.array([1.0, 2.0])}, {"Y": np.array([3.0, 4.0])}], ["Y"])
    assert same["Y"].shape == (2, 2)
    ragged = joined([{"Y": np.array([1.0])}, {"Y": np.array([2.0, 3.0])}], ["Y"])
    np.testing.assert_array_equal(ragged["Y"], [1.0, 2.0, 3.0])
    assert joined([], ["Y"])["Y"].shape == (0,)


def test_an_interrupt_while_the_requests_are_handed_out_does_not_hang(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C during the together phase's hand-out left the threads already started waiting
    for the rest for ever (a `tracker tune` that never stopped)."""
    sent: list[int] = []

    class Interrupted(ThreadPoolExecutor):
        def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future[Any]:
            if len(sent) == 3:
                raise KeyboardInterrupt
            sent.append(1)
            return super().submit(fn, *args, **kwargs)

    monkeypatch.setattr(probes, "ThreadPoolExecutor", Interrupted)
    raised: list[BaseException] = []

    def run() -> None:
        try:
            probes.ask(None, Request("m", {}, ["OUT"]),  # type: ignore[arg-type]
                       [{"IN": ("FP32", np.zeros((1, 2), np.float32))}] * 2, together=True,
                       send=lambda *a: {})
        except BaseException as exc:
            raised.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout=20)
    assert not thread.is_alive(), "ask hung after the interrupt"
    assert len(sent) == 3 and [type(e) for e in raised] == [KeyboardInterrupt]


def test_requests_that_cannot_all_start_fail_with_the_cause(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(probes, "BARRIER_S", 0.2)

    class OneThread(ThreadPoolExecutor):  # the rest can never reach the barrier
        def __init__(self, max_workers: int, thread_name_prefix: str) -> None:
            super().__init__(max_workers=1, thread_name_prefix=thread_name_prefix)

    monkeypatch.setattr(probes, "ThreadPoolExecutor", OneThread)
    with pytest.raises(MeasurementError, match=r"did not all start within 0\.2 s"):
        probes.ask(None, Request("m", {}, ["OUT"]),  # type: ignore[arg-type]
                   [{"IN": ("FP32", np.zeros((1, 2), np.float32))}] * 2, together=True,
                   send=lambda *a: {})
