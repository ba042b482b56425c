"""``load.trace``: a recorded schedule of requests, replayed open loop with its shape.

Two formats, told apart by the file's suffix:

- Perf Analyzer's ``--request-intervals`` file (any suffix but ``.jsonl``): one gap in
  microseconds per line, the time from the previous request to this one;
- ``.jsonl``: one request per line, ``{"timestamp": ms}`` (milliseconds from the trace's
  start, AIPerf's trace convention) with an optional ``"batch_size"`` and ``"input_index"``
  (the request's entry of the load's inputs).

:func:`read_trace` returns the gaps (ns) and the input indices; a bad trace (unreadable,
empty, a negative gap, a timestamp going back, a line that is not a number or an object) is a
:class:`~tracker.errors.SpecError` naming the file and the line, so ``tracker check`` refuses
it before anything runs. A trace plays at its own mean rate; a level (a request rate) scales
every gap by the same factor, so bursts stay bursts (tracker/measure/kinds/trace.py).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from tracker.errors import SpecError

MAX_REQUESTS = 10_000_000


@dataclass(frozen=True)
class Trace:
    """A trace's requests: each one's gap from the one before (ns; the first request's gap is
    its time from the start), its input index (-1: the load's next input) and batch size (0:
    the load's)."""

    gaps_ns: tuple[int, ...]
    indices: tuple[int, ...]
    batch_sizes: tuple[int, ...]

    @property
    def span_ns(self) -> int:
        return sum(self.gaps_ns)

    @property
    def rate(self) -> float:
        """Requests per second as recorded: the requests over the span of their gaps."""
        return len(self.gaps_ns) / (self.span_ns * 1e-9)


class TraceProblem(Exception):
    """What is wrong with a trace file, in words naming the file and the line."""


def _bad(path: Path, line: int, why: str) -> TraceProblem:
    return TraceProblem(f"{path}, line {line}: {why}")


def _number(text: str, path: Path, line: int, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise _bad(path, line, f"{what} must be a number, but got {text.strip()!r}") from None
    if not math.isfinite(value):
        raise _bad(path, line, f"{what} must be a finite number, but got {text.strip()!r}")
    return value


def _intervals(lines: list[str], path: Path) -> Trace:
    gaps: list[int] = []
    for n, text in enumerate(lines, 1):
        if not text.strip():
            raise _bad(path, n, "is empty; every line is one gap in microseconds")
        gap = _number(text, path, n, "a gap (microseconds)")
        if gap < 0:
            raise _bad(path, n, f"a gap must be >= 0 microseconds, but got {text.strip()}")
        gaps.append(round(gap * 1000))
    return Trace(tuple(gaps), (-1,) * len(gaps), (0,) * len(gaps))


def _field(row: dict[str, object], key: str, path: Path, line: int, low: int) -> int:
    value = row.get(key, low - 1 if low > 0 else -1)
    if not isinstance(value, int) or isinstance(value, bool) or (key in row and value < low):
        raise _bad(path, line, f"{key!r} must be an integer >= {low}, but got {value!r}")
    return value


def _jsonl(lines: list[str], path: Path) -> Trace:
    gaps: list[int] = []
    indices: list[int] = []
    batches: list[int] = []
    last = 0.0
    for n, text in enumerate(lines, 1):
        if not text.strip():
            continue
        try:
            row = json.loads(text)
        except json.JSONDecodeError as exc:
            raise _bad(path, n, f"is not JSON ({exc.msg})") from None
        if not isinstance(row, dict) or "timestamp" not in row:
            raise _bad(path, n, f"must be an object with a 'timestamp' (ms), but got {text!r}")
        stamp = _number(str(row["timestamp"]), path, n, "'timestamp' (ms)")
        if stamp < last:
            raise _bad(path, n, f"timestamps must not go back, but {stamp:g} ms follows "
                                f"{last:g} ms")
        gaps.append(round((stamp - last) * 1e6))
        last = stamp
        indices.append(_field(row, "input_index", path, n, 0))
        batches.append(max(_field(row, "batch_size", path, n, 1), 0))
    return Trace(tuple(gaps), tuple(indices), tuple(batches))


def parse_trace(path: Path) -> Trace:
    """The requests of the trace file at ``path`` (the module doc has the formats);
    :class:`TraceProblem` naming the line of the first problem."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceProblem(f"cannot read {path}: {exc}") from exc
    trace = _jsonl(lines, path) if path.suffix == ".jsonl" else _intervals(lines, path)
    if not trace.gaps_ns:
        raise _bad(path, 1, "has no request: a trace needs at least one")
    if len(trace.gaps_ns) > MAX_REQUESTS:
        raise _bad(path, MAX_REQUESTS + 1, f"a trace holds at most {MAX_REQUESTS:,} requests")
    if trace.span_ns <= 0:
        raise _bad(path, len(lines), "every gap is 0: the trace has no duration, so no rate")
    return trace


def read_trace(path: Path) -> Trace:
    """:func:`parse_trace`, a problem as a SpecError (``load.trace: <file>, line N: ...``)."""
    try:
        return parse_trace(path)
    except TraceProblem as exc:
        raise SpecError([f"load.trace: {exc}"]) from exc
