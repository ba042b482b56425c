"""A streaming model's plot: time to first token and inter-token latency against concurrency,
one line per trial (PNG with matplotlib's Agg canvas, HTML with plotly), beside the study's
other plots (plots.py).

The points are each trial run's sweep (``sweep/<metric>`` at step = concurrency, logged by
tracking/runs.py), read back from MLflow by :func:`sweep_curves`. A TTFT or ITL maximum of the
spec's constraints is drawn as a dashed line.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from tracker.measure.kinds.streaming import Streaming
from tracker.tracking.runs import SWEEP_PREFIX

if TYPE_CHECKING:
    from mlflow import MlflowClient

    from tracker.trial_record import TrialRow

TTFT, ITL = Streaming.plotted  # what the streaming load kind says a study draws
PANELS = ((TTFT, "time to first token p99 (ms)"), (ITL, "inter-token latency p50 (ms)"))
#: trial label -> metric -> [(concurrency, value)] in concurrency order
Curves = dict[str, dict[str, list[tuple[int, float]]]]


def is_streaming(rows: Sequence[TrialRow]) -> bool:
    """Whether the study's trials measured a streaming model (they carry a metric the
    streaming load kind adds)."""
    return any(m in r.metrics for r in rows for m in Streaming.metrics)


def sweep_curves(client: MlflowClient, rows: Sequence[TrialRow],
                 metrics: Sequence[str] = (TTFT, ITL)) -> Curves:
    """Each complete trial's sweep of ``metrics`` from its MLflow run."""
    out: Curves = {}
    for row in rows:
        if not row.complete or row.run_id is None or row.duplicate_of is not None:
            continue
        label = f"trial {row.number}" + (" (default)" if row.baseline else "")
        curves = {}
        for metric in metrics:
            history = client.get_metric_history(row.run_id, SWEEP_PREFIX + metric)
            points = sorted({int(m.step): float(m.value) for m in history}.items())
            if points:
                curves[metric] = points
        if curves:
            out[label] = curves
    return out


def _limit(constraints: Mapping[str, object], metric: str) -> float | None:
    bound = constraints.get(metric)
    value = (bound.get("max") if isinstance(bound, Mapping)
             else getattr(bound, "max", None)) if bound is not None else None
    return None if value is None else float(value)


def streaming(curves: Curves, constraints: Mapping[str, object],
              out: Path) -> dict[str, Path]:
    """``streaming.png`` and ``streaming.html`` (empty when there are no curves)."""
    if not curves:
        return {}
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    out.mkdir(parents=True, exist_ok=True)
    fig = Figure(figsize=(10, 4))
    axes = fig.subplots(1, 2)
    pf: Any = make_subplots(rows=1, cols=2, subplot_titles=[t for _, t in PANELS])
    for col, (ax, (metric, title)) in enumerate(zip(axes, PANELS, strict=True), start=1):
        for label, by_metric in curves.items():
            points = by_metric.get(metric, [])
            if not points:
                continue
            xs, ys = [p[0] for p in points], [p[1] for p in points]
            ax.plot(xs, ys, marker="o", label=label,
                    linewidth=2.5 if "default" in label else 1.2)
            pf.add_trace(go.Scatter(x=xs, y=ys, mode="lines+markers", name=label,
                                    legendgroup=label, showlegend=col == 1), row=1, col=col)
        limit = _limit(constraints, metric)
        if limit is not None:
            ax.axhline(limit, color="red", linestyle="--", label=f"limit {limit:g} ms")
            pf.add_hline(y=limit, line_dash="dash", line_color="red", row=1, col=col)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrency (streams)")
        ax.set_ylabel(title)
        ax.set_title(title)
    axes[0].legend(loc="best", fontsize="x-small")
    fig.suptitle("Streaming: first token and inter-token latency against load")
    FigureCanvasAgg(fig)
    png = out / "streaming.png"
    fig.savefig(png, dpi=110, bbox_inches="tight")
    pf.update_xaxes(type="log", title_text="concurrency (streams)")
    html = out / "streaming.html"
    pf.write_html(str(html), include_plotlyjs="cdn", full_html=True)
    return {"streaming.png": png, "streaming.html": html}
