"""Model Analyzer's outputs, written from a finished study where its users look for them.

- ``<output_model_repository_path>/<model>_config_default`` and ``<model>_config_<n>``: each
  configuration's ``config.pbtxt`` (the model's own backend) beside the model's files, numbered
  per model as Model Analyzer numbers them (the default first, a configuration already written
  keeps its name);
- ``<export_path>/results/``: the inference CSV (one row per configuration and load level),
  the server-only CSV, and the GPU CSV where GPU figures were measured, with Model Analyzer's
  column headers;
- ``<export_path>/reports/summaries/<model>/result_summary.html`` (and ``.pdf`` where
  ``wkhtmltopdf`` is installed), opening with Model Analyzer's summary sentence and the
  tracker's confirmed verdict next to it; ``reports/detailed/<variant>/detailed_report.html``
  for the best configurations.

Every figure is read back from the study's storage and its MLflow runs, so ``tracker
model-analyzer report`` writes the same files from a study that ran before.
"""

from __future__ import annotations

import csv
import html
import io
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import optuna
from mlflow import MlflowClient
from tritonclient.grpc import model_config_pb2

from tracker.errors import TrackerError
from tracker.feasibility import broken
from tracker.measure import csvio
from tracker.measure.types import Measurement
from tracker.peers.ma_options import FIELD_HEADERS, GPU_FIELDS, INFERENCE_FIELDS, SERVER_FIELDS
from tracker.peers.ma_translate import Layout
from tracker.search.optuna_study import best_trials
from tracker.spec import StudySpec
from tracker.tags import NOTE, VERDICT
from tracker.tracking import runs
from tracker.trial_record import TrialRecord
from tracker.triton import model_config
from tracker.triton.configuration import Configuration


@dataclass
class Row:
    """One measurement: a configuration of one model at one load level."""

    model: str
    variant: str
    trial: int
    measurement: Measurement
    satisfies: bool
    instance_group: str
    max_batch_size: int
    batch: int


@dataclass
class StudyOutputs:
    """What was written for one study's models."""

    variants: dict[str, list[str]] = field(default_factory=dict)  # model -> names, in order
    rows: list[Row] = field(default_factory=list)
    trial_variant: dict[int, str] = field(default_factory=dict)   # trial -> entry's variant


def _group(cfg: model_config.ModelConfig) -> str:
    kinds = model_config_pb2.ModelInstanceGroup.Kind
    groups = [f"{g.count or 1}:{kinds.Name(g.kind).removeprefix('KIND_')}"
              for g in cfg.instance_group]
    return " + ".join(groups) or "1:AUTO"


def _configs(conf: Configuration, trial: optuna.trial.FrozenTrial) -> dict[str, str]:
    """Each model's production config.pbtxt for one trial (the default's for the baseline)."""
    record = TrialRecord.of(trial)
    configs = conf.defaults() if record.baseline else conf.apply(dict(trial.params))
    return {name: model_config.dumps(cfg) for name, cfg in configs.items()}


def _name_variants(conf: Configuration, trials: Sequence[optuna.trial.FrozenTrial],
                   out: StudyOutputs) -> dict[int, dict[str, tuple[str, str]]]:
    """trial -> model -> (variant name, config text), Model Analyzer's numbering."""
    seen: dict[str, dict[str, str]] = {}        # model -> text -> name
    defaults = {name: model_config.dumps(cfg) for name, cfg in conf.defaults().items()}
    for name, text in defaults.items():
        seen[name] = {text: f"{name}_config_default"}
        out.variants[name] = [f"{name}_config_default"]
    named: dict[int, dict[str, tuple[str, str]]] = {}
    for trial in trials:
        texts = _configs(conf, trial)
        mine: dict[str, tuple[str, str]] = {}
        for model, text in texts.items():
            if text not in seen[model]:
                seen[model][text] = f"{model}_config_{len(seen[model]) - 1}"
                out.variants[model].append(seen[model][text])
            mine[model] = (seen[model][text], text)
        named[trial.number] = mine
    return named


def _write_variant(source: Path, target: Path, text: str, first: Path | None) -> None:
    """A variant's folder: the model's files (copied the first time, linked after) and its
    config.pbtxt."""
    target.mkdir(parents=True, exist_ok=True)
    for item in source.iterdir():
        if item.name == "config.pbtxt" or (target / item.name).exists():
            continue
        if first is None:
            copy = shutil.copytree if item.is_dir() else shutil.copy2
            copy(item, target / item.name)
        else:
            (target / item.name).symlink_to((first / item.name).resolve())
    (target / "config.pbtxt").write_text(text)


def _levels(client: MlflowClient, run_id: str, name: str) -> list[Measurement]:
    try:
        return csvio.loads(runs.read_file(client, run_id, name).decode(), source="builtin",
                           where=f"{name} of run {run_id}")
    except TrackerError:
        return []


def collect(spec: StudySpec, conf: Configuration, study: optuna.Study,
            sources: Mapping[str, Path], layout: Layout,
            client: MlflowClient, *, write: bool = True) -> StudyOutputs:
    """Gather the study's rows, and write its variants into the output repository
    (``write``)."""
    out = StudyOutputs()
    trials = [t for t in study.get_trials(deepcopy=False)
              if t.state == optuna.trial.TrialState.COMPLETE
              and TrialRecord.of(t).duplicate_of is None]
    named = _name_variants(conf, trials, out)
    firsts: dict[str, Path] = {}
    root = layout.output_repository
    for number in sorted(named):
        for model, (variant, text) in named[number].items():
            folder = sources[model]
            target = root / variant
            if write and not (target / "config.pbtxt").exists():
                _write_variant(folder, target, text, firsts.get(model))
                firsts.setdefault(model, target)
    batch = spec.load.batch_size
    for trial in trials:
        record = TrialRecord.of(trial)
        if record.run_id is None:
            continue
        configs = {model: model_config.parse(text)
                   for model, (_variant, text) in named[trial.number].items()}
        for entry in conf.entries:
            variant = named[trial.number][entry][0]
            out.trial_variant.setdefault(trial.number, variant)
            cfg = configs[entry]
            group = _group(cfg) if cfg.instance_group else " + ".join(
                _group(configs[m]) for m in (conf.composing(entry) or (entry,))
                if configs[m].platform != "ensemble")
            for m in _levels(client, record.run_id, conf.metric_name(entry, "perf.csv")):
                out.rows.append(Row(entry, variant, trial.number, m,
                                    not broken(m.metrics(), spec.constraints), group,
                                    cfg.max_batch_size, batch))
    return out


# ---- the CSVs -------------------------------------------------------------------------------

def _cell(row: Row, key: str) -> object:
    m = row.measurement
    values: dict[str, object] = {
        "model_name": row.model, "batch_size": row.batch, "concurrency": m.concurrency,
        "request_rate": m.request_rate, "model_config_path": row.variant,
        "instance_group": row.instance_group, "max_batch_size": row.max_batch_size,
        "satisfies_constraints": "Yes" if row.satisfies else "No"}
    if key in values:
        return values[key]
    metric = m.metrics().get(key)
    return "" if metric is None else round(metric, 1)


def _table(rows: Sequence[Row], fields: Sequence[str]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([FIELD_HEADERS[f] for f in fields])
    for row in rows:
        writer.writerow([_cell(row, f) for f in fields])
    return buffer.getvalue()


def _fields(chosen: list[str] | None, default: Sequence[str], rate: bool) -> list[str]:
    fields = list(chosen if chosen is not None else default)
    return [("request_rate" if f == "concurrency" and rate else f) for f in fields]


def write_results(rows: Sequence[Row], layout: Layout) -> list[Path]:
    """The results CSVs (a CSV only when its table has rows); their paths."""
    folder = layout.export / "results"
    folder.mkdir(parents=True, exist_ok=True)
    rate = any(r.measurement.request_rate is not None for r in rows)
    written = []
    inference = folder / layout.csv_names["inference"]
    inference.write_text(_table(rows, _fields(layout.fields["inference"], INFERENCE_FIELDS,
                                              rate)))
    written.append(inference)
    gpu_rows = [r for r in rows if "gpu_used_memory" in r.measurement.metrics()]
    if gpu_rows:
        path = folder / layout.csv_names["gpu"]
        path.write_text(_table(gpu_rows, _fields(layout.fields["gpu"], GPU_FIELDS, rate)))
        written.append(path)
    server = folder / layout.csv_names["server"]
    server_fields = layout.fields["server"] or list(SERVER_FIELDS)
    lines = io.StringIO()
    writer = csv.writer(lines, lineterminator="\n")
    writer.writerow([FIELD_HEADERS[f] for f in server_fields])
    writer.writerow(["triton-server" if f == "model_name" else "" for f in server_fields])
    server.write_text(lines.getvalue())
    written.append(server)
    return written


# ---- the reports ----------------------------------------------------------------------------

def _peaks(rows: Sequence[Row]) -> dict[str, float]:
    """Each variant's highest throughput among its levels that meet the constraints."""
    peaks: dict[str, float] = {}
    for r in rows:
        if r.satisfies:
            peaks[r.variant] = max(peaks.get(r.variant, 0.0), r.measurement.throughput)
    return peaks


def _best(rows: Sequence[Row], study: optuna.Study, out: StudyOutputs, model: str,
          ) -> tuple[str | None, float | None, float | None]:
    """(the best variant, its throughput, the default's) of one model."""
    best = best_trials(study)
    peaks = _peaks(rows)
    chosen = out.trial_variant.get(best[0].number) if best else None
    return chosen, peaks.get(chosen) if chosen else None, peaks.get(f"{model}_config_default")


def sentence(rows: Sequence[Row], study: optuna.Study, out: StudyOutputs, model: str,
             objectives: Mapping[str, str]) -> str:
    """Model Analyzer's summary sentence (HTML)."""
    mine = [r for r in rows if r.model == model]
    count = len(mine)
    configs = len({r.variant for r in mine})
    chosen, best, default = _best(mine, study, out, model)
    what = ("at maximizing throughput" if list(objectives) == ["perf_throughput"]
            else "at meeting the objectives")
    if chosen is None or best is None or default is None or default <= 0 or best <= default:
        phrase = "provides no gain over the default configuration"
        chosen = chosen or f"{model}_config_default"
    else:
        phrase = (f"is <strong>{round(100 * (best - default) / default)}%</strong> better "
                  f"than the default configuration {what}")
    measured = f"{count} measurement{'s' if count != 1 else ''}"
    return (f"In {measured} across {configs} configurations, <strong>{html.escape(chosen)}"
            f"</strong> {phrase}, under the given constraints.")


def plain(sentence_html: str) -> str:
    """The summary sentence as text (its bold marks dropped), for the terminal."""
    return sentence_html.replace("<strong>", "").replace("</strong>", "")


def _verdict(client: MlflowClient, parent_id: str | None) -> tuple[str, str]:
    if parent_id is None:
        return "not confirmed", ""
    tags = client.get_run(parent_id).data.tags
    return tags.get(VERDICT, "not confirmed"), tags.get(NOTE, "")


def _table_html(rows: Sequence[Row], variants: Sequence[str]) -> str:
    head = ("<tr><th>Model Config Name</th><th>Max Batch Size</th><th>Instance Group</th>"
            "<th>p99 Latency (ms)</th><th>Throughput (infer/sec)</th>"
            "<th>Satisfies Constraints</th></tr>")
    body = []
    for variant in variants:
        mine = [r for r in rows if r.variant == variant]
        if not mine:
            continue
        top = max(mine, key=lambda r: (r.satisfies, r.measurement.throughput))
        p99 = top.measurement.latency_p99_ms
        body.append(f"<tr><td>{html.escape(variant)}</td><td>{top.max_batch_size}</td>"
                    f"<td>{html.escape(top.instance_group)}</td>"
                    f"<td>{'' if p99 is None else f'{p99:.1f}'}</td>"
                    f"<td>{top.measurement.throughput:.1f}</td>"
                    f"<td>{'Yes' if top.satisfies else 'No'}</td></tr>")
    return f"<table border='1'>{head}{''.join(body)}</table>"


def _ranked(rows: Sequence[Row], model: str, top: int) -> list[str]:
    peaks = _peaks([r for r in rows if r.model == model])
    return sorted(peaks, key=lambda v: -peaks[v])[:top]


def _page(title: str, parts: Sequence[str]) -> str:
    return (f"<html><head><meta charset='utf-8'><title>{html.escape(title)}</title></head>"
            f"<body><h1>{html.escape(title)}</h1>{''.join(parts)}</body></html>\n")


def _save(path: Path, text: str) -> Path:
    """The HTML page, and its PDF where wkhtmltopdf is installed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    converter = shutil.which("wkhtmltopdf")
    if converter is not None:
        subprocess.run([converter, "--quiet", str(path), str(path.with_suffix(".pdf"))],
                       check=False, capture_output=True, timeout=120)
    return path


def write_summary(spec: StudySpec, study: optuna.Study, out: StudyOutputs, layout: Layout,
                  client: MlflowClient, parent_id: str | None) -> list[Path]:
    """One summary report per entry model; their paths."""
    verdict, note = _verdict(client, parent_id)
    written = []
    constraints = {k: v.model_dump(exclude_none=True) for k, v in spec.constraints.items()}
    for model in sorted({r.model for r in out.rows}):
        parts = [f"<p>Model: {html.escape(model)}</p><p>GPU(s): none measured</p>"
                 f"<p>Constraint targets: {html.escape(str(constraints or None))}</p>",
                 f"<p>{sentence(out.rows, study, out, model, spec.objectives)}</p>",
                 f"<p>Confirmed verdict: <strong>{html.escape(verdict)}</strong></p>",
                 f"<pre>{html.escape(note)}</pre>" if note else "",
                 _table_html([r for r in out.rows if r.model == model],
                             out.variants.get(model, []))]
        path = layout.export / "reports" / "summaries" / model / "result_summary.html"
        written.append(_save(path, _page("Online Result Summary", parts)))
    return written


def write_detailed(rows: Sequence[Row], variants: Sequence[str], layout: Layout) -> list[Path]:
    """Model Analyzer's detailed report of each variant: its load levels."""
    written = []
    for variant in variants:
        mine = sorted((r for r in rows if r.variant == variant),
                      key=lambda r: (r.measurement.concurrency or 0,
                                     r.measurement.request_rate or 0.0))
        if not mine:
            raise TrackerError(f"{variant}: no measurement of that configuration in the study "
                               f"(measured: {', '.join(sorted({r.variant for r in rows}))})")
        text = _table(mine, [*INFERENCE_FIELDS, "perf_latency_avg"])
        parts = [f"<p>Model Config: {html.escape(variant)}</p>",
                 f"<pre>{html.escape(text)}</pre>"]
        path = layout.export / "reports" / "detailed" / variant / "detailed_report.html"
        written.append(_save(path, _page("Detailed Report", parts)))
    return written


def top_variants(out: StudyOutputs, top: int) -> list[str]:
    """The best ``top`` variants of each entry model, by feasible throughput."""
    return [v for model in sorted({r.model for r in out.rows})
            for v in _ranked(out.rows, model, top)]
