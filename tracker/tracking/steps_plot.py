"""Where a pipeline's time goes, on the parent run: each step's share of the latency for the
default and the best configuration, so the bottleneck step is visible at a glance.

A step's time per request is its server-side queue plus its compute (input + infer + output),
``model/<step>/queue_ms`` and ``model/<step>/compute_*_ms`` at the level each trial is judged
by (the headline metrics). ``plots/steps.png`` is one stacked bar per configuration (queue
hatched, compute solid, one colour per step); ``steps.csv`` and the HTML table in report.html
carry the same figures. The entry model's own figures are left out: for an ensemble they are
its steps' again (docs/pipelines.md#what-it-measures-and-logs).
"""

from __future__ import annotations

import csv
import html
import io
from collections.abc import Mapping, Sequence
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from tracker.metrics import step_metric

COMPUTE = ("compute_input_ms", "compute_infer_ms", "compute_output_ms")
COLUMNS = ("configuration", "trial", "step", "queue_ms", "compute_ms", "total_ms", "share_pct",
           "requests_per_s", "batch_size")


def split(metrics: Mapping[str, float], steps: Sequence[str]) -> dict[str, tuple[float, float]]:
    """(queue ms, compute ms) per step from a trial's metrics; steps not measured left out."""
    out: dict[str, tuple[float, float]] = {}
    for step in steps:
        queue = metrics.get(step_metric(step, "queue_ms"))
        compute = [metrics.get(step_metric(step, f)) for f in COMPUTE]
        if queue is None or any(c is None for c in compute):
            continue
        out[step] = (float(queue), float(sum(c for c in compute if c is not None)))
    return out


def rows_of(configurations: Mapping[str, tuple[int, Mapping[str, float]]],
            steps: Sequence[str]) -> list[list[str]]:
    """The table: one line per configuration and step."""
    out = []
    for label, (trial, metrics) in configurations.items():
        parts = split(metrics, steps)
        total = sum(q + c for q, c in parts.values()) or 1.0
        for step, (queue, compute) in parts.items():
            out.append([label, str(trial), step, f"{queue:.3f}", f"{compute:.3f}",
                        f"{queue + compute:.3f}", f"{100 * (queue + compute) / total:.1f}",
                        f"{metrics.get(step_metric(step, 'requests_per_s'), 0.0):.1f}",
                        f"{metrics.get(step_metric(step, 'batch_size'), 0.0):.2f}"])
    return out


def table_csv(lines: list[list[str]]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(COLUMNS)
    writer.writerows(lines)
    return buf.getvalue()


def table_html(lines: list[list[str]]) -> str:
    head = "".join(f"<th>{c}</th>" for c in COLUMNS)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in line) + "</tr>"
                   for line in lines)
    return ("<h2>Where the time goes, step by step</h2>"
            "<p>Each step's server-side queue + compute per request at the level the "
            "configuration is judged by; the largest is the bottleneck.</p>"
            f"<table border=1 cellspacing=0 cellpadding=3><tr>{head}</tr>{body}</table>")


def plot(configurations: Mapping[str, tuple[int, Mapping[str, float]]], steps: Sequence[str],
         path: Path) -> Path | None:
    """The stacked bars as PNG (None when no configuration has a split)."""
    splits = {label: split(m, steps) for label, (_t, m) in configurations.items()}
    splits = {k: v for k, v in splits.items() if v}
    if not splits:
        return None
    fig = Figure(figsize=(7.5, 2.0 + 0.8 * len(splits)))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    colours = [f"C{i}" for i in range(max(len(steps), 1))]
    labels = list(splits)
    for y, label in enumerate(labels):
        left = 0.0
        for i, step in enumerate(steps):
            if step not in splits[label]:
                continue
            queue, compute = splits[label][step]
            ax.barh(y, compute, left=left, color=colours[i % len(colours)],
                    label=f"{step} compute" if y == 0 else None)
            left += compute
            ax.barh(y, queue, left=left, color=colours[i % len(colours)], alpha=0.45,
                    hatch="//", label=f"{step} queue" if y == 0 else None)
            left += queue
    ax.set_yticks(range(len(labels)), labels)
    ax.invert_yaxis()
    ax.set_xlabel("server-side time per request (ms): compute solid, queue hatched")
    ax.set_title("Where the time goes, step by step")
    ax.legend(fontsize=7, ncols=min(len(steps), 3), loc="upper center",
              bbox_to_anchor=(0.5, -0.3))
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


def write(configurations: Mapping[str, tuple[int, Mapping[str, float]]], steps: Sequence[str],
          out_dir: Path) -> tuple[dict[str, Path], str]:
    """``({"plots/steps.png": ..., "steps.csv": ...}, the report's HTML table)`` for the
    configurations (label -> (trial number, headline metrics)), e.g. the default and the
    best; nothing when no step was measured."""
    lines = rows_of(configurations, steps)
    if not lines:
        return {}, ""
    files: dict[str, Path] = {}
    png = plot(configurations, steps, out_dir / "plots" / "steps.png")
    if png is not None:
        files["plots/steps.png"] = png
    table = out_dir / "steps.csv"
    table.write_text(table_csv(lines))
    files["steps.csv"] = table
    return files, table_html(lines)
