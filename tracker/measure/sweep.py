"""A sweep over load levels, stopped early the way Model Analyzer stops its concurrency sweep.

Levels are the spec's concurrency list (or powers of two up to a maximum), or its request
rates. After each level the sweep stops when
- the level is invalid (errors above the threshold, server not answering),
- a latency constraint (``perf_latency_*``, ``perf_time_to_first_token_*``,
  ``perf_inter_token_latency_*``: ``{max: ...}``) is broken: more load only adds latency,
- the last 3 levels gained under 5% throughput over the level before them (throughput has
  saturated; Model Analyzer's rule).
Whether a constraint is broken is tracker/feasibility.py's rule; which level a configuration
is judged by is chosen above this layer (search/objective.py ``pick_best_level``).
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from tracker.errors import MeasurementError
from tracker.feasibility import stops_sweep
from tracker.measure.inputs import Sample, input_specs
from tracker.measure.level import LevelSettings, StatsFn, measure_level
from tracker.measure.loadgen import Level, LocalLoad
from tracker.measure.monitors import Monitor, Sampler
from tracker.measure.procs import InProcessLoad, Load, ProcessLoad
from tracker.measure.stats import Snapshot, snapshot_of
from tracker.measure.stream import TokenCount, stream_rule
from tracker.measure.stream_inputs import samples_for
from tracker.measure.transport import Transport, make_transport
from tracker.measure.types import Measurement, SweepResult
from tracker.measure.windows import WindowSettings
from tracker.triton.client import Endpoints

if TYPE_CHECKING:
    from tracker.spec.sections import LoadSection
    from tracker.triton.model_config import ModelConfig

MIN_GAIN = 0.05
GAIN_LEVELS = 3


class LevelPlanner(Protocol):
    """Chooses the sweep's levels one at a time instead of the list's order (the search's
    tracker.search.sweep_plan.LevelPlan): the next concurrency, or None to stop, and why."""

    reason: str

    def next(self, done: Sequence[Measurement]) -> int | None: ...


def stop_reason(done: Sequence[Measurement], constraints: Mapping[str, Any] | None) -> str | None:
    """Why the sweep should stop after ``done`` (None: go on)."""
    last = done[-1]
    if not last.valid:
        return f"{last.level} invalid: {last.invalid_reason}"
    broken = stops_sweep(last.metrics(), constraints)
    if broken:
        return f"latency constraint broken at {last.level}: {'; '.join(broken)}"
    if len(done) > GAIN_LEVELS:
        before = done[-GAIN_LEVELS - 1].throughput
        best = max(m.throughput for m in done[-GAIN_LEVELS:])
        if before > 0 and (best - before) / before < MIN_GAIN:
            return (f"throughput saturated: the last {GAIN_LEVELS} levels gained "
                    f"{100 * (best - before) / before:.1f}% < {100 * MIN_GAIN:g}%")
    return None


def load_levels(load: LoadSection, override: Sequence[float] | None = None) -> list[Level]:
    """The levels of a LoadSection (or ``override``: concurrencies, or rates in rate mode)."""
    rates = load.request_rate
    if rates:
        values = override if override is not None else rates
        return [Level(request_rate=float(r), arrival=load.arrival, seed=i)
                for i, r in enumerate(values)]
    values = override if override is not None else load.concurrency_levels()
    out = []
    for c in values:
        if int(c) != c or c < 1:
            raise MeasurementError(f"a concurrency level must be an integer >= 1, but got {c}")
        out.append(Level(concurrency=int(c)))
    return out


def settings_from(load: LoadSection, streaming: bool = False) -> LevelSettings:
    """LevelSettings from a LoadSection (``streaming``: each request a gRPC stream)."""
    return LevelSettings(
        windows=WindowSettings(window_ms=load.window_ms, window_requests=load.window_requests,
                               stability_pct=load.stability_pct, max_tries=load.max_tries,
                               max_error_pct=load.max_error_pct),
        warmup_requests=load.warmup_requests, timeout_s=load.request_timeout_s,
        batch_size=load.batch_size, processes=load.processes, streaming=streaming)


async def _run(levels: Sequence[Level], measure: Callable[[Level], Awaitable[Measurement]],
               constraints: Mapping[str, Any] | None,
               on_level: Callable[[Measurement], None] | None,
               plan: LevelPlanner | None = None) -> SweepResult:
    done: list[Measurement] = []
    reason = "all levels measured"
    if plan is not None:
        by_concurrency = {lvl.concurrency: lvl for lvl in levels}
        while (c := plan.next(done)) is not None:
            if c not in by_concurrency:
                raise MeasurementError(f"the level plan asked for concurrency {c}, which is "
                                       f"not one of the sweep's levels")
            m = await measure(by_concurrency[c])
            done.append(m)
            if on_level is not None:
                on_level(m)
        return SweepResult(done, plan.reason)
    for level in levels:
        m = await measure(level)
        done.append(m)
        if on_level is not None:
            on_level(m)
        why = stop_reason(done, constraints)
        if why is not None:
            reason = why
            break
    return SweepResult(done, reason)


def stats_fn(transport: Transport, models: Sequence[str] = ()) -> StatsFn:
    """The boundary's statistics request: the entry model's own (one named request), or, with
    composing ``models``, one all-models request cut down to the entry and those models (one
    instant for all of them; measured no dearer than one request per model, see
    docs/measurement.md)."""
    if not models:
        return transport.stats
    names = [m for m in dict.fromkeys(models) if m != transport.model_name]

    async def snapshot() -> Snapshot:
        return snapshot_of(await transport.all_stats(), transport.model_name, names)

    return snapshot


def endpoint_url(endpoints: Endpoints, load: LoadSection) -> str:
    """The server's URL for ``load.protocol``; MeasurementError when it is unknown."""
    url = endpoints.grpc if load.protocol == "grpc" else endpoints.http
    if url is None:
        raise MeasurementError(f"load.protocol is {load.protocol!r} but the server's "
                               f"{load.protocol} endpoint is unknown")
    return url


async def open_driver(load: LoadSection, url: str, model_name: str, transport: Transport,
                      samples: Sequence[Sample], datatypes: dict[str, str],
                      stream: TokenCount | None = None) -> Load:
    """The load for ``model_name``: in this process, or ``load.processes`` spawned ones
    (close those with ``driver.close()``)."""
    payloads = transport.payloads(samples, datatypes)
    if load.processes > 1:
        procs = ProcessLoad(load.processes, load.protocol, url, model_name,
                            load.request_timeout_s, payloads, stream)
        await procs.open()
        return procs
    return InProcessLoad(LocalLoad(transport, payloads))


async def check_models(transport: Transport, models: Sequence[str]) -> None:
    """MeasurementError unless the server reports statistics for every one of ``models``."""
    have = await transport.all_stats()
    missing = [m for m in models if m not in have]
    if missing:
        raise MeasurementError(f"the server has no model {', '.join(map(repr, missing))} to "
                               f"measure (it reports: {', '.join(sorted(have))})")


async def _builtin(endpoints: Endpoints, model_name: str, config: ModelConfig,
                   load: LoadSection,
                   levels: Sequence[Level], constraints: Mapping[str, Any] | None,
                   sampler: Sampler, on_level: Callable[[Measurement], None] | None,
                   plan: LevelPlanner | None = None, models: Sequence[str] = (),
                   ) -> SweepResult:
    url = endpoint_url(endpoints, load)
    stream = stream_rule(config, load)
    samples = samples_for(config, load)
    datatypes = {s.name: s.datatype for s in input_specs(config)}
    settings = settings_from(load, streaming=stream is not None)
    transport = make_transport(load.protocol, url, model_name, load.request_timeout_s, stream)
    driver: Load | None = None
    try:
        driver = await open_driver(load, url, model_name, transport, samples, datatypes,
                                   stream)
        loaded = driver
        stats = stats_fn(transport, models)
        if models:  # a model the server does not have is the caller's mistake: say so now
            await check_models(transport, models)

        async def measure(level: Level) -> Measurement:
            return await measure_level(loaded, level, settings, stats, sampler)

        return await _run(levels, measure, constraints, on_level, plan)
    finally:
        if driver is not None and driver.processes > 1:
            await driver.close()
        await transport.close()


def sweep(endpoints: Endpoints, model_name: str, config: ModelConfig, load: LoadSection,
          constraints: Mapping[str, Any] | None = None, monitors: Sequence[Monitor] = (),
          *, levels: Sequence[float] | None = None, backend: str = "builtin",
          on_level: Callable[[Measurement], None] | None = None,
          plan: LevelPlanner | None = None, models: Sequence[str] = ()) -> SweepResult:
    """Measure ``model_name`` on the server at ``endpoints`` over the load levels of ``load``
    (a LoadSection; ``levels`` overrides its list). ``config`` is the served ModelConfig (it
    shapes the random inputs). ``backend`` is "builtin" or "perf_analyzer" (the binary on
    PATH). ``monitors`` are sampled during the windows and left open for the caller.
    ``plan`` (concurrency levels only) picks the levels one at a time instead of measuring the
    list from the lowest up with the stop rules above. ``models`` are a pipeline's composing
    models (the entry model, which the load drives, aside): each one's server-side split over
    the same windows is in ``Measurement.steps`` and its ``model/<name>/...`` metrics (builtin
    backend only)."""
    level_list = load_levels(load, levels)
    sampler = Sampler(monitors)
    sampler.start()
    try:
        if backend == "builtin":
            return asyncio.run(_builtin(endpoints, model_name, config, load, level_list,
                                        constraints, sampler, on_level, plan, models))
        if backend == "perf_analyzer":
            if models:
                raise MeasurementError("the per-model split of a pipeline (models=...) needs "
                                       "the builtin backend, but backend is 'perf_analyzer'")
            from tracker.measure.perf_analyzer import PerfAnalyzer

            if stream_rule(config, load) is not None:
                raise MeasurementError("a streaming (decoupled) model is measured by the "
                                       "built-in load generator only: perf_analyzer's CSV has "
                                       "no time to first token or inter-token latency")

            binary = shutil.which("perf_analyzer")
            if binary is None:
                raise MeasurementError("backend 'perf_analyzer' needs the perf_analyzer binary "
                                       "on PATH, but it was not found")
            pa = PerfAnalyzer(binary, endpoints, model_name, load)

            async def measure(level: Level) -> Measurement:
                return await asyncio.to_thread(pa.measure, level, sampler)

            return asyncio.run(_run(level_list, measure, constraints, on_level, plan))
        raise MeasurementError(f"backend must be 'builtin' or 'perf_analyzer', but got "
                               f"{backend!r}")
    finally:
        sampler.stop()
