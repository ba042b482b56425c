"""One entry model's load in a sweep, and how the sweep sets it up: its kinds, its levels, its
requests, its transport, its load processes.

A sweep measures a configuration's entry models at once (tracker/measure/sweep.py); each
entry's :class:`EntryLoad` carries everything its load needs, so every entry is measured by
its own rules: its load section (concurrency or request rate, batch size, protocol,
processes, inputs, stream rule), its levels and its composing models. The load kinds
(tracker/measure/kinds) an entry uses follow from its served config and its load: a decoupled
entry is streamed whatever the other entries are.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tracker.errors import MeasurementError
from tracker.measure.inputs import input_specs
from tracker.measure.kinds import KINDS, LoadKind, kinds_for, level_kind
from tracker.measure.level import LevelSettings, Part
from tracker.measure.loadgen import Level, LocalLoad
from tracker.measure.priorities import prioritized
from tracker.measure.procs import InProcessLoad, Load, ProcessLoad
from tracker.measure.repeats import repeated
from tracker.measure.shm import shared_payloads
from tracker.measure.stream_inputs import samples_for
from tracker.measure.transport import Transport, make_transport
from tracker.measure.windows import WindowSettings
from tracker.triton.endpoints import Endpoints
from tracker.triton.statistics import ServerStats

if TYPE_CHECKING:
    from tracker.spec.sections import LoadSection
    from tracker.triton.model_config import ModelConfig


@dataclass(frozen=True)
class EntryLoad:
    """One entry model's part of a sweep: its served config (it shapes the requests and
    decides the load kinds), its load, its levels (None: the load's own list) and, for a
    pipeline, its composing models (their split lands in its ``Measurement.steps``) and
    how many requests like the load's already warmed the served model (``warmed``: the first
    level measured waits for that many fewer warm-up requests, at least one)."""

    config: ModelConfig
    load: LoadSection
    levels: Sequence[float] | None = None
    models: Sequence[str] = ()
    warmed: int = 0
    #: per-request latency bounds (ms) an open-loop level's goodput counts against
    #: (tracker.measure.goodput.request_slo of the entry's constraints)
    slo: Mapping[str, float] = field(default_factory=dict)

    def kinds(self) -> tuple[LoadKind, ...]:
        return kinds_for(self.config, self.load)


def load_levels(load: LoadSection, override: Sequence[float] | None = None,
                kinds: tuple[LoadKind, ...] | None = None) -> list[Level]:
    """The levels of a LoadSection (or ``override``), as its level kind defines them
    (``kinds``: the entry's; None: the kind the load section alone implies)."""
    if kinds is None:
        kinds = tuple(k for k in (kind.of(None, load) for kind in KINDS.values()
                                  if kind.level_key is not None) if k is not None)[-1:]
    return level_kind(kinds).levels(load, override)


def probe_level(load: LoadSection, kinds: tuple[LoadKind, ...], concurrency: int | None,
                request_rate: float | None, seed: int = 0) -> Level:
    """A level a sweep's plan sets itself (a closed-loop ``concurrency`` or an open-loop
    ``request_rate``), made by the entry's level kind when it has that key (a trace keeps its
    shape, a rate its arrivals), else as a plain closed-loop or request-rate level."""
    key, value = (("concurrency", concurrency) if concurrency is not None
                  else ("request_rate", request_rate))
    if value is None:
        raise MeasurementError("a probe is a concurrency or a request rate, but got neither")
    kind = level_kind(kinds)
    if kind.level_key == key:
        return dataclasses.replace(kind.levels(load, [value])[0], seed=seed)
    if key == "concurrency":
        return Level(concurrency=int(value))
    return Level(request_rate=float(value), arrival=load.arrival, seed=seed)


def settings_from(load: LoadSection, kinds: tuple[LoadKind, ...] = ()) -> LevelSettings:
    """LevelSettings from a LoadSection and the entry's load kinds."""
    return LevelSettings(
        windows=WindowSettings(window_ms=load.window_ms, window_requests=load.window_requests,
                               stability_pct=load.stability_pct, max_tries=load.max_tries,
                               max_error_pct=load.max_error_pct),
        warmup_requests=load.warmup_requests, timeout_s=load.request_timeout_s,
        batch_size=load.batch_size, processes=load.processes, kinds=kinds)


def warmed_settings(settings: LevelSettings, warmed: int) -> LevelSettings:
    """``settings`` for a level after ``warmed`` requests warmed the model: that many fewer
    warm-up requests, but one at least (the load's own connection) when it asks for any."""
    if warmed <= 0 or settings.warmup_requests <= 1:
        return settings
    return dataclasses.replace(settings,
                               warmup_requests=max(1, settings.warmup_requests - warmed))


def shared_windows(entries: Mapping[str, EntryLoad]) -> WindowSettings:
    """The window settings every entry's load agrees on (they share the windows);
    MeasurementError naming the field and the models otherwise."""
    first_name, first = next(iter(entries.items()))
    ws = settings_from(first.load).windows
    for name, entry in entries.items():
        other = settings_from(entry.load).windows
        for key in ("window_ms", "window_requests", "stability_pct", "max_tries",
                    "max_error_pct"):
            if getattr(other, key) != getattr(ws, key):
                raise MeasurementError(
                    f"models measured together share their windows: load.{key} must be the "
                    f"same, but got {first_name}={getattr(ws, key)!r}, "
                    f"{name}={getattr(other, key)!r}")
    return ws


def endpoint_url(endpoints: Endpoints, load: LoadSection) -> str:
    """The server's URL for ``load.protocol``; MeasurementError when it is unknown."""
    url = endpoints.grpc if load.protocol == "grpc" else endpoints.http
    if url is None:
        raise MeasurementError(f"load.protocol is {load.protocol!r} but the server's "
                               f"{load.protocol} endpoint is unknown")
    return url


@dataclass
class Opened:
    """An entry's load, open: its levels and settings, its transport and its driver."""

    name: str
    entry: EntryLoad
    levels: list[Level]
    settings: LevelSettings
    transport: Transport
    driver: Load
    #: load.shared_memory's regions (measure/shm.py), removed on close
    regions: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)
    warmed: int = 0  # requests that warmed the model before its first level

    def __post_init__(self) -> None:
        self.warmed = self.entry.warmed

    def part_at(self, level: Level) -> Part:
        """This entry's part of a level the sweep's plan set itself (a probe)."""
        settings, self.warmed = warmed_settings(self.settings, self.warmed), 0
        return Part(self.name, self.driver, settings, level, self.entry.models)

    def part(self, i: int) -> Part:
        """This entry's part of the sweep's level ``i`` (a shorter list stays at its last);
        the first one asked for warms up only as far as ``entry.warmed`` has not."""
        settings, self.warmed = warmed_settings(self.settings, self.warmed), 0
        return Part(self.name, self.driver, settings,
                    self.levels[min(i, len(self.levels) - 1)], self.entry.models)

    async def close(self) -> None:
        if self.driver.processes > 1:
            with contextlib.suppress(Exception):
                await self.driver.close()
        with contextlib.suppress(Exception):
            await self.transport.close()
        self.regions.close()


async def open_entry(endpoints: Endpoints, name: str, entry: EntryLoad,
                     transports: list[Transport]) -> Opened:
    """``entry``'s load for ``name``: in this process, or ``load.processes`` spawned ones.
    Its transport is appended to ``transports`` at once (the caller closes it on failure)."""
    load, kinds = entry.load, entry.kinds()
    url = endpoint_url(endpoints, load)
    options = {k: v for kind in kinds for k, v in kind.caller_options().items()}
    transport = make_transport(load.protocol, url, name, load.request_timeout_s, **options,
                               security=endpoints.security)
    transports.append(transport)
    levels = load_levels(load, entry.levels, kinds)
    datatypes = {s.name: s.datatype for s in input_specs(entry.config)}
    own = [s for k in kinds if (s := k.samples(entry.config, load)) is not None]
    samples = own[0] if own else samples_for(entry.config, load)
    regions = contextlib.ExitStack()
    try:
        payloads = shared_payloads(regions, endpoints, load, name, entry.config, samples,
                                   datatypes) or transport.payloads(samples, datatypes)
        if not own:  # a kind's own samples (a sequence's steps) keep their order
            payloads = repeated(payloads, load.repeat)  # load.repeat: one pass (repeats.py)
        if load.priorities:  # each request at its level (priorities.py)
            payloads = prioritized(payloads, load.priorities, load.protocol)
        driver: Load
        if load.processes > 1:
            procs = ProcessLoad(load.processes, load.protocol, url, name,
                                load.request_timeout_s, payloads, kinds, transport.security)
            await procs.open()
            driver = procs
        else:
            driver = InProcessLoad(LocalLoad(transport, payloads, kinds))
    except BaseException:
        regions.close()
        raise
    settings = dataclasses.replace(settings_from(load, kinds), slo=tuple(entry.slo.items()))
    return Opened(name, entry, levels, settings, transport, driver, regions)


def stats_fn(transport: Transport, models: Sequence[str],
             ) -> Callable[[], Awaitable[Mapping[str, ServerStats]]]:
    """The boundary's statistics request for ``models`` (every entry and composing model):
    the one model's own request, or one all-models request (one instant for all of them;
    measured no dearer than one request per model, see docs/measurement.md)."""
    names = list(dict.fromkeys(models))
    if names == [transport.model_name]:
        async def own() -> Mapping[str, ServerStats]:
            return {transport.model_name: await transport.stats()}
        return own
    return transport.all_stats


async def check_models(transport: Transport, models: Sequence[str]) -> None:
    """MeasurementError unless the server reports statistics for every one of ``models``. A
    server that does not answer is left to the first level (invalid, with its timeout)."""
    try:
        have = await asyncio.wait_for(transport.all_stats(), transport.timeout_s)
    except Exception:
        return
    missing = [m for m in models if m not in have]
    if missing:
        raise MeasurementError(f"the server has no model {', '.join(map(repr, missing))} to "
                               f"measure (it reports: {', '.join(sorted(have))})")
