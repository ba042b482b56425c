"""The study report on the parent run: trials.csv, the summary sentence, the plots.

Input is plain data (:class:`TrialRow`, one per trial, made by the runner from the Optuna
study), so the report can be rebuilt from the study alone. Plots: PNG with matplotlib's Agg
backend (no display, no network, no kaleido) and interactive HTML with plotly (plotly.js from
its CDN, so each file stays small); ``report.html`` puts the summary, the PNGs (inline) and
the trial table in one file that opens offline.
"""

from __future__ import annotations

import base64
import csv
import html
import io
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from tracker import metrics as metrics_catalog
from tracker.trial_attrs import TrialRecord, shown_params

if TYPE_CHECKING:
    import optuna

UNITS = metrics_catalog.UNITS


@dataclass
class TrialRow:
    """One trial as the report sees it."""

    number: int
    state: str                                  # COMPLETE, FAIL, RUNNING, ...
    params: dict[str, object]
    values: list[float] | None = None           # objective values, spec order
    metrics: dict[str, float] = field(default_factory=dict)  # headline, chosen level
    feasible: bool | None = None
    baseline: bool = False
    duplicate_of: int | None = None
    concurrency: int | None = None
    measurements: int = 0                       # levels measured (0: duplicate/failed early)
    run_id: str | None = None
    fail_reason: str | None = None
    confirmed: tuple[float, float, float] | None = None  # median, 95% CI over confirmation
    confirmed_p99: float | None = None          # the confirmation's median p99 (ms)

    @property
    def name(self) -> str:
        return f"trial-{self.number}"

    @property
    def complete(self) -> bool:
        return self.state == "COMPLETE" and self.values is not None


def trial_rows(study: optuna.Study) -> list[TrialRow]:
    """Every trial that ran (not the queued ones) as report rows, from the trial attributes
    the tuning loop writes, read through :class:`tracker.trial_attrs.TrialRecord`. A baseline
    knob the default config leaves out shows as ``unset`` (``shown_params``)."""
    from optuna.trial import TrialState

    rows = []
    for t in study.get_trials(deepcopy=False):
        if t.state == TrialState.WAITING:
            continue
        record = TrialRecord.of(t)
        rows.append(TrialRow(
            number=t.number, state=t.state.name,
            params=shown_params(dict(t.params), record.exact_params),
            values=list(t.values) if t.values is not None else None,
            metrics=record.metrics, feasible=record.feasible, baseline=record.baseline,
            duplicate_of=record.duplicate_of, concurrency=record.concurrency,
            measurements=record.measurements, run_id=record.run_id,
            fail_reason="interrupted" if record.interrupted else record.fail_reason))
    return rows


def unit(metric: str) -> str:
    return metrics_catalog.unit(metric)


def fmt(metric: str, value: float) -> str:
    digits = 1 if abs(value) >= 100 else (2 if abs(value) >= 1 else 3)
    u = unit(metric)
    return f"{value:,.{digits}f}" + (f" {u}" if u else "")


# ---- trials.csv ----------------------------------------------------------------------------

def trials_csv(rows: Sequence[TrialRow], objectives: Mapping[str, str]) -> str:
    """One line per trial: number, state, feasibility, params, objective values, metrics."""
    param_keys = sorted({k for r in rows for k in r.params})
    metric_keys = sorted({k for r in rows for k in r.metrics})
    head = ["trial", "state", "feasible", "baseline", "duplicate_of", "concurrency",
            *param_keys, *(f"value_{k}" for k in objectives), *metric_keys,
            "measurements", "run_id", "fail_reason"]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(head)
    for r in sorted(rows, key=lambda r: r.number):
        values = list(r.values or [])
        writer.writerow([
            r.number, r.state, "" if r.feasible is None else str(r.feasible).lower(),
            str(r.baseline).lower(), "" if r.duplicate_of is None else r.duplicate_of,
            "" if r.concurrency is None else r.concurrency,
            *(r.params.get(k, "") for k in param_keys),
            *(values[i] if i < len(values) else "" for i in range(len(objectives))),
            *(r.metrics.get(k, "") for k in metric_keys),
            r.measurements, r.run_id or "", (r.fail_reason or "").replace("\n", " ")[:500],
        ])
    return out.getvalue()


# ---- the best trial and the summary --------------------------------------------------------

def _key(objectives: Mapping[str, str]) -> tuple[str, float]:
    metric, direction = next(iter(objectives.items()))
    return metric, (-1.0 if direction == "maximize" else 1.0)


def best_row(rows: Sequence[TrialRow], objectives: Mapping[str, str]) -> TrialRow | None:
    """The feasible complete trial best on the first objective (measured, not a duplicate)."""
    _, sign = _key(objectives)
    done = [r for r in rows if r.complete and r.feasible and r.duplicate_of is None]
    if not done:
        return None
    return min(done, key=lambda r: (sign * (r.values or [math.inf])[0], r.number))


def pareto_rows(rows: Sequence[TrialRow], objectives: Mapping[str, str]) -> list[TrialRow]:
    """Feasible complete trials no other feasible trial beats on every objective."""
    signs = [(-1.0 if d == "maximize" else 1.0) for d in objectives.values()]
    done = [r for r in rows if r.complete and r.feasible and r.duplicate_of is None]

    def dominated(a: TrialRow) -> bool:
        av = [s * v for s, v in zip(signs, a.values or [], strict=True)]
        for b in done:
            bv = [s * v for s, v in zip(signs, b.values or [], strict=True)]
            if b is not a and all(y <= x for x, y in zip(av, bv, strict=True)) and bv != av:
                return True
        return False

    return sorted((r for r in done if not dominated(r)), key=lambda r: r.number)


def improvement_pct(best: float, base: float, direction: str) -> float | None:
    """How much better ``best`` is than ``base`` in percent (positive = better)."""
    if base == 0:
        return None
    gain = (best - base) if direction == "maximize" else (base - best)
    return 100.0 * gain / abs(base)


def summary(rows: Sequence[TrialRow], objectives: Mapping[str, str]) -> str:
    """"In N measurements across M configurations, trial-7 gives X infer/s, Y% better than
    the default configuration (Z infer/s)" (and what is known when that cannot be said)."""
    n = sum(r.measurements for r in rows)
    m = sum(1 for r in rows if r.measurements > 0)
    head = (f"In {n} measurement{'s' if n != 1 else ''} across {m} "
            f"configuration{'s' if m != 1 else ''}")
    metric, _ = _key(objectives)
    direction = next(iter(objectives.values()))
    best = best_row(rows, objectives)
    if best is None:
        return f"{head}, no configuration met the constraints."
    value = (best.values or [0.0])[0]
    text = f"{head}, {best.name} gives {fmt(metric, value)}"
    base = next((r for r in rows if r.baseline and r.complete), None)
    if base is None:
        text += " (the default configuration was not measured)"
    elif base is best:
        text += ": the default configuration is the best one found"
    else:
        base_value = (base.values or [0.0])[0]
        pct = improvement_pct(value, base_value, direction)
        how = "" if pct is None else (f", {pct:.0f}% better than" if pct >= 0
                                      else f", {-pct:.0f}% worse than")
        text += f"{how or ', compared with'} the default configuration ({fmt(metric, base_value)}"
        text += ")" if base.feasible else ", which does not meet the constraints)"
    if len(objectives) > 1:
        front = pareto_rows(rows, objectives)
        text += (f"; {len(front)} configuration{'s' if len(front) != 1 else ''} form the Pareto "
                 f"front of {' and '.join(objectives)}")
    return text + "."


# ---- the report files ----------------------------------------------------------------------

def write_report(rows: Sequence[TrialRow], objectives: Mapping[str, str],
                 constraints: Mapping[str, object], out_dir: Path, *,
                 title: str = "Study",
                 curves: Mapping[str, Mapping[str, list[tuple[int, float]]]] | None = None,
                 extra: tuple[Mapping[str, Path], str] | None = None,
                 ) -> dict[str, Path]:
    """trials.csv, plots/*.png|html and report.html under ``out_dir``; returns
    ``{artifact path: file}`` for :func:`tracker.tracking.runs.log_files`. ``curves`` (a
    streaming model's per-trial sweeps, stream_plots.sweep_curves) add the TTFT/ITL plot;
    ``extra`` (files already written, an HTML section: a pipeline's steps_plot.write) go into
    the artifacts and the report too."""
    from tracker.tracking import plots, stream_plots

    out_dir.mkdir(parents=True, exist_ok=True)
    files: dict[str, Path] = {}
    csv_path = out_dir / "trials.csv"
    csv_path.write_text(trials_csv(rows, objectives))
    files["trials.csv"] = csv_path
    figures = plots.make_all(rows, objectives, constraints, out_dir / "plots")
    if curves:
        figures.update(stream_plots.streaming({k: dict(v) for k, v in curves.items()},
                                              constraints, out_dir / "plots"))
    for name, path in figures.items():
        files[f"plots/{name}"] = path
    more, section = extra or ({}, "")
    files.update(more)
    text = summary(rows, objectives)
    report = out_dir / "report.html"
    report.write_text(_html(title, text, rows, objectives,
                            [p for n, p in sorted(files.items()) if n.endswith(".png")],
                            section))
    files["report.html"] = report
    return files


def _html(title: str, text: str, rows: Sequence[TrialRow], objectives: Mapping[str, str],
          pngs: Sequence[Path], section: str = "") -> str:
    images = "".join(
        f'<figure><img alt="{html.escape(p.stem)}" style="max-width:100%" '
        f'src="data:image/png;base64,{base64.b64encode(p.read_bytes()).decode()}"></figure>'
        for p in pngs)
    reader = csv.reader(io.StringIO(trials_csv(rows, objectives)))
    table_rows = list(reader)
    cells = []
    for i, row in enumerate(table_rows):
        tag = "th" if i == 0 else "td"
        cells.append("<tr>" + "".join(f"<{tag}>{html.escape(c)}</{tag}>" for c in row) + "</tr>")
    table = "<table border=1 cellspacing=0 cellpadding=3>" + "".join(cells) + "</table>"
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}"
            f"</title></head><body style='font-family:sans-serif'><h1>{html.escape(title)}</h1>"
            f"<p>{html.escape(text)}</p>{images}{section}<h2>Trials</h2>{table}"
            "</body></html>")
