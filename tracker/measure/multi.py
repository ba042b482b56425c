"""Several independent models on one server, each with its own load, measured in the same
windows.

Each model gets its own load (its own LoadSection: concurrency or request rate, batch size,
protocol, processes, inputs) and its own channel; the joint sweep runs them **at once**.

- **Joint levels.** Level ``i`` of every model at once: the first joint level is each model's
  first level, the second each model's second, and so on. A model whose list is shorter stays
  at its last level while the others go on; the sweep has as many joint levels as the longest
  list.
- **Windows.** One set of windows for all: at each boundary one all-models statistics request
  (its middle is the boundary instant), then every model's client records are cut at that
  instant. Each model's windows, counters and figures therefore cover the same span
  (``Measurement.start_ns``/``end_ns`` are equal across the models of a joint level). The
  window settings (``window_ms``, ``stability_pct``, ``max_tries``, ``max_error_pct``) must be
  the same in every model's load; count windows (``window_requests``) are refused: whose count
  would end the window?
- **Stability.** The joint level ends when every model's last 3 windows are stable, after
  ``max_tries`` windows, or at once when one model's window has too many failed requests (that
  model's Measurement is invalid; the others keep the windows measured so far). A server that
  stops answering makes every model's Measurement invalid.
- **Monitors** describe the whole server (CPU, memory, GPUs), so every model's Measurement of
  a joint level carries the same monitor figures.
- **Stop rules**, after each joint level: a model's level is invalid; a latency maximum of the
  constraints is broken (``<model>/perf_latency_p99: {max: ..}``: more load on any model only
  adds latency on a shared server); or every model's throughput saturated (sweep.py's rule,
  applied to each model's own levels).

Constraints name a model (``a/perf_latency_p99``); a bare name bounds every model
(tracker.feasibility.for_models). Which joint level a configuration is judged by, and the
weighted objective over the models, is search/objective.py's (``pick_best_joint_level``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tracker.errors import MeasurementError
from tracker.feasibility import for_models, stops_sweep
from tracker.measure.inputs import input_specs, make_samples
from tracker.measure.level import (
    Boundary,
    LevelAborted,
    LevelSettings,
    finish,
    first_request_error,
    timed_stats,
    wait_for,
    window_between,
)
from tracker.measure.loadgen import Level
from tracker.measure.monitors import Monitor, Sampler
from tracker.measure.procs import Load
from tracker.measure.stats import ServerStats, pick
from tracker.measure.sweep import (
    check_models,
    endpoint_url,
    load_levels,
    open_driver,
    settings_from,
    stop_reason,
)
from tracker.measure.transport import Transport, make_transport
from tracker.measure.types import JointMeasurement, MultiSweepResult
from tracker.measure.windows import Window, WindowRun, WindowSettings, error_reason, is_stable
from tracker.triton.client import Endpoints

if TYPE_CHECKING:
    from tracker.spec.sections import LoadSection
    from tracker.triton.model_config import ModelConfig


@dataclass(frozen=True)
class ModelLoad:
    """One model's part of a joint sweep: its served config (it shapes the random inputs), its
    load, its levels (None: the load's own list) and, for a pipeline among the models, its
    composing models (their split lands in its ``Measurement.steps``)."""

    config: ModelConfig
    load: LoadSection
    levels: Sequence[float] | None = None
    models: Sequence[str] = ()


@dataclass
class _Part:
    name: str
    spec: ModelLoad
    settings: LevelSettings
    levels: list[Level]
    transport: Transport
    driver: Load

    def level(self, i: int) -> Level:
        return self.levels[min(i, len(self.levels) - 1)]


def joint_windows(loads: Mapping[str, ModelLoad]) -> WindowSettings:
    """The window settings every model's load agrees on; MeasurementError naming the field
    and the models otherwise."""
    first_name, first = next(iter(loads.items()))
    ws = settings_from(first.load).windows
    for name, part in loads.items():
        other = settings_from(part.load).windows
        if other.window_requests is not None:
            raise MeasurementError(f"models measured together share time windows, but "
                                   f"{name!r} sets load.window_requests={other.window_requests}")
        for key in ("window_ms", "stability_pct", "max_tries", "max_error_pct"):
            if getattr(other, key) != getattr(ws, key):
                raise MeasurementError(
                    f"models measured together share their windows: load.{key} must be the "
                    f"same, but got {first_name}={getattr(ws, key)!r}, "
                    f"{name}={getattr(other, key)!r}")
    return ws


async def _waiting(part: _Part, count: int, what: str) -> None:
    try:
        await wait_for(part.driver, count, part.settings.timeout_s, what)
    except LevelAborted as exc:
        raise LevelAborted(f"{part.name}: {exc.reason}") from exc


async def _boundary(parts: Sequence[_Part], timeout_s: float) -> dict[str, Boundary]:
    """One all-models statistics request, then every model's records cut at its middle."""
    async def stats() -> dict[str, ServerStats]:
        return await parts[0].transport.all_stats()

    mid, result = await timed_stats(stats, timeout_s)
    counters: dict[str, ServerStats] = result if isinstance(result, dict) else {}
    chunks = await asyncio.gather(*(p.driver.take(mid) for p in parts))
    return {p.name: Boundary(mid, chunk, pick(counters, p.name),
                             {m: pick(counters, m) for m in p.spec.models})
            for p, chunk in zip(parts, chunks, strict=True)}


async def _joint_level(parts: Sequence[_Part], i: int, ws: WindowSettings,
                       sampler: Sampler | None) -> JointMeasurement:
    seen: dict[str, list[Window]] = {p.name: [] for p in parts}
    reasons: dict[str, str] = {}
    timeout_s = max(p.settings.timeout_s for p in parts)
    await asyncio.gather(*(p.driver.start(p.level(i)) for p in parts))
    try:
        await asyncio.gather(*(_waiting(p, p.settings.warmup_requests, "warm-up")
                               for p in parts))
        prev = await _boundary(parts, timeout_s)
        for _ in range(ws.max_tries):
            await asyncio.sleep(ws.window_ms / 1000.0)
            for p in parts:
                if await p.driver.completed() == 0:
                    await _waiting(p, 1, "window")
            cur = await _boundary(parts, timeout_s)
            for p in parts:
                seen[p.name].append(window_between(prev[p.name], cur[p.name]))
            prev = cur
            for p in parts:
                why = error_reason(seen[p.name][-1], ws.max_error_pct)
                if why is not None:
                    reasons[p.name] = why
            if reasons or all(is_stable(seen[p.name], ws) for p in parts):
                break
    except LevelAborted as exc:
        for p in parts:
            first = await first_request_error(p.driver, seen[p.name])
            reasons[p.name] = f"request error: {first}; then {exc.reason}" if first \
                else exc.reason
    finally:
        await asyncio.gather(*(p.driver.stop() for p in parts), return_exceptions=True)
    out = {}
    for p in parts:
        windows = seen[p.name]
        run = WindowRun(windows, stable=is_stable(windows, ws) and p.name not in reasons,
                        invalid_reason=reasons.get(p.name))
        out[p.name] = finish(run, p.level(i), p.settings, sampler)
    return JointMeasurement(out)


def joint_stop_reason(done: Sequence[JointMeasurement],
                      constraints: Mapping[str, object] | None) -> str | None:
    """Why the joint sweep should stop after ``done`` (None: go on); see the module doc."""
    last = done[-1]
    for name, m in last.measurements.items():
        if not m.valid:
            return f"{name} at {m.level} invalid: {m.invalid_reason}"
    broken = stops_sweep(last.metrics(), constraints)
    if broken:
        return f"latency constraint broken at {last.level}: {'; '.join(broken)}"
    names = list(last.measurements)
    saturated = [stop_reason([j.measurements[n] for j in done], None) for n in names]
    if all(why is not None for why in saturated):
        return "every model's throughput saturated: " + "; ".join(
            f"{n}: {why}" for n, why in zip(names, saturated, strict=True))
    return None


async def _sweep_many(endpoints: Endpoints, loads: Mapping[str, ModelLoad],
                      constraints: dict[str, object], sampler: Sampler,
                      on_level: Callable[[JointMeasurement], None] | None) -> MultiSweepResult:
    ws = joint_windows(loads)
    transports: list[Transport] = []
    parts: list[_Part] = []
    try:
        for name, spec in loads.items():
            url = endpoint_url(endpoints, spec.load)
            levels = load_levels(spec.load, spec.levels)
            transport = make_transport(spec.load.protocol, url, name,
                                       spec.load.request_timeout_s)
            transports.append(transport)
            samples = make_samples(spec.config, spec.load.batch_size, spec.load.input_data)
            datatypes = {s.name: s.datatype for s in input_specs(spec.config)}
            driver = await open_driver(spec.load, url, name, transport, samples, datatypes)
            parts.append(_Part(name, spec, settings_from(spec.load), levels, transport, driver))
        await check_models(parts[0].transport,
                           [*loads, *(m for spec in loads.values() for m in spec.models)])
        done: list[JointMeasurement] = []
        reason = "all levels measured"
        for i in range(max(len(p.levels) for p in parts)):
            joint = await _joint_level(parts, i, ws, sampler)
            done.append(joint)
            if on_level is not None:
                on_level(joint)
            why = joint_stop_reason(done, constraints)
            if why is not None:
                reason = why
                break
        return MultiSweepResult(done, reason)
    finally:
        for part in parts:
            if part.driver.processes > 1:
                with contextlib.suppress(Exception):
                    await part.driver.close()
        for transport in transports:
            with contextlib.suppress(Exception):
                await transport.close()


def sweep_many(endpoints: Endpoints, loads: Mapping[str, ModelLoad],
               constraints: Mapping[str, object] | None = None,
               monitors: Sequence[Monitor] = (), *,
               on_level: Callable[[JointMeasurement], None] | None = None,
               ) -> MultiSweepResult:
    """Measure the models of ``loads`` (model name -> its :class:`ModelLoad`) on the server at
    ``endpoints`` at the same time, joint level after joint level (the module doc says how
    levels advance, how windows are shared and when the sweep stops). ``constraints`` name a
    model (``a/perf_latency_p99``) or, bare, bound every model. ``monitors`` are sampled
    during the windows and left open for the caller. MeasurementError when ``loads`` is empty,
    their window settings differ, or the server lacks one of the models."""
    if not loads:
        raise MeasurementError("sweep_many needs at least one model, but got none")
    sampler = Sampler(monitors)
    sampler.start()
    try:
        return asyncio.run(_sweep_many(endpoints, loads, for_models(constraints, list(loads)),
                                       sampler, on_level))
    finally:
        sampler.stop()

