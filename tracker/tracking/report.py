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
from dataclasses import dataclass
from pathlib import Path

from tracker.metrics import fmt, unit
from tracker.tracking.entry_names import EntryNames

# ---- trials.csv ----------------------------------------------------------------------------
from tracker.trial_record import TrialRow

# ---- trials.csv ----------------------------------------------------------------------------

def _entry_columns(rows: Sequence[TrialRow], entries: EntryNames | None) -> list[str]:
    """Each entry model's figures, entry by entry (those some trial has), then every other
    metric in name order."""
    present = {k for r in rows for k in r.metrics}
    first = [name for names in (entries or {}).values() for name in names.values()
             if name in present]
    return list(dict.fromkeys(first)) + sorted(present - set(first))


def trials_csv(rows: Sequence[TrialRow], objectives: Mapping[str, str],
               entries: EntryNames | None = None) -> str:
    """One line per trial: number, state, feasibility, params, objective values, metrics;
    the metrics begin with each entry model's throughput, p99 and load level
    (:func:`tracker.tracking.entry_names.entry_names`), so several entry models get a column
    each."""
    param_keys = sorted({k for r in rows for k in r.params})
    metric_keys = _entry_columns(rows, entries)
    head = ["trial", "state", "feasible", "baseline", "duplicate_of",
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


def _figure(metric: str, value: float) -> str:
    """A headline figure: with its unit, or named when it has none (``weighted_gain +0.200``)."""
    return fmt(metric, value) if unit(metric) else f"{metric} {value:+.3f}"


def _each_entry(best: TrialRow, base: TrialRow | None, entries: EntryNames) -> str:
    """Each entry model's throughput and load level at the best trial, beside the default's:
    ``; pipe 52.1 infer/s at concurrency 2 (the default: 40.0 infer/s)``."""
    parts = []
    for entry, names in entries.items():
        thr = names["perf_throughput"]
        if thr not in best.metrics:
            continue
        text = f"{entry} {fmt('perf_throughput', best.metrics[thr])}"
        level = next((f" at {figure.replace('_', ' ')} {best.metrics[names[figure]]:g}"
                      for figure in ("concurrency", "request_rate")
                      if names[figure] in best.metrics), "")
        if base is not None and base is not best and thr in base.metrics:
            level += f" (the default: {fmt('perf_throughput', base.metrics[thr])})"
        parts.append(text + level)
    return "".join(f"; {p}" for p in parts)


def entry_figures(row: TrialRow, rows: Sequence[TrialRow], entries: EntryNames) -> str:
    """`` At trial-7: pipe 52.1 infer/s at concurrency 2 (the default: 40.0 infer/s); other
    ...``: each entry model's figures at ``row`` beside the default's ("" when ``row``
    logged none), for a sentence that names another trial than the search's best."""
    base = next((r for r in rows if r.baseline and r.complete), None)
    tail = _each_entry(row, base, entries)
    return f" At {row.name}: {tail[2:]}." if tail else ""


def summary(rows: Sequence[TrialRow], objectives: Mapping[str, str],
            entries: EntryNames | None = None) -> str:
    """"In N measurements across M configurations, trial-7 gives X infer/s, Y% better than
    the default configuration (Z infer/s)" (and what is known when that cannot be said),
    then, with ``entries``, each entry model's throughput and level at that trial."""
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
    base = next((r for r in rows if r.baseline and r.complete), None)
    text = f"{head}, {best.name} gives {_figure(metric, value)}"
    if base is None:
        text += " (the default configuration was not measured)"
    elif base is best:
        text += ": the default configuration is the best one found"
    else:
        base_value = (base.values or [0.0])[0]
        pct = improvement_pct(value, base_value, direction)
        how = "" if pct is None else (f", {pct:.0f}% better than" if pct >= 0
                                      else f", {-pct:.0f}% worse than")
        text += (f"{how or ', compared with'} the default configuration "
                 f"({_figure(metric, base_value)}")
        text += ")" if base.feasible else ", which does not meet the constraints)"
    if len(objectives) > 1:
        front = pareto_rows(rows, objectives)
        text += (f"; {len(front)} configuration{'s' if len(front) != 1 else ''} form the Pareto "
                 f"front of {' and '.join(objectives)}")
    return text + _each_entry(best, base, entries or {}) + _deployment(best) + "."


def _deployment(best: TrialRow) -> str:
    """A capacity study's replicas and cost at the best trial's capacity ("" without)."""
    parts = []
    if "replicas" in best.metrics:
        parts.append(f"{best.metrics['replicas']:.0f} replicas for the target traffic")
    if "cost_per_million" in best.metrics:
        parts.append(f"{best.metrics['cost_per_million']:,.4g} per million inferences")
    return f"; {' and '.join(parts)}" if parts else ""


# ---- the report files ----------------------------------------------------------------------

@dataclass(frozen=True)
class ReportText:
    """The report's words: its ``title``; ``text``, the study's sentence (default: the
    search's, :func:`summary`; after a confirmation the confirmed one, so the report says what
    the note and the tags say); ``caption``, a short line for the plots' titles (the confirmed
    verdict)."""

    title: str = "Study"
    text: str | None = None
    caption: str | None = None


def write_report(rows: Sequence[TrialRow], objectives: Mapping[str, str],
                 constraints: Mapping[str, object], out_dir: Path, *,
                 entries: EntryNames, words: ReportText = ReportText(),
                 curves: Mapping[str, Mapping[str, list[tuple[int, float]]]] | None = None,
                 extra: tuple[Mapping[str, Path], str] | None = None,
                 ) -> dict[str, Path]:
    """trials.csv, plots/*.png|html and report.html under ``out_dir``; returns
    ``{artifact path: file}`` for :func:`tracker.tracking.runs.log_files`. ``entries``
    (:func:`tracker.tracking.entry_names.entry_names`) names each entry model's figures: trials.csv,
    the report's table and the trade-off plot show each entry's. ``curves`` (a
    streaming model's per-trial sweeps, stream_plots.sweep_curves) add the TTFT/ITL plot;
    ``words``: its title, sentence and caption; ``extra``
    (files already written, an HTML section: a pipeline's steps_plot.write) go into the
    artifacts and the report too."""
    from tracker.tracking import stream_plots

    out_dir.mkdir(parents=True, exist_ok=True)
    files: dict[str, Path] = {}
    csv_path = out_dir / "trials.csv"
    csv_path.write_text(trials_csv(rows, objectives, entries))
    files["trials.csv"] = csv_path
    figures = _plots(rows, objectives, constraints, out_dir / "plots", entries, words.caption)
    if curves:
        figures.update(stream_plots.streaming({k: dict(v) for k, v in curves.items()},
                                              constraints, out_dir / "plots"))
    for name, path in figures.items():
        files[f"plots/{name}"] = path
    more, section = extra or ({}, "")
    files.update(more)
    text = words.text or summary(rows, objectives, entries)
    report = out_dir / "report.html"
    report.write_text(_html(words.title, text, rows, objectives, entries,
                            [p for n, p in sorted(files.items()) if n.endswith(".png")],
                            section))
    files["report.html"] = report
    return files


def origin_section(tracking_uri: str, experiment_id: str, run_id: str, note: str) -> str:
    """The report's section naming the earlier study a warm start started from (the parent
    run's ``tracker.warm_start_from``), linked to its run in the MLflow UI."""
    from tracker.redact import redact_url
    from tracker.tracking.view import UI_ADDRESS

    web = tracking_uri.startswith(("http://", "https://"))
    base = redact_url(tracking_uri).rstrip("/") if web else UI_ADDRESS
    href = f"{base}/#/experiments/{experiment_id}/runs/{run_id}"
    return (f"<h2>Started from an earlier study</h2><p>{html.escape(note)}. "
            f"<a href=\"{html.escape(href)}\">The earlier study's run {html.escape(run_id)}"
            "</a>; every figure in this report was measured by this study.</p>")


def _plots(rows: Sequence[TrialRow], objectives: Mapping[str, str],
           constraints: Mapping[str, object], out: Path, entries: EntryNames,
           caption: str | None) -> dict[str, Path]:
    """Every plot that the data allows (none before the first complete trial); ``caption``
    (the confirmed verdict) goes under the titles of the history and trade-off plots."""
    from tracker.tracking import plots, tradeoff_plot

    out.mkdir(parents=True, exist_ok=True)
    if not plots.complete_rows(rows):
        return {}
    return {**plots.history(rows, objectives, out, caption),
            **tradeoff_plot.tradeoff(rows, objectives, constraints, out, entries, caption),
            **plots.parallel(rows, objectives, out)}


def shown(cell: str) -> str:
    """A CSV cell as a person reads it: a float rounded like :func:`fmt` (``20.28``, ``306.2``,
    ``0.123``), anything else as it is."""
    try:
        value = float(cell)
    except ValueError:
        return cell
    if math.isinf(value):
        return "unbounded" if value > 0 else "-unbounded"
    if math.isnan(value) or ("." not in cell and "e" not in cell.lower()):
        return cell  # an integer (a trial number, a count) as it is
    digits = 1 if abs(value) >= 100 else (2 if abs(value) >= 1 else 3)
    return f"{value:.{digits}f}"


def _html(title: str, text: str, rows: Sequence[TrialRow], objectives: Mapping[str, str],
          entries: EntryNames, pngs: Sequence[Path], section: str = "") -> str:
    images = "".join(
        f'<figure><img alt="{html.escape(p.stem)}" style="max-width:100%" '
        f'src="data:image/png;base64,{base64.b64encode(p.read_bytes()).decode()}"></figure>'
        for p in pngs)
    table_rows = [[shown(c) for c in row]
                  for row in csv.reader(io.StringIO(trials_csv(rows, objectives, entries)))]
    by_number = {r.number: r for r in rows}
    if any(r.confirmed is not None for r in rows):  # the confirmation's figures beside them
        metric = next(iter(objectives))
        table_rows[0].append(f"confirmed {metric} (95% CI)")
        for row in table_rows[1:]:
            got = by_number[int(row[0])].confirmed
            row.append("" if got is None else
                       f"{shown(str(got[0]))} ({shown(str(got[1]))} to {shown(str(got[2]))})")
    cells = []
    for i, row in enumerate(table_rows):
        tag = "th" if i == 0 else "td"
        cells.append("<tr>" + "".join(f"<{tag}>{html.escape(c)}</{tag}>" for c in row) + "</tr>")
    table = "<table border=1 cellspacing=0 cellpadding=3>" + "".join(cells) + "</table>"
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}"
            f"</title></head><body style='font-family:sans-serif'><h1>{html.escape(title)}</h1>"
            f"<p>{html.escape(text)}</p>{images}{section}<h2>Trials</h2>{table}"
            "</body></html>")
