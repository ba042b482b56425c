"""SIGINT and SIGTERM through tracker/lifecycle.py, in this process (the main thread): which
signal an interrupt names and its exit code, what a held block does with a signal, also a
second one during the cleanup after the first, and a block that runs until a signal."""

from __future__ import annotations

import signal
import threading

import pytest

from tracker.lifecycle import Interrupted, held, interruptible, until_signal


def test_a_signal_inside_an_interruptible_block_leaves_it_as_interrupted() -> None:
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    for sig, code in ((signal.SIGTERM, 143), (signal.SIGINT, 130)):
        reached = []
        with pytest.raises(Interrupted) as stop, interruptible("run it again"):
            signal.raise_signal(sig)
            reached.append(sig)
        assert reached == [], "the signal did not stop the block where it arrived"
        assert (stop.value.signum, stop.value.exit_code) == (sig, code)
        assert str(stop.value) == f"stopped by {sig.name}; run it again"
    assert {s: signal.getsignal(s) for s in before} == before, "handlers not restored"


def test_a_held_signal_waits_for_the_end_of_the_block() -> None:
    done: list[str] = []
    with pytest.raises(Interrupted) as stop, interruptible():
        with held():
            with held():  # nested: the outermost block delivers
                signal.raise_signal(signal.SIGTERM)
                done.append("inner")
            done.append("outer")
        done.append("after")
    assert done == ["inner", "outer"]
    assert stop.value.exit_code == 143


def test_a_second_signal_during_the_cleanup_neither_cuts_it_short_nor_changes_the_code() -> None:
    done: list[str] = []
    with pytest.raises(Interrupted) as stop, interruptible():
        try:
            signal.raise_signal(signal.SIGTERM)
        finally:
            with held():  # the rollback after the first signal
                signal.raise_signal(signal.SIGINT)
                done.append("rolled back")
    assert done == ["rolled back"]
    assert stop.value.exit_code == 143, "the second signal replaced the first"


def test_a_held_signal_goes_first_over_an_error_but_not_over_an_interrupt() -> None:
    with pytest.raises(Interrupted) as stop, interruptible(), held():
        signal.raise_signal(signal.SIGINT)
        raise ValueError("the block's own error")
    assert stop.value.exit_code == 130
    interrupt = stop.value.__context__
    assert interrupt is not None and isinstance(interrupt.__context__, ValueError), \
        "the block's error is lost"
    with pytest.raises(Interrupted) as stop, interruptible(), held():
        signal.raise_signal(signal.SIGINT)
        raise Interrupted(signal.SIGTERM)
    assert stop.value.exit_code == 143


def test_until_a_signal_the_first_ends_the_block_quietly_and_a_second_is_ignored() -> None:
    done: list[str] = []
    with until_signal() as stop:
        try:
            signal.raise_signal(signal.SIGTERM)
            done.append("went on")
        finally:
            signal.raise_signal(signal.SIGINT)  # during the cleanup
            done.append("cleaned up")
    assert stop.is_set() and done == ["cleaned up"]


def test_off_the_main_thread_the_blocks_only_run_their_body() -> None:
    seen: list[object] = []

    def work() -> None:
        with interruptible(), held(), until_signal() as stop:
            seen.append(signal.getsignal(signal.SIGTERM))
            seen.append(stop.is_set())

    before = signal.getsignal(signal.SIGTERM)
    thread = threading.Thread(target=work)
    thread.start()
    thread.join(10)
    assert seen == [before, False]
