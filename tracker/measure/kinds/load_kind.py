"""The interface of a load kind: how one entry model's load is shaped.

A load kind answers five questions, and the sweep, the level runner, the windows, the CSV, the
report and the level plan ask only these:

1. **What a level is** (``level_key``, :meth:`LoadKind.levels`, :meth:`LoadKind.split`): the
   :class:`~tracker.measure.loadgen.Level` field the kind's levels set (``concurrency``,
   ``request_rate``), the levels of a ``load`` section (or an override list), and one level
   spread over ``load.processes`` processes. ``level_key`` is also the CSV's first column,
   the MLflow step and the axis the level plan walks (it walks ``concurrency`` levels only).
2. **How a slot issues requests** (:meth:`LoadKind.slots`): the coroutines that send one
   level's requests through the generator's :class:`Slots` (``send`` one request and wait for
   it, or ``spawn`` it and go on). A slot is a coroutine, so it may keep state across its
   requests in its own locals (a sequence's correlation ID and its position in it), and build
   a request per call (``gen.payloads`` are pre-built; a kind may transform one before
   sending it).
3. **What it records** (``fields``, :meth:`LoadKind.record`): per-request integers beside the
   latency (``ttft_ns``, ``tokens``, ...), kept aligned with the latencies from the
   generator's records through the windows; ``record`` turns a call's answer into the
   latency and those values, or :meth:`LoadKind.tag` reads them off the request that was
   sent (its priority level). The call itself is the transport's; ``caller_options`` are the
   keywords the kind needs of it (a gRPC stream per request).
4. **What it sends** (:meth:`LoadKind.samples`): a kind that builds its own requests (a
   sequence's steps, which the load's repeats and reordering would break) returns them; the
   others leave the entry's inputs (tracker/measure/inputs.py) to the load section.
5. **Which metrics it adds** (``metrics``, :meth:`LoadKind.add_metrics`): the catalog names
   (tracker/metrics.py) it fills on a :class:`~tracker.measure.types.Measurement` from the
   pooled ``fields`` of the level's last windows (and their latencies, under
   :data:`LATENCY`): its named fields (``ttft_p99_ms``), or, for a figure the Measurement
   has no field for, ``Measurement.figures[name]`` (logged and judged like any metric). Of
   those, ``shown`` are the columns a study's MLflow view puts first and ``plotted`` the ones
   its report and view draw against the level, one panel each (tracker/tracking/ reads these,
   never the metric names themselves).

An entry's load is one **level kind** (a kind whose ``level_key`` is set) plus any number of
**request kinds** (``level_key`` None: they change what one request is and records, not the
schedule). :func:`tracker.measure.kinds.kinds_for` asks each kind of the table, in order,
whether the entry's config and load use it (:meth:`LoadKind.of`); of the level kinds that do,
the last one in the table wins (a more specific schedule, listed later, replaces closed-loop
concurrency). Adding a kind is one module with a subclass and one entry in ``KINDS``.

Kinds are frozen dataclasses: they are sent to the load processes (``load.processes > 1``).
"""

from __future__ import annotations

from collections.abc import Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import numpy as np
import numpy.typing as npt

from tracker.errors import MeasurementError

if TYPE_CHECKING:
    from tracker.measure.inputs import Sample
    from tracker.measure.types import Measurement
    from tracker.spec.sections import LoadSection
    from tracker.triton.model_config import ModelConfig

Payload = Any
Ints = npt.NDArray[np.int64]
#: the key of the pooled latencies (ns) in the fields :meth:`LoadKind.add_metrics` gets
LATENCY = "latency_ns"


class Slots(Protocol):
    """What the load generator (tracker/measure/loadgen.py ``LocalLoad``) offers a slot."""

    payloads: list[Payload]
    late: int            # open loop: requests sent more than 1 ms after their time

    @property
    def stopping(self) -> bool: ...           # the level is ending: leave the loop
    @property
    def inflight(self) -> int: ...            # spawned requests not yet answered

    async def send(self, payload: Payload) -> None:
        """Send one request and wait for its answer; its latency, ``fields`` and any error
        are recorded by the generator (never raises for a failed request)."""

    def spawn(self, payload: Payload) -> None:
        """Send one request without waiting for it (open loop)."""


@dataclass(frozen=True)
class Level:
    """One load level for one process. ``start_ns`` (open loop) is the common time zero and
    ``phase`` this process's offset as a fraction of its own mean gap."""

    concurrency: int | None = None
    request_rate: float | None = None
    arrival: str = "constant"
    start_ns: int = 0
    phase: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        if (self.concurrency is None) == (self.request_rate is None):
            raise MeasurementError("a load level is a concurrency or a request rate, not both "
                                   f"(got concurrency={self.concurrency}, "
                                   f"request_rate={self.request_rate})")
        if self.concurrency is not None and self.concurrency < 0:
            raise MeasurementError(f"concurrency must be >= 0, but got {self.concurrency}")
        if self.request_rate is not None and self.request_rate < 0:
            raise MeasurementError(f"request rate must be >= 0, but got {self.request_rate}")
        if self.arrival not in ("constant", "poisson"):
            raise MeasurementError(f"load.arrival must be 'constant' or 'poisson', but got "
                                   f"{self.arrival!r}")


@dataclass(frozen=True)
class LoadKind:
    """A load kind; every hook has a do-nothing default (see the module docstring)."""

    name: ClassVar[str] = ""
    level_key: ClassVar[str | None] = None      # what a level is; None: a request kind
    fields: ClassVar[tuple[str, ...]] = ()      # per-request values recorded
    metrics: ClassVar[tuple[str, ...]] = ()     # catalog metrics it adds
    shown: ClassVar[tuple[str, ...]] = ()       # of those, the view's first columns
    plotted: ClassVar[tuple[str, ...]] = ()     # of those, drawn against the level
    #: why perf_analyzer cannot measure this kind (its CSV or its schedule lacks it); "" if it can
    perf_analyzer_lacks: ClassVar[str] = ""

    @classmethod
    def of(cls, config: ModelConfig, load: LoadSection) -> LoadKind | None:
        """This kind for an entry with ``config`` and ``load``, or None when it does not
        apply (MeasurementError when the load asks for it and the model cannot take it)."""
        return None

    def levels(self, load: LoadSection, override: Sequence[float] | None) -> list[Level]:
        raise MeasurementError(f"load kind {self.name!r} has no levels")

    def split(self, level: Level, parts: int) -> list[Level]:
        """``level`` spread over ``parts`` load processes."""
        raise MeasurementError(f"load kind {self.name!r} has no levels")

    def for_process(self, index: int) -> LoadKind:
        """This kind in load process ``index`` of ``load.processes`` (a kind whose requests
        must differ between processes, a sequence's correlation IDs, keeps the index)."""
        return self

    def slots(self, gen: Slots, level: Level) -> list[Coroutine[Any, Any, None]]:
        """The coroutines that issue ``level``'s requests until ``gen.stopping``."""
        raise MeasurementError(f"load kind {self.name!r} has no levels")

    def caller_options(self) -> dict[str, Any]:
        """Keywords for the transport (tracker.measure.transport.make_transport)."""
        return {}

    def record(self, t0: int, t1: int, got: object) -> tuple[int, tuple[int, ...]] | None:
        """(latency ns, a value per ``fields``) of one answered request sent at ``t0`` and
        returned at ``t1``; None: not this kind's answer (latency ``t1 - t0``)."""
        return None

    def tag(self, payload: Payload) -> tuple[int, ...] | None:
        """A value per ``fields`` read off the request that was sent, for a kind whose figures
        depend on what it sent rather than on the answer; None: ``record`` gives them."""
        return None

    def samples(self, config: ModelConfig, load: LoadSection) -> list[Sample] | None:
        """The samples this kind's requests are built from, in an order the load must keep
        (no repeats, no reordering); None: the load's own inputs. MeasurementError when the
        load asks for what this kind's requests cannot carry."""
        return None

    def add_metrics(self, m: Measurement, fields: Mapping[str, Ints]) -> None:
        """Fill this kind's figures of ``m`` (its ``duration_s`` and latencies already set)
        from the level's pooled per-request ``fields`` (and the latencies, ``LATENCY``)."""


def closed_slot(gen: Slots, offset: int, step: int = 1) -> Coroutine[Any, Any, None]:
    """A closed-loop slot: the next request when the last one returned. ``step`` slots
    interleave (slot k sends payloads k, k+step, ...): each payload once per pass, not once
    per slot, so load.repeat's share is what the server sees."""
    async def run() -> None:
        payloads, n, i = gen.payloads, len(gen.payloads), offset
        while not gen.stopping:
            await gen.send(payloads[i % n])
            i += step
    return run()
