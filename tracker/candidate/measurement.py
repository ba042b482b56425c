"""One measurement of one configuration: repository -> server -> sweep -> level -> artifacts.

A trial (tuning/trial.py), ``tracker profile`` (profile/command.py) and any later
re-measurement of a known configuration go through :func:`measure`; what
differs between them is only what they do with the :class:`ConfigMeasurement` (tell Optuna,
log a run, compare).

The request is three values, each built once: :class:`Bench` (where, and what stays the same
for a study's every measurement: built with its StudyContext), :class:`CandidateConfig`
(what: the configs and the values they cannot hold) and :class:`Procedure` (how this
measurement goes).

The server is the caller's: it is served the configuration (``server.apply_trial``) and left
running, so several calls may share one server (each call applies its own configuration).
The server log in the result is the part written since this measurement began.
"""

from __future__ import annotations

import functools
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from tracker.candidate import entries as joint
from tracker.errors import MeasurementError, ModelError, TrackerError
from tracker.launch_modes import MODES
from tracker.measure import csvio
from tracker.measure.host import measured_tags, server_tags
from tracker.measure.monitors import Monitor, close_monitors, default_monitors
from tracker.measure.sweep import LevelPlanner, sweep
from tracker.measure.types import LoadClient, Measurement, SweepLevel, SweepResult
from tracker.redact import redact_text
from tracker.search import capacity
from tracker.search.objective import LevelChoice, pick_best_level
from tracker.serving import Serving, serving_choices
from tracker.tracking import runs
from tracker.triton import model_config
from tracker.triton.configuration import Configuration
from tracker.triton.formats import ServeOptions, format_of, json_knobs
from tracker.triton.repository import TrialRepository, served_configs, write_configuration
from tracker.triton.server.logs import log_errors
from tracker.triton.server.options import serve_trial, server_problem

if TYPE_CHECKING:
    from mlflow.entities import Metric

    from tracker.spec import StudySpec
    from tracker.triton.model_config import ModelConfig, ModelInfo
    from tracker.triton.server.base import TritonServer

LOG_HEAD, LOG_TAIL = 200_000, 300_000
#: the output check, run once the configuration is served: the warm-up requests it made
Check = Callable[["TritonServer", str, "ModelConfig"], int]


@dataclass(frozen=True)
class Bench:
    """Where configurations are measured: the same for every measurement of a study."""

    spec: StudySpec
    configuration: Configuration
    server: TritonServer
    serving: Serving | None  # how an ONNX model is served; None: by its own backend
    load_client: LoadClient = "builtin"  # "builtin" or "perf_analyzer"


@dataclass(frozen=True)
class CandidateConfig:
    """What is measured: every model's config (by name, load order) and the values the
    configs cannot hold."""

    configs: Mapping[str, ModelConfig]
    files: Mapping[str, object] = field(default_factory=dict)          # FILE:KEY values
    server_values: Mapping[str, object] = field(default_factory=dict)  # server/<option>


@dataclass(frozen=True)
class Procedure:
    """How one measurement goes. ``levels`` None: the spec's sweep, or ``plan``'s
    (search/sweep_plan.py); ``model_levels``: an entry's own levels; ``reference``: the
    default's logged metrics ``weighted_gain`` is measured against; ``check``: the output
    check; ``on_level``/``on_phase``: each entry's figures of a level, each step's name."""

    levels: Sequence[float] | None = None
    model_levels: Mapping[str, Sequence[float]] | None = None
    plan: LevelPlanner | None = None
    reference: Mapping[str, float] | None = None
    check: Check | None = None
    on_level: Callable[[Measurement], None] | None = None
    on_phase: Callable[[str], None] | None = None


class ConfigFailed(Exception):
    """The configuration has no measurement. ``reason`` says why in a trial's words (the step
    that failed and the cause), ``cause`` is the TrackerError behind it, ``log`` the server
    log since the measurement began."""

    def __init__(self, reason: str, cause: TrackerError, log: str = "") -> None:
        super().__init__(reason)
        self.reason, self.cause, self.log = reason, cause, log


@dataclass(frozen=True)
class ConfigMeasurement:
    """What measuring one configuration produced."""

    repository: TrialRepository
    served_text: str                 # config.pbtxt as the server loaded it
    production_text: str             # the production config (the model's own backend)
    result: SweepResult
    choice: LevelChoice
    log: str                         # server log since the measurement began, unclipped
    tags: dict[str, str]             # what was measured: GPU memory scope, Triton version
    knob_texts: dict[str, str] = field(default_factory=dict)  # FILE:KEY files as loaded
    # each model's production config, load order (one for a single model)
    model_texts: dict[str, str] = field(default_factory=dict)
    # how the study names an entry's metric (Configuration.metric_name)
    name: Callable[[str, str], str] = lambda entry, metric: metric

    @property
    def measurements(self) -> list[Measurement]:
        return self.result.measurements

    def files(self) -> dict[str, str | bytes | Path]:
        """The artifacts of a measured configuration (``tracking.runs.log_files``): each
        entry's levels in perf_analyzer's CSV, ``perf.csv`` named as its metrics are
        (``<model>/perf.csv`` for each of several)."""
        files: dict[str, str | bytes | Path] = {
            "config.pbtxt": self.served_text, "server.log": clip_log(self.log),
            **{self.name(entry, "perf.csv"): csvio.dumps(levels)
               for entry, levels in self.by_model().items()}}
        if self.repository.shimmed:
            files["production_config.pbtxt"] = self.production_text
        files.update(self.knob_texts)
        files.update(model_files(self.model_texts))
        return files

    def by_model(self) -> dict[str, list[Measurement]]:
        """Each entry model's levels, by name."""
        return {name: self.result.of(name) for name in self.result.names}

    def sweep_metrics(self) -> list[Metric]:
        """Every level's figures, ``sweep/<metric>`` as the study names them
        (``sweep/<model>/<metric>`` for each of several entry models), step = concurrency."""
        return [m for entry, levels in self.by_model().items()
                for m in runs.sweep_metrics(levels, functools.partial(self.name, entry))]

    def headline(self) -> dict[str, float]:
        """The metrics logged at the chosen level: every entry's, with its load level, and
        the feasibility."""
        return {**self.choice.metrics, "feasible": float(self.choice.feasible)}


def model_files(texts: Mapping[str, str]) -> dict[str, str | bytes | Path]:
    """``configs/<model>/config.pbtxt`` for each model of ``texts`` (its production config:
    what it is deployed with), the record promotion builds each model's directory from."""
    return {f"configs/{name}/config.pbtxt": text for name, text in texts.items()}


def clip_log(text: str) -> str:
    """The server log for an artifact: secrets masked, at most ~0.5 MB (head and tail)."""
    if len(text) > LOG_HEAD + LOG_TAIL:
        cut = len(text) - LOG_HEAD - LOG_TAIL
        text = (text[:LOG_HEAD] + f"\n... [{cut} characters of the log left out] ...\n"
                + text[-LOG_TAIL:])
    return redact_text(text)


def with_log_errors(err: TrackerError, log: str, gone: str | None = None) -> TrackerError:
    """``err`` with the server log's last error lines appended (the stub's or server's own
    words on why requests failed) and, first, ``gone``: why the server died under it (the
    server's :meth:`~tracker.triton.server.base.TritonServer.gone`); ``err`` itself when
    there is neither."""
    lines = log_errors(log, died=gone is not None)
    if not lines and gone is None:
        return err
    logged = f"; server log: {' | '.join(lines)}" if lines else ""
    return MeasurementError(f"{_died_first(gone, 'measurement')}{err}{logged}")


def _died_first(gone: str | None, during: str) -> str:
    """What a failure's reason begins with when the server died under ``during`` (``gone``:
    how its process ended); "" when it did not."""
    return f"the server died during this {during} ({gone}); " if gone else ""


def resolve_serving(spec: StudySpec, server: TritonServer,
                    conf: Configuration | None = None) -> Serving | None:
    """How this server serves the spec's ONNX models: ``onnxruntime`` (its onnxruntime
    backend) or ``python`` (the onnxruntime shim); ``server.serving: auto`` asks the server.
    None when no model is ONNX (each served by the backend its config names)."""
    if conf is not None and all(m.format != "onnx" for m in conf.models):
        return None
    return serving_choices(spec.server.serving,
                           lambda: server.has_backend("onnxruntime"))[0]


def unservable(spec: StudySpec, conf: Configuration,
               server: TritonServer) -> str | None:
    """Why ``server`` cannot serve a model of the configuration (it lacks the backend the
    model needs), naming the launch modes that can; None when it can (or cannot tell before
    it starts). Ensembles need no backend (Triton's core schedules them)."""
    serving = resolve_serving(spec, server, conf)
    if not MODES[spec.server.mode].knows_backends:
        return None  # someone else's server: its load says so
    for model in conf.models:
        if model.format == "ensemble":
            continue
        why = (_lacks(spec, model, format_of(model).backend(model, serving), server)
               or _broken_stub(spec, model))
        if why is not None:
            return why
    return None


def _broken_stub(spec: StudySpec, info: ModelInfo) -> str | None:
    """Why the embedded server's Python backend would hand this Python-backend model wrong
    tensors: every stub of the nvidia-pytriton wheels is built for numpy 1, and with numpy 2
    installed ``as_numpy()`` gives zeros and ``pb_utils.Tensor`` outputs arrive empty (seen
    with nvidia-pytriton 0.5.7 + numpy 2.4.6; the ONNX shim works around it, a user's
    model.py cannot be rewritten). None when that cannot happen here."""
    from tracker.triton.shim.model import numpy_glue_works

    if spec.server.mode != "local" or info.format != "python" or numpy_glue_works():
        return None
    import numpy

    return (f"model {str(info.config.name)!r} (python format) would get wrong tensors on the "
            f"embedded server: its Python backend stub is built for numpy 1, and this "
            f"environment has numpy {numpy.__version__}, with which `as_numpy()` returns "
            "zeros; install numpy 1 (`pip install 'numpy<2'`, which also brings the "
            "nvidia-pytriton 0.7 wheel) or run it with server.mode: docker or remote")


def _lacks(spec: StudySpec, info: ModelInfo, needed: str, server: TritonServer) -> str | None:
    try:
        has = server.has_backend(needed)
    except TrackerError:
        return None  # a server we cannot ask before it runs (docker without a daemon)
    if has:
        return None
    return (f"model {str(info.config.name)!r} ({info.format} format) needs Triton's {needed!r} "
            f"backend, which the server of server.mode {spec.server.mode!r} does not have (the "
            "embedded nvidia-pytriton server has only the python backend); run it with "
            "server.mode: docker (an NGC Triton image such as "
            "nvcr.io/nvidia/tritonserver:<yy.mm>-py3, on a GPU host for GPU backends) or "
            "server.mode: remote (a Triton that has the backend)")


def check_servable(spec: StudySpec, conf: Configuration,
                   server: TritonServer) -> None:
    """ModelError from :func:`unservable` or the server's own checks (before any start)."""
    why = server_problem(spec.server, spec.search.space, server) or unservable(spec, conf, server)
    if why is not None:
        raise ModelError(why)


def ort_threads(spec: StudySpec) -> tuple[int | None, int | None]:
    return (spec.server.ort_intra_op_threads, spec.server.ort_inter_op_threads)


def serve_options(spec: StudySpec) -> ServeOptions:
    return ServeOptions(ort_threads=ort_threads(spec))


def served_text(spec: StudySpec, info: ModelInfo, cfg: ModelConfig,
                serving: Serving | None) -> str:
    """The config.pbtxt text a server with ``serving`` loads for ``cfg`` (no files written)."""
    _prod, served, header = served_configs(info, cfg, serving=serving,
                                           options=serve_options(spec))
    return header + model_config.dumps(served)


def _monitors(server: TritonServer) -> Sequence[Monitor]:
    """The server's own figures: its process tree, its GPUs (by UUID), its metrics."""
    return default_monitors(server.gpu_set(), server.endpoints.metrics, pids=server.pids)


def _each(on_level: Callable[[Measurement], None]) -> Callable[[SweepLevel], None]:
    """``on_level`` called with each entry's Measurement of a level."""
    def each(level: SweepLevel) -> None:
        for m in level.measurements.values():
            on_level(m)
    return each


def _write(bench: Bench, candidate: CandidateConfig, workdir: Path) -> TrialRepository:
    """The trial's model repository: every model of the configuration, served by the bench's
    ``serving``, with its ``FILE:KEY`` values."""
    conf, cfgs = bench.configuration, candidate.configs
    try:
        return write_configuration(workdir, {n: conf.info(n) for n in cfgs}, cfgs, conf.entry,
                                   serving=bench.serving, options=serve_options(bench.spec),
                                   files=candidate.files,
                                   logged=json_knobs.files_of(bench.spec.search.space))
    except TrackerError as err:
        raise ConfigFailed(f"cannot write the trial's model repository: {err}", err) from err


def _serve(bench: Bench, candidate: CandidateConfig, how: Procedure, repo: TrialRepository,
           mark: int) -> tuple[ModelConfig, dict[str, str], int]:
    """Serve ``repo`` (the candidate's server values), pass the output check: (loaded
    config, tags, warm-up requests made)."""
    if how.on_phase is not None:
        how.on_phase("starting Triton")
    try:
        said = serve_trial(bench.server, repo, bench.spec.server, candidate.server_values,
                           how.on_phase)
        loaded = repo.served_config
        warmed = how.check(bench.server, repo.model_name, loaded) if how.check is not None else 0
        return loaded, said, warmed
    except TrackerError as err:
        reason = _died_first(bench.server.gone(), "trial") + str(getattr(err, "reason", err))
        raise ConfigFailed(reason, err, bench.server.log_text()[mark:]) from err


def measure(bench: Bench, candidate: CandidateConfig, how: Procedure,
            workdir: Path) -> ConfigMeasurement:
    """Measure ``candidate`` on the bench's server: write the repository into ``workdir``
    (removed on failure), serve it, pass the output check, sweep every entry model at once
    at the procedure's levels (objective perf_capacity: the capacity search,
    search/capacity.py), choose the level by the objectives and constraints. Raises
    :class:`ConfigFailed`."""
    spec, conf, server = bench.spec, bench.configuration, bench.server
    repo = _write(bench, candidate, workdir)
    try:
        text = repo.served_config_path.read_text()
        knob_texts = {name: path.read_text() for name, path in repo.knob_files.items()}
        mark = len(server.log_text()) if server.strategy == "reload" else 0
        loaded, said, warm = _serve(bench, candidate, how, repo, mark)
        monitors = _monitors(server)
        # objective perf_capacity: the capacity search plans the levels and judges them
        searched = capacity.CapacitySettings.of(spec) if capacity.wanted(spec) else None
        try:
            served = {**dict(repo.models), conf.entry: loaded}
            result = sweep(server.endpoints,
                           joint.loads_of(spec, conf, served, how.levels, how.model_levels,
                                          {conf.entry: warm}),
                           spec.constraints, monitors, load_client=bench.load_client,
                           plan=capacity.CapacityPlan(searched) if searched else how.plan,
                           on_level=None if how.on_level is None else _each(how.on_level))
            scoring = joint.scoring(spec, conf, how.reference)
            choice = (capacity.choose(result, searched, spec.objectives, scoring) if searched
                      else pick_best_level(result.levels, joint.constraints_of(spec, conf),
                                           spec.objectives, scoring))
        except TrackerError as err:
            log = server.log_text()[mark:]
            cause = with_log_errors(err, log, server.gone())
            raise ConfigFailed(f"measurement failed: {cause}", cause, log) from err
        finally:
            close_monitors(monitors)
        return ConfigMeasurement(
            repository=repo, served_text=text,
            production_text=model_config.dumps(repo.production_config), result=result,
            choice=choice, log=server.log_text()[mark:],
            tags={**measured_tags(monitors), **server_tags(server.endpoints), **said},
            knob_texts=knob_texts,
            model_texts={n: model_config.dumps(c) for n, c in repo.productions.items()},
            name=conf.metric_name)
    except ConfigFailed:
        shutil.rmtree(workdir, ignore_errors=True)
        raise
