"""``tracker model-analyzer profile`` and ``report``: Model Analyzer's commands, run as studies.

:func:`profile` reads Model Analyzer's options (ma_options.py), translates them into one study
spec per study (ma_translate.py), checks every spec as ``tracker check`` does before any
server starts, then runs each study as ``tracker tune`` does (the search, the output check,
the confirmation, MLflow's parent and child runs). The translated spec and the options are
logged on the study's parent run, so the user can move to the native format. When every study
has finished, Model Analyzer's outputs are written (ma_outputs.py). The specs and the Optuna
storage live in ``checkpoint_directory``: the same command, run again after an interruption,
resumes where it stopped.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import optuna
import yaml
from mlflow import MlflowClient

from tracker.errors import SpecError, TrackerError
from tracker.peers import ma_outputs
from tracker.peers.ma_options import PeerOptionError, read_options
from tracker.peers.ma_translate import (
    Plan,
    StudyPlan,
    option_path,
    refuse_existing_output,
    translate,
)
from tracker.search.storage import make_storage
from tracker.spec import StudySpec, ensure_model, load_spec, parse_spec
from tracker.tracking import runs
from tracker.tracking.scaleout import PARENT_RUN_ATTR

Echo = Callable[[str], None]
PLAN_FILE = "model_analyzer.json"     # in checkpoint_directory: the command that profiled
_HEAD = ("# The study spec that `tracker model-analyzer profile` ran, translated from Model\n"
         "# Analyzer's options ({options}). Run it natively with `tracker tune {path}`.\n")


@dataclass(frozen=True)
class Profiled:
    """A finished profile: its plan and what it wrote."""

    plan: Plan
    configurations: int
    written: list[Path]
    sentences: dict[str, str]          # entry model -> Model Analyzer's summary sentence


def _validated(plan: Plan, config: Path | None) -> None:
    """Every translated spec validated as ``tracker check`` validates a spec, before anything
    is written: PeerOptionError, one line naming the option (``constraints.perf_latency_p99.
    max: must be >= 0 ...``)."""
    where = str(config) if config is not None else "command line"
    for study in plan.studies:
        try:
            parse_spec(study.spec, base_dir=plan.layout.checkpoints / study.name)
        except SpecError as exc:
            lines = [f"{option_path(path)}: {text}" for path, _, text in
                     (line.partition(": ") for line in exc.messages)]
            raise PeerOptionError(f"{where}: {'; '.join(lines)}") from None


def _write_specs(plan: Plan, argv: Sequence[str], config: Path | None) -> list[Path]:
    paths = []
    told = f"-f {config}" if config is not None else "the command line"
    for study in plan.studies:
        path = plan.layout.checkpoints / study.name / "study.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(_HEAD.format(options=told, path=path)
                        + yaml.safe_dump(study.spec, sort_keys=False))
        paths.append(path)
    (plan.layout.checkpoints / PLAN_FILE).write_text(json.dumps(
        {"argv": list(argv), "studies": [s.name for s in plan.studies]}, indent=1) + "\n")
    return paths


def _resumes(plan: Plan, argv: Sequence[str]) -> bool:
    """Whether ``argv`` is the command whose profile ``plan``'s checkpoint directory holds:
    its rerun resumes, into the output folder it began to write."""
    saved = plan.layout.checkpoints / PLAN_FILE
    try:
        return bool(json.loads(saved.read_text()).get("argv") == list(argv))
    except (OSError, ValueError, AttributeError):
        return False


def _checked(paths: Sequence[Path]) -> list[StudySpec]:
    """Every spec loaded and checked as ``tracker check`` checks it; no server started."""
    from tracker.invocation.session import spec_configuration
    from tracker.triton.server.modes import make_server
    from tracker.tuning.preflight import check_study

    specs = []
    for path in paths:
        spec = load_spec(path)
        ensure_model(spec)
        check_study(spec, spec_configuration(spec), make_server(spec.server))
        specs.append(spec)
    return specs


def _log_translation(spec: StudySpec, parent_id: str, spec_path: Path,
                     argv: Sequence[str], config: Path | None) -> None:
    client = MlflowClient(tracking_uri=spec.mlflow.tracking_uri)
    files: dict[str, str | bytes | Path] = {
        "model_analyzer/study.yaml": spec_path.read_text(),
        "model_analyzer/command.txt": "model-analyzer profile " + " ".join(argv) + "\n"}
    if config is not None and config.is_file():
        files[f"model_analyzer/{config.name}"] = config.read_text()
    runs.log_files(client, parent_id, files)


def _study(spec: StudySpec) -> optuna.Study:
    try:
        return optuna.load_study(study_name=spec.study_name,
                                 storage=make_storage(str(spec.search.storage),
                                                      heartbeat_interval=None))
    except KeyError:
        raise TrackerError(f"no study named {spec.study_name!r} in {spec.search.storage}: "
                           "run `tracker model-analyzer profile` first") from None


_Outputs = tuple[list[ma_outputs.Row], dict[str, str], list[Path], list[str]]


def _outputs(plan: Plan, specs: Sequence[StudySpec], *, write_variants: bool) -> _Outputs:
    """Every study's rows (variants written when ``write_variants``), summary sentences,
    summary reports, and the best variants."""
    from tracker.invocation.session import spec_configuration

    rows: list[ma_outputs.Row] = []
    sentences: dict[str, str] = {}
    written: list[Path] = []
    best: list[str] = []
    for study_plan, spec in zip(plan.studies, specs, strict=True):
        study = _study(spec)
        client = MlflowClient(tracking_uri=spec.mlflow.tracking_uri)
        out = ma_outputs.collect(spec, spec_configuration(spec), study, study_plan.sources,
                                 plan.layout, client, write=write_variants)
        rows += out.rows
        for model in sorted({r.model for r in out.rows}):
            sentences[model] = ma_outputs.sentence(out.rows, study, out, model,
                                                   spec.objectives)
        if plan.layout.summary:
            written += ma_outputs.write_summary(spec, study, out, plan.layout, client,
                                                study.user_attrs.get(PARENT_RUN_ATTR))
        best += ma_outputs.top_variants(out, plan.layout.top)
    return rows, sentences, written, best


def profile(argv: Sequence[str], cwd: Path, echo: Echo) -> Profiled:
    """Run ``model-analyzer profile`` ARGV as studies; raises PeerOptionError (nothing
    started) for what cannot be honoured, TrackerError for a failed study, and
    :class:`tracker.lifecycle.Interrupted` after Ctrl-C (the same command resumes)."""
    from tracker.tuning.tune import tune

    options, config = read_options(argv)
    plan = translate(options, cwd)
    fresh = not _resumes(plan, argv)
    if fresh:
        refuse_existing_output(plan.layout)
    _validated(plan, config)
    paths = _write_specs(plan, argv, config)
    specs = _checked(paths)
    for number, (study, spec, path) in enumerate(zip(plan.studies, specs, paths, strict=True)):
        echo(f"Profiling {', '.join(study.models)} (study {number + 1} of "
             f"{len(plan.studies)}: {path})")
        result = tune(path)
        _log_translation(spec, result.parent_run_id, path, argv, config)
    out = plan.layout.output_repository
    if fresh and plan.layout.override and out.exists():
        shutil.rmtree(out)                 # --override-output-model-repository
    out.mkdir(parents=True, exist_ok=True)
    rows, sentences, written, best = _outputs(plan, specs, write_variants=True)
    written = ma_outputs.write_results(rows, plan.layout) + written
    if plan.layout.detailed:
        written += ma_outputs.write_detailed(rows, best, plan.layout)
    count = len({r.variant for r in rows})
    models = [m for s in plan.studies for m in s.models]
    echo(f"Profile complete. Profiled {count} configurations for models: {models}")
    return Profiled(plan, count, written, sentences)


#: ``model-analyzer report``'s options: (flags, key (None: taken, no effect), what is done)
REPORT_OPTIONS: tuple[tuple[tuple[str, ...], str | None, str], ...] = (
    (("-n", "--report-model-configs"), "report_model_configs", "honoured: the configurations "
     "whose detailed reports are written, a,b (none: the summary only)"),
    (("-s", "--checkpoint-directory"), "checkpoint_directory", "honoured: the checkpoint "
     "directory of the profile (checkpoints)"),
    (("-e", "--export-path"), "export_path", "honoured: where reports/ is written (.)"),
    (("-f", "--config-file"), "config_file", "honoured: a YAML file of these options"),
    (("-o", "--output-formats"), "output_formats", "honoured: pdf (the default) or html"),
    (("--always_report-gpu-metrics", "--always-report-gpu-metrics"), None,
     "accepted: GPU figures are reported where measured"),
    (("-q", "--quiet"), None, "accepted"), (("-v", "--verbose"), None, "accepted"),
)


def _report_options(argv: Sequence[str]) -> tuple[list[str], Path, Path]:
    """(report_model_configs, export_path, checkpoint_directory) of a report command line."""
    found: dict[str, str] = {}
    names = {flag: key for flags, key, _ in REPORT_OPTIONS if key for flag in flags}
    ignored = {flag for flags, key, _ in REPORT_OPTIONS if key is None for flag in flags}
    args = list(argv)
    while args:
        arg = args.pop(0)
        name, eq, value = arg.partition("=")
        if name in ignored:
            continue
        if name not in names:
            raise PeerOptionError(f"{arg}: not an option of model-analyzer report (its "
                                  f"options: {', '.join(sorted(set(names)))})")
        if not eq:
            if not args:
                raise PeerOptionError(f"{name} needs a value")
            value = args.pop(0)
        found[names[name]] = value
    if "config_file" in found:
        data = yaml.safe_load(Path(found.pop("config_file")).read_text()) or {}
        for key in data:
            if key == "plots":
                raise PeerOptionError(f"{key} cannot be honoured: the reports' plots are the "
                                      "tracker's")
            if key not in set(names.values()):
                raise PeerOptionError(f"{key}: not an option of model-analyzer report")
        found = {**{k: str(v) if not isinstance(v, list) else ",".join(map(str, v))
                    for k, v in data.items()}, **found}
    if found.get("output_formats", "pdf") not in ("pdf", "html"):
        raise PeerOptionError(f"--output-formats must be pdf or html, but got "
                              f"{found['output_formats']!r}")
    configs = [c.strip() for c in found.get("report_model_configs", "").split(",") if c.strip()]
    return (configs, Path(found.get("export_path", ".")),
            Path(found.get("checkpoint_directory", "checkpoints")))


def report(argv: Sequence[str], cwd: Path, echo: Echo) -> list[Path]:
    """``model-analyzer report``: the summary of a finished profile, and the detailed report
    of each ``--report-model-configs`` variant."""
    configs, export, checkpoints = _report_options(argv)
    checkpoints = checkpoints if checkpoints.is_absolute() else cwd / checkpoints
    saved = checkpoints / PLAN_FILE
    if not saved.is_file():
        raise TrackerError(f"{checkpoints} holds no profile ({PLAN_FILE} is missing): give the "
                           "checkpoint directory of a `tracker model-analyzer profile` run "
                           "with -s")
    argv_profiled = json.loads(saved.read_text())["argv"]
    options, _config = read_options(argv_profiled)
    plan = translate(options, cwd)
    export = export if export.is_absolute() else cwd / export
    plan = replace(plan, layout=replace(plan.layout, export=export))
    specs = [load_spec(checkpoints / s.name / "study.yaml") for s in plan.studies]
    rows, sentences, written, _best = _outputs(plan, specs, write_variants=False)
    for model, text in sentences.items():
        echo(f"{model}: {ma_outputs.plain(text)}")
    if configs:
        written += ma_outputs.write_detailed(rows, configs, plan.layout)
    for path in written:
        echo(f"wrote {path}")
    return written


__all__ = ["REPORT_OPTIONS", "Profiled", "StudyPlan", "profile", "report"]
