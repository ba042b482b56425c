"""Two of the study's plots, each as PNG (matplotlib, Agg canvas: no display, no network) and
HTML (plotly, plotly.js from its CDN), and the helpers every study plot shares (the trade-off
plot is tradeoff_plot.py):

- ``history``: the first objective per trial, best-so-far line, the default config's level;
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
    from tracker.trial_record import TrialRow


def axis_label(metric: str) -> str:
    u = unit(metric)
    return f"{metric} ({u})" if u else metric


def bound(spec: object, side: str) -> float | None:
    value = spec.get(side) if isinstance(spec, Mapping) else getattr(spec, side, None)
    return None if value is None else float(value)


def save_png(fig: Figure, path: Path) -> Path:
    FigureCanvasAgg(fig)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    return path


def save_html(fig: Any, path: Path) -> Path:
    fig.write_html(str(path), include_plotlyjs="cdn", full_html=True)
    return path


def complete_rows(rows: Sequence[TrialRow]) -> list[TrialRow]:
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


def titled(title: str, caption: str | None) -> str:
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
    done = complete_rows(rows)
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
    ax.set_ylabel(axis_label(metric))
    ax.set_title(titled("Optimization history", caption), fontsize="medium")
    ax.legend(loc="best", fontsize="small")

    pf = go.Figure()
    pf.add_trace(go.Scatter(x=[r.number for r in feas], y=[r.values[0] for r in feas if r.values],
                            mode="markers", name="feasible", text=[hover(r) for r in feas]))
    pf.add_trace(go.Scatter(x=[r.number for r in infeas],
                            y=[r.values[0] for r in infeas if r.values], mode="markers",
                            marker_symbol="x", name="violates constraints",
                            text=[hover(r) for r in infeas]))
    if bx:
        pf.add_trace(go.Scatter(x=bx, y=by, mode="lines", line_shape="hv", name="best so far"))
    if base is not None and base.values:
        pf.add_hline(y=base.values[0], line_dash="dash", annotation_text="default config")
    if conf:
        pf.add_trace(go.Scatter(x=[r.number + 0.15 for r in conf], y=mid, mode="markers",
                                marker_symbol="diamond", name="confirmed median, 95% CI",
                                error_y={"type": "data", "symmetric": False,
                                         "array": err[1], "arrayminus": err[0]}))
    pf.update_layout(title=titled("Optimization history", caption).replace("\n", "<br>"),
                     xaxis_title="trial",
                     yaxis_title=axis_label(metric))
    return {"history.png": save_png(fig, out / "history.png"),
            "history.html": save_html(pf, out / "history.html")}


def hover(r: TrialRow) -> str:
    params = ", ".join(f"{k}={v}" for k, v in sorted(r.params.items()))
    return f"{r.name}: {params}"


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
    done = [r for r in complete_rows(rows) if r.values]
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
    return {"parallel.png": save_png(fig, out / "parallel.png"),
            "parallel.html": save_html(pf, out / "parallel.html")}
