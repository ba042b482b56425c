"""A capacity study's pictures (``objectives: {perf_capacity: maximize}``): the SLA's latency
against the offered open-loop rate, one line per trial (the "hockey stick"), the SLA drawn and
each trial's capacity marked; and, when the spec's ``capacity`` section sets a price, the cost
per million inferences against the capacity, a point per trial. PNG (matplotlib's Agg canvas)
and HTML (plotly), beside the study's other plots.

The points are each trial run's open-loop levels, read back from MLflow: ``sweep/<latency>``
at the steps (offered rates) that carry ``sweep/perf_goodput_pct`` (only open-loop levels do:
the closed-loop probe is left out).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from tracker.metrics import CAPACITY
from tracker.tracking.runs import SWEEP_PREFIX

if TYPE_CHECKING:
    from mlflow import MlflowClient

    from tracker.trial_record import TrialRow

GOODPUT = "perf_goodput_pct"
#: trial label -> [(offered rate, latency)], and the trial's capacity
Curve = tuple[list[tuple[int, float]], float]


def sla_metric(constraints: Mapping[str, object]) -> tuple[str, float | None]:
    """The latency the SLA bounds (the first ``perf_latency_*`` maximum; p99 when none)
    and its bound."""
    for metric, bound in constraints.items():
        hi = bound.get("max") if isinstance(bound, Mapping) else getattr(bound, "max", None)
        if metric.startswith("perf_latency_") and hi is not None:
            return metric, float(hi)
    return "perf_latency_p99", None


def curves(client: MlflowClient, rows: Sequence[TrialRow], metric: str) -> dict[str, Curve]:
    """Each complete trial's open-loop levels of ``metric``, with its capacity."""
    out: dict[str, Curve] = {}
    for row in rows:
        if not row.complete or row.run_id is None or row.duplicate_of is not None:
            continue
        rated = {int(m.step) for m in client.get_metric_history(row.run_id,
                                                                 SWEEP_PREFIX + GOODPUT)}
        history = client.get_metric_history(row.run_id, SWEEP_PREFIX + metric)
        points = sorted({int(m.step): float(m.value) for m in history
                         if int(m.step) in rated}.items())
        if points:
            label = f"trial {row.number}" + (" (default)" if row.baseline else "")
            out[label] = (points, float(row.metrics.get(CAPACITY, 0.0)))
    return out


def _hockey(found: Mapping[str, Curve], metric: str, bound: float | None,
            out: Path) -> dict[str, Path]:
    import plotly.graph_objects as go

    fig = Figure(figsize=(8, 4.5))
    ax = fig.subplots()
    pf: Any = go.Figure()
    for label, (points, capacity) in found.items():
        xs, ys = [p[0] for p in points], [p[1] for p in points]
        line = ax.plot(xs, ys, marker="o", label=label,
                       linewidth=2.5 if "default" in label else 1.2)[0]
        pf.add_trace(go.Scatter(x=xs, y=ys, mode="lines+markers", name=label))
        at = [y for x, y in points if x == round(capacity)]
        if capacity > 0 and at:
            ax.plot([capacity], at[:1], marker="*", markersize=14, color=line.get_color())
            pf.add_trace(go.Scatter(x=[capacity], y=at[:1], mode="markers", showlegend=False,
                                    marker={"symbol": "star", "size": 14},
                                    name=f"{label} capacity"))
    if bound is not None:
        ax.axhline(bound, color="red", linestyle="--", label=f"SLA {bound:g} ms")
        pf.add_hline(y=bound, line_dash="dash", line_color="red")
    ax.set_yscale("log")
    ax.set_xlabel("offered load (requests/s, open loop)")
    ax.set_ylabel(f"{metric} (ms)")
    ax.set_title("Latency against offered load; a star marks each trial's capacity")
    ax.legend(loc="best", fontsize="x-small")
    FigureCanvasAgg(fig)
    png = out / "capacity.png"
    fig.savefig(png, dpi=110, bbox_inches="tight")
    pf.update_yaxes(type="log", title_text=f"{metric} (ms)")
    pf.update_xaxes(title_text="offered load (requests/s, open loop)")
    html = out / "capacity.html"
    pf.write_html(str(html), include_plotlyjs="cdn", full_html=True)
    return {"capacity.png": png, "capacity.html": html}


def _cost(rows: Sequence[TrialRow], out: Path) -> dict[str, Path]:
    priced = [r for r in rows if r.complete and "cost_per_million" in r.metrics]
    if not priced:
        return {}
    fig = Figure(figsize=(6, 4))
    ax = fig.subplots()
    for r in priced:
        ax.scatter([r.metrics[CAPACITY]], [r.metrics["cost_per_million"]],
                   marker="s" if r.baseline else "o")
        ax.annotate(f"trial {r.number}", (r.metrics[CAPACITY], r.metrics["cost_per_million"]),
                    fontsize="x-small")
    ax.set_xlabel("capacity at the SLA (requests/s)")
    ax.set_ylabel("cost per million inferences")
    ax.set_title("Cost per million against capacity (square: the default)")
    FigureCanvasAgg(fig)
    png = out / "cost.png"
    fig.savefig(png, dpi=110, bbox_inches="tight")
    return {"cost.png": png}


def capacity(client: MlflowClient, rows: Sequence[TrialRow],
             constraints: Mapping[str, object], out: Path) -> dict[str, Path]:
    """``capacity.png``/``.html`` and (with a price) ``cost.png`` under ``out``; empty
    without any open-loop level logged."""
    metric, bound = sla_metric(constraints)
    found = curves(client, rows, metric)
    if not found:
        return {}
    out.mkdir(parents=True, exist_ok=True)
    return {**_hockey(found, metric, bound, out), **_cost(rows, out)}
