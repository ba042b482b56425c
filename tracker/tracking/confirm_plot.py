"""The confirmation's plot: each pair's (or round's) ratio to the default, and the interval.

One point per pair (the paired design) or round, in the order measured: how many times better
than the default each confirmed configuration was in it (above 1: better; to minimize a
latency, ``default / x``). A line at 1 (the default) and one at ``1 + tie margin``; for the
winner, the anytime-valid 95% interval of its mean log-ratio after each pair, as a band that
narrows as the pairs come in: the verdict is ``better`` once the band clears 1. PNG
(matplotlib) and HTML (plotly), like the study's other plots (tracking/plots.py).
"""

from __future__ import annotations

import math
from pathlib import Path

from matplotlib.figure import Figure

from tracker.tracking.plots import save_html, save_png, titled
from tracker.verdict import anytime as sequence
from tracker.verdict.stats import Verdict

NAME = "confirm_ratios"


def running_band(ratios: tuple[float, ...]) -> tuple[list[int], list[float], list[float]]:
    """(pair numbers, low, high): the interval of the ratio after each pair, from the first
    pair that bounds it (the anytime-valid interval of the mean log-ratio, as a ratio)."""
    xs: list[int] = []
    lows: list[float] = []
    highs: list[float] = []
    logs = [math.log(r) for r in ratios]
    for n in range(2, len(logs) + 1):
        _mean, low, high = sequence.interval(logs[:n])
        if math.isfinite(low) and math.isfinite(high):
            xs.append(n)
            lows.append(math.exp(low))
            highs.append(math.exp(high))
    return xs, lows, highs


def ratios(verdict: Verdict, out: Path, caption: str | None = None) -> dict[str, Path]:
    """``confirm_ratios.png`` and ``.html`` under ``out`` (nothing without a paired ratio)."""
    import plotly.graph_objects as go

    shown = {k: s.ratios for k, s in verdict.scored.items() if not s.baseline and s.ratios}
    if not shown:
        return {}
    out.mkdir(parents=True, exist_ok=True)
    unit = "pair" if verdict.design == "paired" else "round"
    title = titled(f"Each {unit}: how many times the default's figure", caption)
    margin = 1.0 + verdict.margin_pct / 100.0
    band = running_band(shown[verdict.winner]) if verdict.winner in shown else ([], [], [])

    fig = Figure(figsize=(7, 4))
    ax = fig.add_subplot()
    if band[0]:
        ax.fill_between(band[0], band[1], band[2], color="tab:red", alpha=0.15,
                        label=f"{verdict.winner}: 95% interval after each {unit}")
    for key, values in shown.items():
        ax.plot(range(1, len(values) + 1), values, marker="o", label=key)
    ax.axhline(1.0, color="grey", linestyle="--", label="the default (1)")
    ax.axhline(margin, color="grey", linestyle=":", label=f"tie margin ({margin:g})")
    ax.set_yscale("log")
    ax.set_xlabel(f"{unit}, in the order measured")
    ax.set_ylabel("ratio to the default")
    ax.set_title(title, fontsize="medium")
    ax.legend(loc="best", fontsize="small")

    pf = go.Figure()
    if band[0]:
        pf.add_trace(go.Scatter(x=band[0] + band[0][::-1], y=band[2] + band[1][::-1],
                                fill="toself", line={"width": 0}, opacity=0.2,
                                name=f"{verdict.winner}: 95% interval after each {unit}"))
    for key, values in shown.items():
        pf.add_trace(go.Scatter(x=list(range(1, len(values) + 1)), y=list(values),
                                mode="lines+markers", name=key))
    pf.add_hline(y=1.0, line_dash="dash", annotation_text="the default")
    pf.add_hline(y=margin, line_dash="dot", annotation_text="tie margin")
    pf.update_layout(title=title.replace("\n", "<br>"), yaxis_type="log",
                     xaxis_title=f"{unit}, in the order measured",
                     yaxis_title="ratio to the default")
    return {f"{NAME}.png": save_png(fig, out / f"{NAME}.png"),
            f"{NAME}.html": save_html(pf, out / f"{NAME}.html")}
