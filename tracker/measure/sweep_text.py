"""A sweep as text for people: one line per level, then the notes (unstable, invalid,
client overhead) under it."""

from __future__ import annotations

from collections.abc import Sequence

from tracker.measure.types import Measurement


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def compute_ms(m: Measurement) -> float | None:
    """Server compute per request: input + infer + output (None when not measured)."""
    parts = [m.server_compute_input_ms, m.server_compute_infer_ms, m.server_compute_output_ms]
    known = [p for p in parts if p is not None]
    return sum(known) if known else None


def table(measurements: Sequence[Measurement]) -> str:
    """Level, throughput, p50/p99 latency, server queue and compute (ms), stability."""
    rate_mode = bool(measurements) and all(m.concurrency is None for m in measurements)
    head = "rate/s" if rate_mode else "concurrency"
    lines = [f"{head:>11} {'infer/s':>10} {'p50 ms':>8} {'p99 ms':>8} {'queue ms':>9} "
             f"{'compute ms':>10}  result"]
    notes: list[str] = []
    for m in measurements:
        level = m.request_rate if rate_mode else m.concurrency
        status = "stable" if m.stable else "UNSTABLE"
        if not m.valid:
            status = "INVALID"
        if m.errors:
            status += f", {m.errors} errors"
        lines.append(f"{level if level is not None else '-':>11} {m.throughput:>10,.1f} "
                     f"{_ms(m.latency_p50_ms):>8} {_ms(m.latency_p99_ms):>8} "
                     f"{_ms(m.server_queue_ms):>9} {_ms(compute_ms(m)):>10}  {status}")
        if not m.valid:
            notes.append(f"{m.level}: invalid: {m.invalid_reason}")
        notes.extend(f"{m.level}: {w}" for w in m.warnings)
    return "\n".join(lines + (["", *notes] if notes else []))
