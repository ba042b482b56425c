"""The study's trade-off plot: throughput against p99 latency of every complete trial, a
trace per entry model (each with its Pareto front, its confirmed medians and its constraint
lines), as PNG (matplotlib, Agg) and HTML (plotly). Each entry's figures are read by the names
the study logs them under (:func:`tracker.tracking.entry_names.entry_names`, which reads
``Configuration.metric_name``): bare for one entry, ``<entry>/<metric>`` among several."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from matplotlib.figure import Figure

from tracker.tracking.plots import (
    axis_label,
    bound,
    complete_rows,
    hover,
    save_html,
    save_png,
    titled,
)

if TYPE_CHECKING:
    from tracker.tracking.entry_names import EntryNames
    from tracker.trial_record import TrialRow

THROUGHPUT, P99 = "perf_throughput", "perf_latency_p99"


def _front(points: list[tuple[float, float, TrialRow]]) -> list[tuple[float, float, TrialRow]]:
    """Points no other point beats on both (lower latency, higher throughput), by latency."""
    front = []
    best = -math.inf
    for lat, thr, r in sorted(points, key=lambda p: (p[0], -p[1])):
        if thr > best:
            front.append((lat, thr, r))
            best = thr
    return front


@dataclass
class _Trace:
    """One entry model's points on the trade-off plot: (p99, throughput, row) per trial, its
    Pareto front, its confirmed medians (p99, median, CI low, CI high, row), its limits."""

    entry: str
    points: list[tuple[float, float, TrialRow]]
    front: list[tuple[float, float, TrialRow]]
    confirmed: list[tuple[float, float, float, float, TrialRow]]
    p99_max: float | None
    thr_min: float | None


def _confirmed_points(rows: Sequence[TrialRow], objectives: Mapping[str, str], throughput: str
                      ) -> list[tuple[float, float, float, float, TrialRow]]:
    """(median p99, median throughput, its 95% CI low and high, row) of the confirmed
    trials; none unless the first objective, the one ``confirmed`` holds, is ``throughput``
    (an unbounded side drawn as the median)."""
    if next(iter(objectives), None) != throughput:
        return []
    return [(r.confirmed_p99, mid, low if math.isfinite(low) else mid,
             high if math.isfinite(high) else mid, r)
            for r in rows if r.confirmed is not None and r.confirmed_p99 is not None
            for mid, low, high in [r.confirmed]]


def _traces(rows: Sequence[TrialRow], objectives: Mapping[str, str],
            constraints: Mapping[str, object], entries: EntryNames) -> list[_Trace]:
    """A trace per entry model that some complete trial measured, its figures read by the
    names the study gives them (``entries``)."""
    out = []
    for entry, names in entries.items():
        thr, p99 = names[THROUGHPUT], names[P99]
        done = [r for r in complete_rows(rows) if thr in r.metrics and p99 in r.metrics]
        if not done:
            continue
        pts = [(r.metrics[p99], r.metrics[thr], r) for r in done]
        out.append(_Trace(
            entry, pts, _front([p for p in pts if p[2].feasible]),
            _confirmed_points(done, objectives, thr),
            bound(constraints[p99], "max") if p99 in constraints else None,
            bound(constraints[thr], "min") if thr in constraints else None))
    return out


def _tradeoff_png(traces: Sequence[_Trace], caption: str | None, path: Path) -> Path:
    fig = Figure(figsize=(7, 4.5))
    ax = fig.add_subplot()
    for i, t in enumerate(traces):  # one colour per entry model; x: violates constraints
        colour = f"C{i}"
        for feasible, marker, label in ((True, "o", "feasible"),
                                        (False, "x", "violates constraints")):
            sel = [p for p in t.points if bool(p[2].feasible) == feasible]
            if sel:
                ax.scatter([p[0] for p in sel], [p[1] for p in sel], marker=marker,
                           color=colour, label=f"{t.entry}: {label}")
        for lat, thr, r in t.points:
            ax.annotate(str(r.number) + ("*" if r.baseline else ""), (lat, thr), fontsize=7,
                        xytext=(3, 3), textcoords="offset points")
        if t.front:
            ax.plot([p[0] for p in t.front], [p[1] for p in t.front], drawstyle="steps-post",
                    color=colour, label=f"{t.entry}: Pareto front")
        if t.confirmed:
            c = t.confirmed
            ax.errorbar([x[0] for x in c], [x[1] for x in c], fmt="D", color="tab:red",
                        yerr=[[x[1] - x[2] for x in c], [x[3] - x[1] for x in c]], capsize=4,
                        label=f"{t.entry}: confirmed median, 95% CI")
        if t.p99_max is not None:
            ax.axvline(t.p99_max, color=colour, linestyle="--",
                       label=f"{t.entry}: p99 limit {t.p99_max:g} ms")
        if t.thr_min is not None:
            ax.axhline(t.thr_min, color=colour, linestyle=":",
                       label=f"{t.entry}: throughput floor {t.thr_min:g}")
    ax.set_xlabel(axis_label(P99))
    ax.set_ylabel(axis_label(THROUGHPUT))
    ax.set_title(titled("Throughput vs p99 latency (trial number; * = default config)",
                         caption), fontsize="medium")
    ax.legend(loc="best", fontsize="small")
    return save_png(fig, path)


def _tradeoff_html(traces: Sequence[_Trace], caption: str | None, path: Path) -> Path:
    import plotly.graph_objects as go

    pf = go.Figure()
    for t in traces:  # every series named by its entry model, so the legend toggles a model
        for feasible, symbol, label in ((True, "circle", "feasible"),
                                        (False, "x", "violates constraints")):
            sel = [p for p in t.points if bool(p[2].feasible) == feasible]
            pf.add_trace(go.Scatter(x=[p[0] for p in sel], y=[p[1] for p in sel],
                                    mode="markers", marker_symbol=symbol,
                                    name=f"{t.entry}: {label}", legendgroup=t.entry,
                                    text=[hover(p[2]) for p in sel]))
        if t.front:
            pf.add_trace(go.Scatter(x=[p[0] for p in t.front], y=[p[1] for p in t.front],
                                    mode="lines", line_shape="hv", legendgroup=t.entry,
                                    name=f"{t.entry}: Pareto front"))
        if t.confirmed:
            c = t.confirmed
            pf.add_trace(go.Scatter(x=[x[0] for x in c], y=[x[1] for x in c], mode="markers",
                                    marker_symbol="diamond", legendgroup=t.entry,
                                    name=f"{t.entry}: confirmed median, 95% CI",
                                    text=[hover(x[4]) for x in c],
                                    error_y={"type": "data", "symmetric": False,
                                             "array": [x[3] - x[1] for x in c],
                                             "arrayminus": [x[1] - x[2] for x in c]}))
        if t.p99_max is not None:
            pf.add_vline(x=t.p99_max, line_dash="dash", line_color="red",
                         annotation_text=f"{t.entry}: p99 limit {t.p99_max:g} ms")
        if t.thr_min is not None:
            pf.add_hline(y=t.thr_min, line_dash="dot", line_color="red",
                         annotation_text=f"{t.entry}: throughput floor {t.thr_min:g}")
    pf.update_layout(title=titled("Throughput vs p99 latency", caption).replace("\n", "<br>"),
                     xaxis_title=axis_label(P99), yaxis_title=axis_label(THROUGHPUT))
    return save_html(pf, path)


def tradeoff(rows: Sequence[TrialRow], objectives: Mapping[str, str],
             constraints: Mapping[str, object], out: Path, entries: EntryNames,
             caption: str | None = None) -> dict[str, Path]:
    """Throughput against p99 latency of every complete trial, a trace per entry model
    (``entries``: :func:`tracker.tracking.entry_names.entry_names`); nothing when no trial has an
    entry's two figures."""
    traces = _traces(rows, objectives, constraints, entries)
    if not traces:
        return {}
    return {"tradeoff.png": _tradeoff_png(traces, caption, out / "tradeoff.png"),
            "tradeoff.html": _tradeoff_html(traces, caption, out / "tradeoff.html")}
