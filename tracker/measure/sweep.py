"""The sweep: a configuration's entry models measured at once, level after level, stopped
early the way Model Analyzer stops its concurrency sweep. One model is the one-entry call.

Each entry has its own load (tracker/measure/entry.py ``EntryLoad``: its load kinds, levels,
requests, composing models). Level ``i`` of the sweep is level ``i`` of every entry at once;
an entry whose list is shorter stays at its last level while the others go on. The entries
share the windows (tracker/measure/level.py). After each level the sweep stops when
- an entry's level is invalid (errors above the threshold, server not answering),
- a latency constraint (``perf_latency_*``, ``perf_time_to_first_token_*``,
  ``perf_inter_token_latency_*``: ``{max: ...}``) is broken: more load on a shared server
  only adds latency (``<model>/<metric>`` bounds one entry, a bare name every entry:
  tracker.feasibility.for_models),
- every entry's last 3 levels gained under 5% throughput over the level before them
  (throughput has saturated; Model Analyzer's rule).
Whether a constraint is broken is tracker/feasibility.py's rule; which level a configuration
is judged by is chosen above this layer (search/objective.py). A planner
(search/sweep_plan.py) may choose the levels instead of the list's order, or set them itself
(:class:`Probe`: the capacity search's rates, search/capacity.py).
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from tracker.errors import MeasurementError
from tracker.feasibility import for_models, stops_sweep
from tracker.measure.entry import (
    EntryLoad,
    Opened,
    check_models,
    load_levels,
    open_entry,
    probe_level,
    settings_from,
    shared_windows,
    stats_fn,
)
from tracker.measure.kinds import Sequences
from tracker.measure.level import measure_parts
from tracker.measure.monitor_sampler import Sampler
from tracker.measure.monitors import Monitor
from tracker.measure.shm import pa_output_bytes
from tracker.measure.transport import Transport
from tracker.measure.types import LOAD_CLIENTS, LoadClient, Measurement, SweepLevel, SweepResult
from tracker.triton.endpoints import Endpoints

MIN_GAIN = 0.05
GAIN_LEVELS = 3

__all__ = ["EntryLoad", "LevelPlanner", "Probe", "load_levels", "settings_from", "stop_reason",
           "sweep"]


@dataclass(frozen=True)
class Probe:
    """A level a plan sets itself instead of one of the list's (the capacity search's,
    tracker/search/capacity.py): a closed-loop ``concurrency`` or an open-loop
    ``request_rate``, the same for every entry."""

    concurrency: int | None = None
    request_rate: float | None = None


class LevelPlanner(Protocol):
    """Chooses the sweep's levels one at a time instead of the list's order (the search's
    tracker.search.sweep_plan.LevelPlan): the next level's index or a :class:`Probe`, or
    None to stop, and why."""

    reason: str

    def next(self, done: Sequence[SweepLevel]) -> int | Probe | None: ...


def saturated(done: Sequence[Measurement]) -> str | None:
    """Why one entry's throughput has saturated over its levels ``done`` (None: it has not)."""
    if len(done) <= GAIN_LEVELS:
        return None
    before = done[-GAIN_LEVELS - 1].throughput
    best = max(m.throughput for m in done[-GAIN_LEVELS:])
    if before > 0 and (best - before) / before < MIN_GAIN:
        return (f"throughput saturated: the last {GAIN_LEVELS} levels gained "
                f"{100 * (best - before) / before:.1f}% < {100 * MIN_GAIN:g}%")
    return None


def stop_reason(done: Sequence[SweepLevel], constraints: Mapping[str, object] | None,
                ) -> str | None:
    """Why the sweep should stop after ``done`` (None: go on); see the module doc.
    ``constraints`` as the spec gives them (bare, or ``<model>/<metric>``)."""
    last = done[-1]
    for name, m in last.measurements.items():
        if not m.valid:
            return f"{name} at {m.level} invalid: {m.invalid_reason}"
    names = list(last.measurements)
    broken = stops_sweep(last.metrics(), for_models(constraints, names))
    if broken:
        return f"latency constraint broken at {last.level}: {'; '.join(broken)}"
    why = {n: saturated([level.measurements[n] for level in done]) for n in names}
    if all(w is not None for w in why.values()):
        return "; ".join(f"{n}: {w}" for n, w in why.items())
    return None


async def run_levels(count: int, measure: Callable[[int | Probe], Awaitable[SweepLevel]],
                     constraints: Mapping[str, object] | None,
                     on_level: Callable[[SweepLevel], None] | None,
                     plan: LevelPlanner | None = None) -> SweepResult:
    """Measure levels ``0..count-1`` in order until a stop rule fires, or as ``plan`` says
    (a probe's SweepLevel has the index of its place among the levels measured)."""
    done: list[SweepLevel] = []

    async def one(i: int | Probe) -> None:
        level = await measure(i)
        if isinstance(i, Probe):
            level.index = len(done)
        done.append(level)
        if on_level is not None:
            on_level(level)

    if plan is not None:
        while (i := plan.next(done)) is not None:
            if not isinstance(i, Probe) and not 0 <= i < count:
                raise MeasurementError(f"the level plan asked for level {i}, which is not one "
                                       f"of the sweep's levels (0..{count - 1})")
            await one(i)
        return SweepResult(done, plan.reason)
    for i in range(count):
        await one(i)
        why = stop_reason(done, constraints)
        if why is not None:
            return SweepResult(done, why)
    return SweepResult(done, "all levels measured")


async def _builtin(endpoints: Endpoints, entries: Mapping[str, EntryLoad],
                   constraints: Mapping[str, object] | None, sampler: Sampler,
                   on_level: Callable[[SweepLevel], None] | None,
                   plan: LevelPlanner | None) -> SweepResult:
    ws = shared_windows(entries)
    transports: list[Transport] = []
    opened: list[Opened] = []
    try:
        for name, entry in entries.items():
            opened.append(await open_entry(endpoints, name, entry, transports))
        models = [*entries, *(m for e in entries.values() for m in e.models)]
        transport = opened[0].transport
        await check_models(transport, models)
        stats = stats_fn(transport, models)

        async def measure(i: int | Probe) -> SweepLevel:
            parts = [o.part(i) if not isinstance(i, Probe) else o.part_at(probe_level(
                o.entry.load, o.entry.kinds(), i.concurrency, i.request_rate)) for o in opened]
            return SweepLevel(await measure_parts(parts, ws, stats, sampler),
                              i if isinstance(i, int) else 0)

        count = max(len(o.levels) for o in opened)
        return await run_levels(count, measure, constraints, on_level, plan)
    finally:
        for o in opened:
            await o.close()
        for t in transports[len(opened):]:
            await t.close()


def _perf_analyzer(endpoints: Endpoints, entries: Mapping[str, EntryLoad],
                   constraints: Mapping[str, object] | None, sampler: Sampler,
                   on_level: Callable[[SweepLevel], None] | None,
                   plan: LevelPlanner | None) -> SweepResult:
    from tracker.measure.pa_load import PerfAnalyzer

    (name, entry), *others = entries.items()
    if others or entry.models:
        raise MeasurementError("perf_analyzer drives one model alone, but the sweep measures "
                               f"{[*entries, *entry.models]} together (a pipeline's split or "
                               "several entry models need the builtin load client)")
    refused = [k for k in entry.kinds() if k.perf_analyzer_lacks]
    if refused:
        raise MeasurementError(f"load kind {refused[0].name!r} is measured by the built-in load "
                               f"generator only: perf_analyzer lacks "
                               f"{refused[0].perf_analyzer_lacks}")
    binary = shutil.which("perf_analyzer")
    if binary is None:
        raise MeasurementError("load client 'perf_analyzer' needs the perf_analyzer binary "
                               "on PATH, but it was not found")
    stateful = any(isinstance(k, Sequences) for k in entry.kinds())
    pa = PerfAnalyzer(binary, endpoints, name, entry.load,
                      pa_output_bytes(entry.config, entry.load), stateful)
    levels = load_levels(entry.load, entry.levels, entry.kinds())

    async def measure(i: int | Probe) -> SweepLevel:
        level = levels[i] if not isinstance(i, Probe) else probe_level(
            entry.load, entry.kinds(), i.concurrency, i.request_rate)
        return SweepLevel({name: await asyncio.to_thread(pa.measure, level, sampler)},
                          i if isinstance(i, int) else 0)

    return asyncio.run(run_levels(len(levels), measure, constraints, on_level, plan))


def sweep(endpoints: Endpoints, entries: Mapping[str, EntryLoad],
          constraints: Mapping[str, Any] | None = None, monitors: Sequence[Monitor] = (), *,
          load_client: LoadClient = "builtin",
          on_level: Callable[[SweepLevel], None] | None = None,
          plan: LevelPlanner | None = None) -> SweepResult:
    """Measure the entry models of ``entries`` (name -> :class:`EntryLoad`) on the server at
    ``endpoints`` at once, level after level (the module doc says how levels advance and when
    the sweep stops). ``constraints`` name a model (``a/perf_latency_p99``) or, bare, bound
    every entry. ``load_client`` is "builtin" or "perf_analyzer" (the binary on PATH; one
    entry without composing models). ``monitors`` are sampled during the windows and left open for
    the caller; each level's figures go to ``on_level`` as it is measured; ``plan`` picks the
    levels' indices one at a time. MeasurementError when ``entries`` is empty, their window
    settings differ, or the server lacks one of the models."""
    if not entries:
        raise MeasurementError("a sweep needs at least one entry model, but got none")
    sampler = Sampler(monitors)
    sampler.start()
    try:
        if load_client == "builtin":
            return asyncio.run(_builtin(endpoints, entries, constraints, sampler, on_level,
                                        plan))
        if load_client == "perf_analyzer":
            return _perf_analyzer(endpoints, entries, constraints, sampler, on_level, plan)
        raise MeasurementError(f"load client must be one of {list(LOAD_CLIENTS)}, but got "
                               f"{load_client!r}")
    finally:
        sampler.stop()
