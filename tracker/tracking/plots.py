"""The study's three plots, each as PNG (matplotlib, Agg canvas: no display, no network) and
HTML (plotly, plotly.js from its CDN):

- ``history``: the first objective per trial, best-so-far line, the default config's level;
- ``tradeoff``: throughput vs p99 latency per trial, the Pareto front and the constraint lines;
- ``parallel``: parallel coordinates of the parameters, coloured by the first objective.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from tracker.metrics import unit

if TYPE_CHECKING:
    from tracker.tracking.rows import TrialRow

THROUGHPUT, P99 = "perf_throughput", "perf_latency_p99"


def _label(metric: str) -> str:
    u = unit(metric)
    return f"{metric} ({u})" if u else metric


def _bound(spec: object, side: str) -> float | None:
    value = spec.get(side) if isinstance(spec, Mapping) else getattr(spec, side, None)
    return None if value is None else float(value)


def _save_png(fig: Figure, path: Path) -> Path:
    FigureCanvasAgg(fig)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    return path


def _save_html(fig: Any, path: Path) -> Path:
    fig.write_html(str(path), include_plotlyjs="cdn", full_html=True)
    return path


def _complete(rows: Sequence[TrialRow]) -> list[TrialRow]:
    return sorted((r for r in rows if r.complete), key=lambda r: r.number)


# ---- optimisation history ------------------------------------------------------------------

def _best_so_far(rows: Sequence[TrialRow], maximize: bool) -> tuple[list[int], list[float]]:
    xs: list[int] = []
    ys: list[float] = []
    best: float | None = None
    for r in rows:
        if r.feasible and r.values:
            v = r.values[0]
            if best is None or (v > best if maximize else v < best):
                best = v
        if best is not None:
            xs.append(r.number)
            ys.append(best)
    return xs, ys


def _titled(title: str, caption: str | None) -> str:
    return f"{title}\n{caption}" if caption else title


def _bars(rows: Sequence[TrialRow]) -> tuple[list[float], list[list[float]]]:
    """Confirmed medians and their error bars (an unbounded side drawn as none)."""
    mid = [c[0] for r in rows if (c := r.confirmed)]
    err = [[c[0] - c[1] if math.isfinite(c[1]) else 0.0 for r in rows if (c := r.confirmed)],
           [c[2] - c[0] if math.isfinite(c[2]) else 0.0 for r in rows if (c := r.confirmed)]]
    return mid, err


def history(rows: Sequence[TrialRow], objectives: Mapping[str, str], out: Path,
            caption: str | None = None) -> dict[str, Path]:
    import plotly.graph_objects as go

    metric, direction = next(iter(objectives.items()))
    done = _complete(rows)
    feas = [r for r in done if r.feasible]
    infeas = [r for r in done if not r.feasible]
    bx, by = _best_so_far(done, direction == "maximize")
    base = next((r for r in done if r.baseline), None)

    fig = Figure(figsize=(7, 4))
    ax = fig.add_subplot()
    if feas:
        ax.scatter([r.number for r in feas], [r.values[0] for r in feas if r.values],
                   label="feasible", color="tab:blue")
    if infeas:
        ax.scatter([r.number for r in infeas], [r.values[0] for r in infeas if r.values],
                   label="violates constraints", color="tab:orange", marker="x")
    if bx:
        ax.step(bx, by, where="post", color="tab:green", label="best so far")
    if base is not None and base.values:
        ax.axhline(base.values[0], color="grey", linestyle="--", label="default config")
    conf = [r for r in done if r.confirmed is not None]
    if conf:  # the confirmation's medians with their 95% intervals, beside the search points
        mid, err = _bars(conf)
        ax.errorbar([r.number + 0.15 for r in conf], mid, yerr=err, fmt="D", color="tab:red",
                    capsize=4, label="confirmed median, 95% CI")
    ax.set_xlabel("trial")
    ax.set_ylabel(_label(metric))
    ax.set_title(_titled("Optimization history", caption), fontsize="medium")
    ax.legend(loc="best", fontsize="small")

    pf = go.Figure()
    pf.add_trace(go.Scatter(x=[r.number for r in feas], y=[r.values[0] for r in feas if r.values],
                            mode="markers", name="feasible", text=[_hover(r) for r in feas]))
    pf.add_trace(go.Scatter(x=[r.number for r in infeas],
                            y=[r.values[0] for r in infeas if r.values], mode="markers",
                            marker_symbol="x", name="violates constraints",
                            text=[_hover(r) for r in infeas]))
    if bx:
        pf.add_trace(go.Scatter(x=bx, y=by, mode="lines", line_shape="hv", name="best so far"))
    if base is not None and base.values:
        pf.add_hline(y=base.values[0], line_dash="dash", annotation_text="default config")
    if conf:
        pf.add_trace(go.Scatter(x=[r.number + 0.15 for r in conf], y=mid, mode="markers",
                                marker_symbol="diamond", name="confirmed median, 95% CI",
                                error_y={"type": "data", "symmetric": False,
                                         "array": err[1], "arrayminus": err[0]}))
    pf.update_layout(title=_titled("Optimization history", caption).replace("\n", "<br>"),
                     xaxis_title="trial",
                     yaxis_title=_label(metric))
    return {"history.png": _save_png(fig, out / "history.png"),
            "history.html": _save_html(pf, out / "history.html")}


def _hover(r: TrialRow) -> str:
    params = ", ".join(f"{k}={v}" for k, v in sorted(r.params.items()))
    return f"{r.name}: {params}"


# ---- throughput vs p99 latency -------------------------------------------------------------

def _front(points: list[tuple[float, float, TrialRow]]) -> list[tuple[float, float, TrialRow]]:
    """Points no other point beats on both (lower latency, higher throughput), by latency."""
    front = []
    best = -math.inf
    for lat, thr, r in sorted(points, key=lambda p: (p[0], -p[1])):
        if thr > best:
            front.append((lat, thr, r))
            best = thr
    return front


def _confirmed_points(rows: Sequence[TrialRow], objectives: Mapping[str, str]
                      ) -> list[tuple[float, float, float, float, TrialRow]]:
    """(median p99, median throughput, its 95% CI low and high, row) of the confirmed
    trials; none unless the first objective, the one ``confirmed`` holds, is throughput."""
    if next(iter(objectives), None) != THROUGHPUT:
        return []
    return [(r.confirmed_p99, *r.confirmed, r) for r in rows
            if r.confirmed is not None and r.confirmed_p99 is not None]


def tradeoff(rows: Sequence[TrialRow], objectives: Mapping[str, str],
             constraints: Mapping[str, object], out: Path,
             caption: str | None = None) -> dict[str, Path]:
    import plotly.graph_objects as go

    done = [r for r in _complete(rows) if THROUGHPUT in r.metrics and P99 in r.metrics]
    if not done:
        return {}
    pts = [(r.metrics[P99], r.metrics[THROUGHPUT], r) for r in done]
    front = _front([p for p in pts if p[2].feasible])
    p99_max = _bound(constraints[P99], "max") if P99 in constraints else None
    thr_min = _bound(constraints[THROUGHPUT], "min") if THROUGHPUT in constraints else None

    fig = Figure(figsize=(7, 4.5))
    ax = fig.add_subplot()
    for feasible, color, marker, label in ((True, "tab:blue", "o", "feasible"),
                                           (False, "tab:orange", "x", "violates constraints")):
        sel = [p for p in pts if bool(p[2].feasible) == feasible]
        if sel:
            ax.scatter([p[0] for p in sel], [p[1] for p in sel], color=color, marker=marker,
                       label=label)
    for lat, thr, r in pts:
        ax.annotate(str(r.number) + ("*" if r.baseline else ""), (lat, thr), fontsize=7,
                    xytext=(3, 3), textcoords="offset points")
    if front:
        ax.plot([p[0] for p in front], [p[1] for p in front], color="tab:green",
                drawstyle="steps-post", label="Pareto front")
    conf = [(lat, mid, low if math.isfinite(low) else mid, high if math.isfinite(high) else mid,
             r) for lat, mid, low, high, r in _confirmed_points(done, objectives)]
    if conf:
        ax.errorbar([c[0] for c in conf], [c[1] for c in conf],
                    yerr=[[c[1] - c[2] for c in conf], [c[3] - c[1] for c in conf]], fmt="D",
                    color="tab:red", capsize=4, label="confirmed median, 95% CI")
    if p99_max is not None:
        ax.axvline(p99_max, color="red", linestyle="--", label=f"p99 limit {p99_max:g} ms")
    if thr_min is not None:
        ax.axhline(thr_min, color="red", linestyle=":", label=f"throughput floor {thr_min:g}")
    ax.set_xlabel(_label(P99))
    ax.set_ylabel(_label(THROUGHPUT))
    ax.set_title(_titled("Throughput vs p99 latency (trial number; * = default config)",
                         caption), fontsize="medium")
    ax.legend(loc="best", fontsize="small")

    pf = go.Figure()
    for feasible, symbol, label in ((True, "circle", "feasible"),
                                    (False, "x", "violates constraints")):
        sel = [p for p in pts if bool(p[2].feasible) == feasible]
        pf.add_trace(go.Scatter(x=[p[0] for p in sel], y=[p[1] for p in sel], mode="markers",
                                marker_symbol=symbol, name=label,
                                text=[_hover(p[2]) for p in sel]))
    if front:
        pf.add_trace(go.Scatter(x=[p[0] for p in front], y=[p[1] for p in front],
                                mode="lines", line_shape="hv", name="Pareto front"))
    if conf:
        pf.add_trace(go.Scatter(x=[c[0] for c in conf], y=[c[1] for c in conf], mode="markers",
                                marker_symbol="diamond", name="confirmed median, 95% CI",
                                text=[_hover(c[4]) for c in conf],
                                error_y={"type": "data", "symmetric": False,
                                         "array": [c[3] - c[1] for c in conf],
                                         "arrayminus": [c[1] - c[2] for c in conf]}))
    if p99_max is not None:
        pf.add_vline(x=p99_max, line_dash="dash", line_color="red",
                     annotation_text=f"p99 limit {p99_max:g} ms")
    if thr_min is not None:
        pf.add_hline(y=thr_min, line_dash="dot", line_color="red")
    pf.update_layout(title=_titled("Throughput vs p99 latency", caption).replace("\n", "<br>"),
                     xaxis_title=_label(P99),
                     yaxis_title=_label(THROUGHPUT))
    return {"tradeoff.png": _save_png(fig, out / "tradeoff.png"),
            "tradeoff.html": _save_html(pf, out / "tradeoff.html")}


# ---- parallel coordinates ------------------------------------------------------------------

def _encode(values: list[object]) -> tuple[list[float], list[float], list[str]]:
    """Numbers stay numbers; anything else becomes its index among the sorted distinct values."""
    if all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
        nums = [float(v) for v in values]  # type: ignore[arg-type]
        ticks = sorted(set(nums))
        return nums, ticks, [f"{t:g}" for t in ticks]
    labels = sorted({str(v) for v in values})
    index = {label: float(i) for i, label in enumerate(labels)}
    return [index[str(v)] for v in values], list(index.values()), labels


def parallel(rows: Sequence[TrialRow], objectives: Mapping[str, str],
             out: Path) -> dict[str, Path]:
    import plotly.graph_objects as go

    metric = next(iter(objectives))
    done = [r for r in _complete(rows) if r.values]
    keys = sorted({k for r in done for k in r.params})
    if not done or not keys:
        return {}
    columns = [(k, _encode([r.params.get(k, "") for r in done])) for k in keys]
    score = [float(r.values[0]) for r in done if r.values]
    columns.append((metric, (score, sorted(set(score)), [f"{s:.4g}" for s in sorted(set(score))])))

    fig = Figure(figsize=(max(6.0, 1.8 * len(columns)), 4.5))
    ax = fig.add_subplot()
    lo, hi = min(score), max(score)
    from matplotlib import colormaps

    viridis = colormaps["viridis"]
    scaled = []
    for _, (vals, _ticks, _labels) in columns:
        vmin, vmax = min(vals), max(vals)
        span = (vmax - vmin) or 1.0
        scaled.append([(v - vmin) / span for v in vals])
    for i, r in enumerate(done):
        ys = [col[i] for col in scaled]
        shade = 0.5 if hi == lo else (score[i] - lo) / (hi - lo)
        ax.plot(range(len(columns)), ys, color=viridis(shade), alpha=0.8,
                linewidth=2.0 if r.baseline else 1.2, linestyle="--" if r.baseline else "-")
    for x, (_name, (vals, ticks, labels)) in enumerate(columns):
        ax.axvline(x, color="black", linewidth=0.8)
        vmin, vmax = min(vals), max(vals)
        span = (vmax - vmin) or 1.0
        show = list(zip(ticks, labels, strict=True))
        if len(show) > 6:
            show = [show[0], show[len(show) // 2], show[-1]]
        for t, label in show:
            ax.text(x + 0.03, (t - vmin) / span, label, fontsize=7, va="center")
    ax.set_xticks(range(len(columns)), [c[0] for c in columns], rotation=15, fontsize=8)
    ax.set_yticks([])
    ax.set_title(f"Parameters, coloured by {metric} (dashed: default config)")

    dims = [dict(label=name, values=vals, tickvals=ticks if len(ticks) <= 12 else None,
                 ticktext=labels if len(ticks) <= 12 else None)
            for name, (vals, ticks, labels) in columns]
    pf = go.Figure(go.Parcoords(line=dict(color=score, colorscale="Viridis", showscale=True),
                                dimensions=dims))
    pf.update_layout(title=f"Parameters, coloured by {metric}")
    return {"parallel.png": _save_png(fig, out / "parallel.png"),
            "parallel.html": _save_html(pf, out / "parallel.html")}


def make_all(rows: Sequence[TrialRow], objectives: Mapping[str, str],
             constraints: Mapping[str, object], out: Path,
             caption: str | None = None) -> dict[str, Path]:
    """Every plot that the data allows (none before the first complete trial); ``caption``
    (the confirmed verdict) goes under the titles of the history and trade-off plots."""
    out.mkdir(parents=True, exist_ok=True)
    if not _complete(rows):
        return {}
    files: dict[str, Path] = {}
    files.update(history(rows, objectives, out, caption))
    files.update(tradeoff(rows, objectives, constraints, out, caption))
    files.update(parallel(rows, objectives, out))
    return files
