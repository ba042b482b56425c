"""The study spec: which model, which server, how to measure, what to optimise.

One YAML file says which model to tune, on which server, how to measure it, what to optimise
under which constraints, and where results go. See docs/spec.md.

``load_spec(path)`` reads and validates it; every problem becomes one line of a
:class:`~tracker.errors.SpecError` naming the field path and the bad value (an unknown key gets
the closest valid one). Relative paths resolve against the spec file's folder.
``ensure_model(spec)`` runs ``model.build`` when the model file does not exist yet.

The sections live in :mod:`tracker.spec.sections` (``search`` in
:mod:`tracker.spec.search_section`, ``model`` in :mod:`tracker.spec.model_section`) and are
re-exported here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Literal, TypeAlias

import yaml
from pydantic import AfterValidator, Field, PrivateAttr, ValidationError, model_validator

from tracker import metrics as catalog
from tracker.errors import ModelError, SpecError
from tracker.spec.capacity import CapacitySection
from tracker.spec.check_section import CheckSection
from tracker.spec.fields import closest
from tracker.spec.locate import locate_spec
from tracker.spec.messages import Problems, messages, problem, show
from tracker.spec.model_section import ModelSection, SpecModel
from tracker.spec.search_section import SearchSection, Space
from tracker.spec.sections import (
    DEFAULT_CONCURRENCY,
    ConfirmSection,
    LoadSection,
    MlflowSection,
    ServerSection,
)
from tracker.spec.server_options import study_problems
from tracker.spec.shapes import Bound, ConcurrencyRange, Range, Scalar
from tracker.spec.space_rules import LOAD_KNOBS
from tracker.spec.yaml_loader import load_yaml

__all__ = [
    "DEFAULT_CONCURRENCY", "LOAD_KNOBS", "METRICS", "METRIC_BETTER", "Bound", "CapacitySection",
    "CheckSection",
    "ConcurrencyRange", "ConfirmSection",
    "Direction", "LoadSection", "MlflowSection", "ModelSection", "Range", "Scalar",
    "SearchSection", "ServerSection", "Space", "StudySpec", "ensure_model", "load_spec",
    "parse_spec",
]

Direction: TypeAlias = Literal["maximize", "minimize"]

# the metric catalog's names (tracker/metrics.py) and which way is better for each
METRIC_BETTER: dict[str, Direction] = dict(catalog.BETTER)
METRICS: tuple[str, ...] = catalog.NAMES


def _metric_name(name: str) -> str:
    """A catalog name, or one with a model in it that tracker.metrics.lookup resolves:
    ``model/<step>/queue_ms`` (a pipeline's step), ``<model>/perf_latency_p99`` (one of
    several models served together)."""
    if catalog.lookup(name) is None:
        guess = closest(name, METRICS)
        hint = f"; did you mean {guess!r}?" if guess else "; known metrics: " + ", ".join(METRICS)
        raise problem(f"unknown metric {name!r}{hint}")
    return name


MetricName = Annotated[str, AfterValidator(_metric_name)]


def _bounds(value: dict[str, Bound]) -> dict[str, Bound]:
    """A measured figure is never negative: a ``max`` below 0 no configuration can meet."""
    items = [(f"{name}.max", f"must be >= 0 ({name} is never negative), but got "
              f"{bound.max:g}")
             for name, bound in value.items()
             if bound.max is not None and bound.max < 0
             and not getattr(catalog.lookup(name), "relative", False)]
    if items:
        raise Problems(items)
    return value


def _default_objectives() -> dict[str, Direction]:
    return {"perf_throughput": "maximize"}


def _objectives(value: dict[str, Direction]) -> dict[str, Direction]:
    if not 1 <= len(value) <= 2:
        raise problem("needs one objective (or two for a Pareto front), but got "
                      f"{len(value)}: {show(value)}")
    return value


class StudySpec(SpecModel):
    """A whole study. ``source`` is the spec file; ``base_dir`` its folder."""

    model: ModelSection
    """Which model (or repository of models) to tune."""
    server: ServerSection = Field(default_factory=ServerSection)
    """Which Triton serves the trials and how a trial's config reaches it."""
    load: LoadSection = Field(default_factory=LoadSection)
    """How each configuration is measured: the load sweep and its stability windows."""
    objectives: Annotated[dict[MetricName, Direction], AfterValidator(_objectives)] = Field(
        default_factory=_default_objectives)
    """Metric name -> maximize or minimize: one objective, or two for a Pareto front."""
    constraints: Annotated[dict[MetricName, Bound], AfterValidator(_bounds)] = Field(
        default_factory=dict)
    """Metric name -> {max, min}: limits a configuration must meet to be feasible."""
    search: SearchSection = Field(default_factory=SearchSection)
    """How configurations are chosen: the sampler, the budget and the search space."""
    mlflow: MlflowSection = Field(default_factory=MlflowSection)
    """Where results are tracked and which registered model receives the winner."""
    confirm: ConfirmSection = Field(default_factory=ConfirmSection)
    """The confirmation after the search: the best and the default re-measured."""
    check: CheckSection = Field(default_factory=CheckSection)
    """The output check: every configuration answers the default's probes as it does."""
    capacity: CapacitySection | None = None
    """Target traffic and price: replicas and cost per million at each trial's capacity."""

    _source: Path | None = PrivateAttr(default=None)
    _base_dir: Path | None = PrivateAttr(default=None)

    @property
    def source(self) -> Path | None:
        """The spec file this was loaded from (None when built in Python)."""
        return self._source

    @property
    def base_dir(self) -> Path:
        """The folder relative paths were resolved against (the spec file's folder)."""
        return self._base_dir or Path.cwd()

    @property
    def study_name(self) -> str:
        return self.search.study_name or self.model.label

    @property
    def experiment_name(self) -> str:
        return self.mlflow.experiment or self.model.label

    @property
    def registered_model_name(self) -> str:
        return self.mlflow.registered_model or self.model.label

    @model_validator(mode="before")
    @classmethod
    def _joint_objective(cls, data: object) -> object:
        """Several entry models are judged by one score: unless ``objectives`` is given, it
        is ``weighted_gain`` (docs/pipelines.md)."""
        if isinstance(data, Mapping) and "objectives" not in data:
            model = data.get("model")
            names = model.get("name") if isinstance(model, Mapping) else None
            if isinstance(names, list) and len(names) > 1:
                return {**data, "objectives": {catalog.WEIGHTED_GAIN: "maximize"}}
        return data

    @model_validator(mode="after")
    def _several_models(self) -> StudySpec:
        """What several independent entry models need of the other sections."""
        names = self.model.names
        items: list[tuple[str, str]] = []
        joint = {catalog.WEIGHTED_GAIN: "maximize"}
        if len(names) > 1 and dict(self.objectives) != joint:
            items.append(("objectives", f"several entry models ({', '.join(names)}) are judged "
                          f"by one score, weighted_gain (each model's throughput against the "
                          f"default configuration's, weighed by model.weights), so objectives "
                          f"must be {{weighted_gain: maximize}} or left out, but got "
                          f"{show(dict(self.objectives))}"))
        if len(names) < 2 and catalog.WEIGHTED_GAIN in self.objectives:
            items.append(("objectives", "weighted_gain scores several entry models measured "
                          "together; with one model, optimise its own metric (e.g. "
                          "perf_throughput)"))
        items.extend((f"load.models.{k}", f"names no entry model (model.name: {show(names)})")
                     for k in self.load.models if k not in names or len(names) < 2)
        if len(names) > 1:
            items.extend((f"search.space.{k}", f"sets every model's load at once; with several "
                          f"entry models give each its own in load.models.<model>.{k}")
                         for k in self.search.space if k in LOAD_KNOBS)
        if items:
            raise Problems(items)
        return self

    @model_validator(mode="after")
    def _threads_once(self) -> StudySpec:
        """server.ort_*_op_threads and a searched parameters.*_op_thread_count set the same
        onnxruntime parameter: the server setting would overwrite every searched value."""
        items = []
        for field, key in (("ort_intra_op_threads", "intra_op_thread_count"),
                           ("ort_inter_op_threads", "inter_op_thread_count")):
            value = getattr(self.server, field)
            if value is not None and f"parameters.{key}" in self.search.space:
                items.append((f"search.space.parameters.{key}",
                              f"is searched, but server.{field}={value} sets the same "
                              f"onnxruntime parameter and would overwrite every searched value; "
                              f"remove one of the two"))
        if items:
            raise Problems(items)
        return self

    @model_validator(mode="after")
    def _server_options(self) -> StudySpec:
        """Server option knobs need a server this study restarts; a searched response cache
        needs a cache size (tracker/spec/server_options.py)."""
        from tracker.launch_modes import MODES

        items = study_problems(MODES[self.server.mode].restarts, self.server.mode,
                               self.server.options, self.search.space)
        if items:
            raise Problems(items)
        return self

    @model_validator(mode="after")
    def _shared_memory_here(self) -> StudySpec:
        """System shared memory is a region in this machine's /dev/shm that the server maps:
        only a server started here (local mode) can see it."""
        memory = self.load.shared_memory
        if memory != "none" and self.server.mode != "local":
            raise Problems([("load.shared_memory", f"'{memory}' needs a server on this "
                             f"machine that shares its /dev/shm (server.mode 'local'), but "
                             f"server.mode is {self.server.mode!r}: use 'none'")])
        if memory != "none" and len(self.model.names) > 1:
            raise Problems([("load.shared_memory", f"'{memory}' is for one entry model; "
                             f"several measured together ({', '.join(self.model.names)}) "
                             "send their tensors in the requests: use 'none'")])
        return self

    @model_validator(mode="after")
    def _sequence_seed(self) -> StudySpec:
        """``load.sequence.seed`` defaults to the study's ``search.seed``."""
        seq = self.load.sequence
        if seq is not None and seq.seed is None and self.search.seed is not None:
            seq.seed = self.search.seed
        return self

    def resolved_storage(self) -> str:
        """The Optuna storage URL: ``search.storage``, else ``optuna.db`` beside the MLflow
        sqlite database, else in the current working directory."""
        return self.search.resolved_storage(self.mlflow.resolved_tracking_uri())


def parse_spec(data: object, *, base_dir: str | Path | None = None,
               source: str | Path | None = None) -> StudySpec:
    """Validate already-parsed spec data (a mapping); relative paths resolve against
    ``base_dir`` (default: the current directory). Raises SpecError."""
    label = str(source) if source is not None else None
    if data is None:
        raise SpecError(["the spec is empty; it needs at least a `model` section "
                         "(see docs/spec.md)"], label)
    if not isinstance(data, Mapping):
        raise SpecError([f"(top level): must be a mapping of sections (model, server, load, "
                         f"objectives, constraints, search, mlflow, confirm), but got "
                         f"{show(data)}"], label)
    # Top-level `x-...` keys are free for YAML anchors (docker-compose's convention).
    data = {k: v for k, v in data.items() if not (isinstance(k, str) and k.startswith("x-"))}
    base = Path(base_dir) if base_dir is not None else Path.cwd()
    try:
        spec = StudySpec.model_validate(data, context={"base_dir": base.absolute()})
    except ValidationError as exc:
        raise SpecError(messages(exc, StudySpec), label) from exc
    spec._base_dir = base.absolute()
    spec._source = Path(source).absolute() if source is not None else None
    return spec


def load_spec(path: str | Path) -> StudySpec:
    """Read and validate a study spec file. Raises SpecError with one line per problem.
    A relative ``path`` is looked for where :func:`tracker.spec.locate.locate_spec` says
    (the current folder, then the folder ``mlflow run`` was started in)."""
    path = locate_spec(path)
    if path.is_dir():
        raise SpecError([f"{path} is a directory; give the study.yaml file inside it"], str(path))
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError([f"cannot read {path}: {exc}"], str(path)) from exc
    try:
        data = load_yaml(text)  # safe, no key twice, aliases bounded (spec/yaml_loader.py)
    except yaml.YAMLError as exc:
        raise SpecError([_yaml_message(exc)], str(path)) from exc
    return parse_spec(data, base_dir=path.absolute().parent, source=path)


def _yaml_message(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem_text = getattr(exc, "problem", None) or str(exc)
    if mark is not None:
        return f"line {mark.line + 1}, column {mark.column + 1}: invalid YAML: {problem_text}"
    return f"invalid YAML: {problem_text}"


def ensure_model(spec: StudySpec, *, timeout_s: float = 1800.0) -> Path:
    """Return ``model.path``, first running ``python BUILD OUTPUT_PATH`` (cwd: the spec's folder)
    when it does not exist yet and ``model.build`` is set. Raises ModelError.

    The script writes into a scratch folder beside the target, which is renamed into place
    only when the script succeeds: a failed or concurrent build never leaves half a model.
    """
    path = spec.model.path
    if path.exists():
        return path
    build = spec.model.build
    if build is None:
        raise ModelError(f"model.path: {path} does not exist, and no model.build script is "
                         "set to make it")
    if not build.is_file():
        raise ModelError(f"model.build: script not found: {build}")
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".build-", dir=path.parent))
    try:
        out = scratch / path.name
        try:
            proc = subprocess.run(
                [sys.executable, str(build), str(out)], cwd=spec.base_dir, capture_output=True,
                text=True, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired as exc:
            raise ModelError(f"model.build: {build} did not finish within {timeout_s:g} s") from exc
        except OSError as exc:
            raise ModelError(f"model.build: cannot run {build}: {exc}") from exc
        if proc.returncode != 0:
            tail = "\n".join((proc.stderr or proc.stdout or "").strip().splitlines()[-20:])
            raise ModelError(f"model.build: {build.name} exited with status {proc.returncode}"
                             f"\n--- last lines of its output ---\n{tail}")
        if not out.exists():
            raise ModelError(f"model.build: {build.name} exited 0 but did not write the path it "
                             f"was given ({out.name})")
        if not path.exists():  # a concurrent build may have won the race: keep its result
            os.replace(out, path)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return path
