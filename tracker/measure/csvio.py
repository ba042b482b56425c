"""perf_analyzer's CSV (``-f FILE --verbose-csv``), written from and read into Measurements.

The columns and units are perf_analyzer's own (its report writer): the first column is
``Concurrency`` or ``Request Rate``, then ``Inferences/Second`` and the latency split in whole
microseconds, the percentiles, and (verbose CSV) ``Avg latency``, ``request/response`` and
``response wait``. Differences from perf_analyzer's file, on purpose: rows stay in the order
they were measured (perf_analyzer sorts by throughput), and a figure that was not measured
is an empty cell (perf_analyzer writes 0): the built-in client does not time request
serialization apart, so its ``Client Send``, ``Client Recv`` and ``request/response`` are empty.

Streaming (decoupled) models add columns after perf_analyzer's own, in the catalog's names:
``Output Tokens/Second``, ``Output Tokens/Request``, ``TTFT avg`` ... ``TTFT p99`` and
``ITL avg`` ... ``ITL p99`` (microseconds, like the other times); a file without a streaming
level has none of them. Stateful models (sequence loads) add ``Sequences/Second`` and
``Sequence avg latency`` ... ``Sequence p99 latency`` (a whole sequence, microseconds) the same
way.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Mapping
from pathlib import Path

from tracker.errors import MeasurementError
from tracker.measure.types import LoadClient, Measurement
from tracker.metrics import BY_NAME, MS_COLUMNS

CONCURRENCY = "Concurrency"
REQUEST_RATE = "Request Rate"
THROUGHPUT = "Inferences/Second"
COLUMNS: tuple[str, ...] = (
    "Client Send", "Network+Server Send/Recv", "Server Queue", "Server Compute Input",
    "Server Compute Infer", "Server Compute Output", "Client Recv",
    "p50 latency", "p90 latency", "p95 latency", "p99 latency",
    "Avg latency", "request/response", "response wait",
)
TOKENS_PER_S = BY_NAME["perf_output_token_throughput"].column or "Output Tokens/Second"
TOKENS_PER_REQUEST = "Output Tokens/Request"
STREAM_MS: tuple[tuple[str, str], ...] = tuple(
    (m.column, m.field) for m in BY_NAME.values()
    if m.column and m.field and m.field.startswith(("ttft_", "itl_")))
STREAM_COLUMNS: tuple[str, ...] = (TOKENS_PER_S, TOKENS_PER_REQUEST,
                                   *(col for col, _ in STREAM_MS))
# stateful models (sequence loads): after the streaming ones, only when a level sent sequences
SEQUENCES_PER_S = BY_NAME["perf_sequence_throughput"].column or "Sequences/Second"
SEQUENCE_MS: tuple[tuple[str, str], ...] = tuple(
    (m.column, m.field) for m in BY_NAME.values()
    if m.column and m.field and m.field.startswith("sequence_latency_"))
SEQUENCE_COLUMNS: tuple[str, ...] = (SEQUENCES_PER_S, *(col for col, _ in SEQUENCE_MS))
# perf_analyzer --collect-metrics columns: "GPU-uuid:value;GPU-uuid:value;" per cell.
GPU_COLUMNS = {
    "Avg GPU Utilization": ("gpu_utilization", 100.0, "mean"),
    "Avg GPU Power Usage": ("gpu_power_usage", 1.0, "sum"),
    "Max GPU Memory Usage": ("gpu_used_memory", 1e-6, "sum"),
}

# column -> Measurement attribute, in ms (the file holds microseconds): the catalog's
# metrics plus the client's own times (not metrics)
_MS_FIELDS = {**MS_COLUMNS, "Client Send": "client_send_ms", "Client Recv": "client_recv_ms"}


def _us(ms: float | None) -> str:
    return "" if ms is None else str(round(ms * 1000.0))


def header(measurements: Iterable[Measurement]) -> list[str]:
    """The header row: ``Request Rate`` first when every level is a request rate."""
    ms = list(measurements)
    first = REQUEST_RATE if ms and all(m.concurrency is None for m in ms) else CONCURRENCY
    streamed = any(_streamed(m) for m in ms)
    sequenced = any(m.sequence_throughput is not None for m in ms)
    return [first, THROUGHPUT, *COLUMNS, *(STREAM_COLUMNS if streamed else ()),
            *(SEQUENCE_COLUMNS if sequenced else ())]


def _streamed(m: Measurement) -> bool:
    return m.streaming or any(getattr(m, f) is not None for _, f in STREAM_MS)


def _num(value: float | None, fmt: str = ".4f") -> str:
    return "" if value is None else format(value, fmt)


def _row(m: Measurement, first: str) -> list[str]:
    level = m.concurrency if first == CONCURRENCY else m.request_rate
    avg = m.latency_avg_ms
    wait = None if avg is None else max(avg - m.client_ms, 0.0)
    client = (None if m.client_send_ms is None and m.client_recv_ms is None
              else m.client_ms)
    return [
        "" if level is None else f"{level:g}", f"{m.throughput:.4f}",
        _us(m.client_send_ms), _us(m.network_ms), _us(m.server_queue_ms),
        _us(m.server_compute_input_ms), _us(m.server_compute_infer_ms),
        _us(m.server_compute_output_ms), _us(m.client_recv_ms),
        _us(m.latency_p50_ms), _us(m.latency_p90_ms), _us(m.latency_p95_ms),
        _us(m.latency_p99_ms), _us(avg), _us(client), _us(wait),
    ]


def _stream_row(m: Measurement) -> list[str]:
    return [_num(m.output_token_throughput), _num(m.output_tokens_avg),
            *(_us(getattr(m, f)) for _, f in STREAM_MS)]


def dumps(measurements: Iterable[Measurement]) -> str:
    """The CSV text for the levels that have latencies (a level where nothing completed has
    no row, as with perf_analyzer)."""
    rows = [m for m in measurements if m.latency_avg_ms is not None]
    head = header(rows)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(head)
    streamed, sequenced = TOKENS_PER_S in head, SEQUENCES_PER_S in head
    for m in rows:
        writer.writerow(_row(m, head[0]) + (_stream_row(m) if streamed else [])
                        + ([_num(m.sequence_throughput), *(_us(getattr(m, f))
                                                           for _, f in SEQUENCE_MS)]
                           if sequenced else []))
    return buf.getvalue()


def write_csv(measurements: Iterable[Measurement], path: str | Path) -> Path:
    """Write :func:`dumps` to ``path`` (parent folders made) and return the path."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(dumps(measurements))
    return out


def _float(row: Mapping[str, str], column: str, where: str) -> float | None:
    text = (row.get(column) or "").strip()
    if not text:
        return None
    try:
        return float(text)
    except ValueError as exc:
        raise MeasurementError(f"{where}: column {column!r} must be a number, "
                               f"but got {text!r}") from exc


def _gpu_cell(text: str, scale: float, how: str) -> float | None:
    """``GPU-a:0.5;GPU-b:0.7;`` -> one number (mean or sum over GPUs, scaled)."""
    values = []
    for part in text.split(";"):
        if ":" in part:
            _, _, value = part.rpartition(":")
            try:
                values.append(float(value) * scale)
            except ValueError:
                continue
    if not values:
        return None
    return sum(values) / len(values) if how == "mean" else sum(values)


def loads(text: str, *, source: LoadClient = "perf_analyzer",
          where: str = "CSV") -> list[Measurement]:
    """Measurements from perf_analyzer CSV text (µs -> ms). Raises MeasurementError when the
    header lacks ``Inferences/Second`` or a level column, or a cell is not a number."""
    reader = csv.DictReader(io.StringIO(text))
    names = [n.strip() for n in (reader.fieldnames or [])]
    reader.fieldnames = names
    level_col = next((c for c in (CONCURRENCY, REQUEST_RATE) if c in names), None)
    if level_col is None or THROUGHPUT not in names:
        raise MeasurementError(
            f"{where}: perf_analyzer's CSV must have a {CONCURRENCY!r} or {REQUEST_RATE!r} "
            f"column and {THROUGHPUT!r}, but the header is {names}")
    out: list[Measurement] = []
    for lineno, row in enumerate(reader, start=2):
        at = f"{where} line {lineno}"
        level = _float(row, level_col, at)
        m = Measurement(source=source, stable=True)
        if level_col == CONCURRENCY:
            m.concurrency = None if level is None else int(level)
        else:
            m.request_rate = level
        m.throughput = _float(row, THROUGHPUT, at) or 0.0
        if TOKENS_PER_S in names:
            m.streaming = True
            m.output_token_throughput = _float(row, TOKENS_PER_S, at)
            m.output_tokens_avg = _float(row, TOKENS_PER_REQUEST, at)
        if SEQUENCES_PER_S in names:
            m.sequence_throughput = _float(row, SEQUENCES_PER_S, at)
        for column, attr in _MS_FIELDS.items():
            value = _float(row, column, at)
            if value is not None:
                setattr(m, attr, value / 1000.0)
        for column, (metric, scale, how) in GPU_COLUMNS.items():
            cell = (row.get(column) or "").strip()
            value = _gpu_cell(cell, scale, how) if cell else None
            if value is not None:
                m.monitors[metric] = value
        out.append(m)
    return out


def read_csv(path: str | Path, *, source: LoadClient = "perf_analyzer") -> list[Measurement]:
    """Measurements from a perf_analyzer CSV file."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise MeasurementError(f"cannot read perf_analyzer CSV {p}: {exc}") from exc
    return loads(text, source=source, where=str(p))
