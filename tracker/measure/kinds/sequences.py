"""Sequences: a stateful model (one with a sequence batcher, tracker/triton/sequence.py) sent
whole sequences. A level kind of its own, for concurrency and for request-rate levels.

Closed loop (concurrency N): N slots, each running one sequence after another; so N is the
number of sequences in flight, as perf_analyzer counts them. A step is sent when the previous
step of its sequence has answered. Request rate (perf_analyzer's meaning): steps are sent on
the schedule, each to one of ``load.sequence.active`` open sequences whose previous step has
answered (when none is free the step waits, and counts as late past 1 ms).

Each step is one of the load's pre-built payloads (the steps of
:func:`~tracker.measure.sequence_steps.sequence_samples`) with the sequence's correlation ID
and start/end flags added (:func:`~tracker.measure.sequence_steps.with_sequence`); IDs come
from :class:`~tracker.measure.sequence_steps.CorrelationIds`, fresh per start and per load
process (:meth:`Sequences.for_process`), so they never collide. A failed step abandons its
sequence (the next one gets a new ID); a sequence open when the load stops is ended with one
more step carrying the end flag, so the server frees its slot (it is not a whole sequence).

Per request the figures are any load's; the field ``sequence_ns`` is the whole sequence's
latency (its first step sent to its last step answered) on a sequence's last step and -1 on
every other step, so sequences are cut into windows with the requests, by their end. The slot
tells :meth:`Sequences.record` which step it is sending through a context variable (each slot
is a task of its own); ``record`` marks the step answered (a step not answered failed) and
hands each whole sequence to ``on_sequence`` (its ID, step indices and last response; for
tests and probes). The metrics: perf_sequence_throughput (whole sequences ended per second)
and perf_sequence_latency_avg/p50/p90/p99.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from tracker.errors import MeasurementError
from tracker.measure.kinds.concurrency import Concurrency
from tracker.measure.kinds.load_kind import Ints, Level, LoadKind, Slots
from tracker.measure.kinds.rate import LATE_NS, RequestRate
from tracker.measure.percentiles import summarize_latencies
from tracker.measure.sequence_steps import (
    CorrelationIds,
    SequencePlan,
    sequence_plan,
    sequence_samples,
    with_sequence,
)

if TYPE_CHECKING:
    from tracker.measure.inputs import Sample
    from tracker.measure.types import Measurement
    from tracker.spec.sections import LoadSection
    from tracker.triton.model_config import ModelConfig

#: (correlation ID, payload indices of its steps, the last step's response)
OnSequence = Callable[[int, tuple[int, ...], object], None]


@dataclass
class _Step:
    """The step a slot is sending: ``first_ns`` its sequence's first send, ``whole`` a whole
    sequence's last step (not one cut short by the stop)."""

    corrid: int
    steps: tuple[int, ...]
    first_ns: int
    whole: bool
    answered: bool = False


_STEP: ContextVar[_Step | None] = ContextVar("tracker_sequence_step", default=None)


@dataclass(frozen=True)
class Sequences(LoadKind):
    """Closed-loop sequences: a level is the number of sequences in flight."""

    name: ClassVar[str] = "sequences"
    level_key: ClassVar[str | None] = "concurrency"
    fields: ClassVar[tuple[str, ...]] = ("sequence_ns",)
    metrics: ClassVar[tuple[str, ...]] = (
        "perf_sequence_throughput", "perf_sequence_latency_avg", "perf_sequence_latency_p50",
        "perf_sequence_latency_p90", "perf_sequence_latency_p99")
    plan: SequencePlan = field(default_factory=SequencePlan)
    process: int = 0
    on_sequence: OnSequence | None = field(default=None, compare=False)
    _starts: list[int] = field(default_factory=lambda: [0], compare=False, repr=False)

    @classmethod
    def of(cls, config: ModelConfig, load: LoadSection) -> LoadKind | None:
        if config is None:  # load_levels without a config: the load section's own kind
            return None
        plan = sequence_plan(config, load)
        if plan is None:
            return None
        return SequenceRate(plan) if load.request_rate else Sequences(plan)

    def samples(self, config: ModelConfig, load: LoadSection) -> list[Sample] | None:
        """The sequence steps: a slot's requests are indices into them, in their order."""
        if load.shared_memory != "none":
            raise MeasurementError(f"load.shared_memory is {load.shared_memory!r}, but model "
                                   f"{str(config.name)!r} is stateful: its sequence steps are "
                                   "sent in the requests (use 'none')")
        return sequence_samples(config, load)[0]

    def for_process(self, index: int) -> LoadKind:
        return type(self)(self.plan, index)

    def levels(self, load: LoadSection, override: Sequence[float] | None) -> list[Level]:
        return Concurrency().levels(load, override)

    def split(self, level: Level, parts: int) -> list[Level]:
        return Concurrency().split(level, parts)

    def slots(self, gen: Slots, level: Level) -> list[Coroutine[Any, Any, None]]:
        ids, rng = self._start()
        return [self._closed(gen, ids, rng(k), k) for k in range(int(level.concurrency or 0))]

    def _start(self) -> tuple[CorrelationIds, Callable[[int], np.random.Generator]]:
        """A start's IDs (a new prefix: no ID is reused) and each slot's RNG."""
        self._starts[0] += 1
        start = self._starts[0]
        return CorrelationIds(self.process), lambda slot: np.random.default_rng(
            [self.plan.seed, self.process, slot, start])

    async def _closed(self, gen: Slots, ids: CorrelationIds, rng: np.random.Generator,
                      slot: int) -> None:
        count = 0
        while not gen.stopping:
            await self._sequence(gen, ids.next(),
                                 self.plan.steps_of(rng, slot + count, len(gen.payloads)))
            count += 1

    async def _sequence(self, gen: Slots, corrid: int, steps: Sequence[int],
                        gate: _Gate | None = None) -> None:
        """One whole sequence. With a ``gate`` (request-rate mode) each step waits for the
        schedule."""
        first = time.perf_counter_ns()
        for j, index in enumerate(steps):
            last = j == len(steps) - 1
            if gate is not None:
                await gate.wait()
            if gen.stopping and j == 0:
                if gate is not None:
                    gate.release()
                return
            cut = gen.stopping and not last  # end it now: the server frees the slot
            step = _Step(corrid, tuple(steps), first, whole=last)
            _STEP.set(step)
            try:
                await gen.send(with_sequence(self.plan, gen.payloads[index], corrid, j == 0,
                                             last or cut))
            finally:
                _STEP.set(None)
                if gate is not None:
                    gate.release()
            if last or cut or not step.answered:  # a failed step abandons the sequence
                return

    def record(self, t0: int, t1: int, got: object) -> tuple[int, tuple[int, ...]] | None:
        step = _STEP.get()
        if step is None:
            return t1 - t0, (-1,)
        step.answered = True
        if not step.whole:
            return t1 - t0, (-1,)
        if self.on_sequence is not None:
            self.on_sequence(step.corrid, step.steps, got)
        return t1 - t0, (t1 - step.first_ns,)

    def add_metrics(self, m: Measurement, fields: Mapping[str, Ints]) -> None:
        whole = fields["sequence_ns"]
        whole = whole[whole >= 0]
        m.sequence_throughput = whole.size / m.duration_s if m.duration_s else 0.0
        seq = summarize_latencies(whole)
        if seq is not None:
            m.sequence_latency_avg_ms, m.sequence_latency_p50_ms = seq.avg_ms, seq.p50_ms
            m.sequence_latency_p90_ms, m.sequence_latency_p99_ms = seq.p90_ms, seq.p99_ms


@dataclass(frozen=True)
class SequenceRate(Sequences):
    """Sequences at a request rate: a level is steps per second over ``plan.active`` open
    sequences."""

    level_key: ClassVar[str | None] = "request_rate"

    def levels(self, load: LoadSection, override: Sequence[float] | None) -> list[Level]:
        return RequestRate().levels(load, override)

    def split(self, level: Level, parts: int) -> list[Level]:
        return RequestRate().split(level, parts)

    def slots(self, gen: Slots, level: Level) -> list[Coroutine[Any, Any, None]]:
        if float(level.request_rate or 0.0) <= 0:
            return []
        ids, rng = self._start()
        free: asyncio.Queue[int] = asyncio.Queue()
        gates = [_Gate(free, slot) for slot in range(self.plan.active)]
        for gate in gates:
            free.put_nowait(gate.slot)
        return [self._schedule(gen, level, gates, free),
                *(self._open_slot(gen, ids, rng(g.slot), g) for g in gates)]

    async def _schedule(self, gen: Slots, level: Level, gates: list[_Gate],
                        free: asyncio.Queue[int]) -> None:
        gap = 1e9 / float(level.request_rate or 1.0)
        now = time.perf_counter_ns
        scheduled = (level.start_ns if level.start_ns > 0 else now()) + level.phase * gap
        while not gen.stopping:
            t = now()
            if scheduled > t:
                await asyncio.sleep((scheduled - t) * 1e-9)
                continue
            slot = await free.get()
            if now() - scheduled > LATE_NS:
                gen.late += 1
            gates[slot].open.set()
            scheduled += gap
        for gate in gates:  # let every slot end its sequence
            gate.open.set()

    async def _open_slot(self, gen: Slots, ids: CorrelationIds, rng: np.random.Generator,
                         gate: _Gate) -> None:
        count = 0
        while not gen.stopping:
            steps = self.plan.steps_of(rng, gate.slot + count * self.plan.active,
                                       len(gen.payloads))
            await self._sequence(gen, ids.next(), steps, gate)
            count += 1


class _Gate:
    """One request-rate slot's turn: the schedule opens it for one step; the answered step
    puts the slot back among the free ones."""

    def __init__(self, free: asyncio.Queue[int], slot: int) -> None:
        self.free, self.slot = free, slot
        self.open = asyncio.Event()

    async def wait(self) -> None:
        await self.open.wait()
        self.open.clear()

    def release(self) -> None:
        self.free.put_nowait(self.slot)
