"""The sections of the study spec (pydantic models); :mod:`tracker.spec` assembles them.

Every model forbids unknown keys and validates strictly (YAML's types as written: ``"8"`` is
not an integer). Validators raise :class:`~tracker.spec.messages.Problems`, which
:mod:`tracker.spec.messages` turns into lines naming the field path and the bad value.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal, TypeAlias, Union

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from tracker.launch_modes import MODES, NAMES
from tracker.samplers import NAMES as SAMPLER_NAMES
from tracker.samplers import SAMPLERS
from tracker.serving import ServingChoice
from tracker.spec.checks import (
    check_knob,
    check_range,
    check_space_value_shape,
    knob_path,
    knob_value_problems,
    parse_number,
)
from tracker.spec.connection import ClientTransports, ServerConnection
from tracker.spec.fields import config_field
from tracker.spec.load_repeat import RepeatSection
from tracker.spec.messages import Problems, join_path, problem, show
from tracker.spec.model_section import ModelSection as ModelSection  # re-exported
from tracker.spec.model_section import SpecModel as SpecModel  # re-exported
from tracker.spec.model_section import resolve_path
from tracker.spec.server_options import ServerOptions, section_problems, server_field, server_knob
from tracker.spec.streaming import StreamSection

DEFAULT_CONCURRENCY: tuple[int, ...] = (1, 2, 4, 8, 16)


PosInt = Annotated[int, Field(ge=1)]
PosFloat = Annotated[float, Field(gt=0)]
Port = Annotated[int, Field(ge=1, le=65535)]
Scalar: TypeAlias = bool | int | float | str


def _gpus(value: object) -> object:
    if value is None or value == "all":
        return value
    if isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool)
                                       and v >= 0 for v in value):
        return value
    raise problem(f"must be 'all' or a list of GPU indices (integers >= 0), but got {show(value)}")


if TYPE_CHECKING:
    LaunchModeName: TypeAlias = str
    SamplerName: TypeAlias = str
else:  # the registered launch modes and samplers (tracker/launch_modes.py, samplers.py)
    LaunchModeName = Literal[NAMES]
    SamplerName = Literal[SAMPLER_NAMES]


class ServerSection(ServerConnection):
    """Which Triton serves the trials and how a trial's config reaches it."""

    mode: LaunchModeName = "local"
    strategy: Literal["restart", "reload"] = "restart"
    binary: Annotated[Path | None, Field(strict=False)] = None
    image: str = "nvcr.io/nvidia/tritonserver:24.10-py3"
    gpus: Annotated[list[int] | Literal["all"] | None, BeforeValidator(_gpus)] = None
    shm_size: str = "1g"
    network: Literal["host", "bridge"] = "host"
    http_port: Port | None = None
    grpc_port: Port | None = None
    metrics_port: Port | None = None
    url: str | None = None
    http_url: str | None = None
    metrics_url: str | None = None
    startup_timeout_s: PosFloat = 120.0
    backend: ServingChoice = "auto"
    ort_intra_op_threads: Annotated[int, Field(ge=0)] | None = None
    ort_inter_op_threads: Annotated[int, Field(ge=0)] | None = None
    options: ServerOptions = Field(default_factory=ServerOptions)  # spec/server_options.py

    @field_validator("binary")
    @classmethod
    def _binary(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        return resolve_path(value, info)

    @field_validator("shm_size")
    @classmethod
    def _shm(cls, value: str) -> str:
        if not re.fullmatch(r"\d+[bkmgBKMG]?", value):
            raise problem(f"must be a size like '1g' or '512m', but got {show(value)}")
        return value

    @model_validator(mode="before")
    @classmethod
    def _remote_reloads(cls, data: object) -> object:
        """A server that cannot be restarted (remote): its strategy defaults to 'reload'."""
        if isinstance(data, Mapping) and "strategy" not in data and not getattr(
                MODES.get(str(data.get("mode"))), "restarts", True):
            return {**data, "strategy": "reload"}
        return data

    @model_validator(mode="after")
    def _cross(self) -> ServerSection:
        items: list[tuple[str, str]] = []
        mode = MODES[self.mode]
        for key, what in mode.requires:
            if not getattr(self, key):
                items.append((key, f"required when server.mode is {self.mode!r} ({what})"))
        if not mode.restarts and self.strategy != "reload":
            items.append(("strategy", f"must be 'reload' when server.mode is {self.mode!r} (a "
                                      f"{self.mode} server cannot be restarted), but got "
                                      f"{show(self.strategy)}"))
        items.extend(section_problems(mode.restarts, self.mode, self.options))
        ports = {"http_port": self.http_port, "grpc_port": self.grpc_port,
                 "metrics_port": self.metrics_port}
        seen: dict[int, str] = {}
        for key, port in ports.items():
            if port is not None and port in seen:
                items.append((key, f"must differ from server.{seen[port]}, but both are {port}"))
            elif port is not None:
                seen[port] = key
        if items:
            raise Problems(items)
        return self


class ConcurrencyRange(SpecModel):
    """``{start: 1, stop: 64}``: start, doubling while <= stop (1, 2, 4, ..., 64)."""

    start: PosInt = 1
    stop: PosInt

    @model_validator(mode="after")
    def _order(self) -> ConcurrencyRange:
        if self.start > self.stop:
            raise problem(f"`start <= stop` must hold, but got (start={self.start}, "
                          f"stop={self.stop})")
        return self

    def levels(self) -> list[int]:
        out, level = [], self.start
        while level <= self.stop:
            out.append(level)
            level *= 2
        return out


def _list_or_range(value: object) -> str:
    return "@range" if isinstance(value, Mapping | BaseModel) else "@list"


def _as_list(value: object) -> object:
    """A single scalar stands for a one-element list (a pinned value)."""
    return value if isinstance(value, list | Mapping | BaseModel) else [value]


Concurrency = Annotated[
    Union[  # noqa: UP007 - the tagged members read better this way
        Annotated[list[PosInt], Field(min_length=1), Tag("@list")],
        Annotated[ConcurrencyRange, Tag("@range")],
    ],
    Discriminator(_list_or_range),
    BeforeValidator(_as_list),
]


def _tag(loc: object) -> bool:
    """A part of a pydantic error location that names a validator, not a field."""
    return isinstance(loc, str) and (loc.startswith("@") or "[" in loc)


class LoadSection(ClientTransports):
    """How each configuration is measured: the concurrency sweep and its stability windows."""

    concurrency: Concurrency = Field(default_factory=lambda: list(DEFAULT_CONCURRENCY))
    request_rate: Annotated[list[PosFloat], Field(min_length=1)] | None = None
    arrival: Literal["constant", "poisson"] = "constant"
    window_ms: PosInt = 1000
    window_requests: PosInt | None = None
    stability_pct: Annotated[float, Field(gt=0, le=100)] = 10.0
    max_tries: PosInt = 10
    warmup_requests: Annotated[int, Field(ge=0)] = 20
    input_data: Annotated[Path | None, Field(strict=False)] = None
    repeat: RepeatSection | None = None  # repeated inputs (spec/load_repeat.py)
    batch_size: PosInt = 1
    protocol: Literal["grpc", "http"] = "grpc"
    processes: PosInt = 1
    max_error_pct: Annotated[float, Field(ge=0, le=100)] = 1.0
    request_timeout_s: PosFloat = 10.0
    stream: StreamSection = Field(default_factory=StreamSection)  # spec/streaming.py
    #: several independent models: each one's changes to this load (docs/pipelines.md)
    models: dict[str, dict[str, object]] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _per_model(self, info: ValidationInfo) -> LoadSection:
        """Each ``models.<name>`` entry must make a valid load with this one; its input file
        is resolved here, so :meth:`for_model` needs no context."""
        items: list[tuple[str, str]] = []
        for name, override in self.models.items():
            if "models" in override:
                items.append((f"models.{name}.models", "cannot be nested"))
                continue
            try:
                one = LoadSection.model_validate({**self._base(), **override},
                                                 context=info.context)
            except ValidationError as exc:
                items.extend((".".join(["models", name, *(str(x) for x in e["loc"]
                                                              if not _tag(x))]), e["msg"])
                             for e in exc.errors())
                continue
            if "input_data" in override and one.input_data is not None:
                override["input_data"] = str(one.input_data)
        if items:
            raise Problems(items)
        return self

    def _base(self) -> dict[str, object]:
        return self.model_dump(exclude={"models"}, exclude_unset=True)

    def for_model(self, name: str) -> LoadSection:
        """The load of model ``name`` among several: this one with its ``models.<name>``
        changes (a changed key replaces the whole value, ``stream`` included)."""
        override = self.models.get(name)
        if not override:
            return self.model_copy(update={"models": {}})
        return LoadSection.model_validate({**self._base(), **override})

    @field_validator("input_data")
    @classmethod
    def _input(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        value = resolve_path(value, info)
        if value is not None and value.suffix not in (".json", ".npz"):
            raise problem(f"must be a .json or .npz file, but got {value}")
        if value is not None and not value.is_file():
            raise problem(f"file not found: {value}")
        return value

    def concurrency_levels(self) -> list[int]:
        """The concurrency levels to sweep, ascending and without repeats."""
        if isinstance(self.concurrency, ConcurrencyRange):
            return self.concurrency.levels()
        return sorted(set(self.concurrency))


class Bound(SpecModel):
    """A constraint on one metric: ``{max: 10}``, ``{min: 100}`` or both."""

    max: float | None = None
    min: float | None = None

    @model_validator(mode="after")
    def _some(self) -> Bound:
        if self.max is None and self.min is None:
            raise problem("needs `max` or `min` (or both), e.g. {max: 10}")
        if self.max is not None and self.min is not None and self.min > self.max:
            raise problem(f"`min <= max` must hold, but got (min={self.min:g}, max={self.max:g})")
        return self


class Range(SpecModel):
    """A numeric search range: ``{low: 1, high: 64, step: 1, log: false}``."""

    low: Annotated[int | float, BeforeValidator(parse_number)]
    high: Annotated[int | float, BeforeValidator(parse_number)]
    step: Annotated[int | float | None, BeforeValidator(parse_number)] = None
    log: bool = False

    @model_validator(mode="after")
    def _valid(self) -> Range:
        check_range(self.low, self.high, self.step, self.log)
        return self

    @property
    def is_int(self) -> bool:
        """True when low, high and step are all integers (an integer range)."""
        return all(isinstance(v, int) for v in (self.low, self.high, self.step)
                   if v is not None)


SpaceValue = Annotated[
    Union[  # noqa: UP007
        Annotated[list[Scalar], Field(min_length=1), BeforeValidator(check_space_value_shape),
                  Tag("@list")],
        Annotated[Range, Tag("@range")],
    ],
    Discriminator(_list_or_range),
    BeforeValidator(_as_list),
]
SpaceKey = Annotated[str, AfterValidator(check_knob)]
Space: TypeAlias = dict[str, list[Scalar] | Range]


class SearchSection(SpecModel):
    """How configurations are chosen: the Optuna sampler, the budget and the search space."""

    sampler: SamplerName = "tpe"
    n_trials: PosInt = 20
    timeout_s: PosFloat | None = None
    seed: Annotated[int, Field(ge=0)] | None = None
    patience: PosInt | None = None
    study_name: Annotated[str, Field(min_length=1)] | None = None
    storage: str | None = None
    space: dict[SpaceKey, SpaceValue] = Field(default_factory=dict)
    # "guided": each trial's sweep starts at the best feasible trial's level (before there is
    # one, at Model Analyzer's concurrency formula) and walks from there
    # (tracker/search/sweep_plan.py); "full": every level from the lowest up, with the
    # sweep's stop rules
    sweep: Literal["guided", "full"] = "guided"

    @field_validator("storage")
    @classmethod
    def _storage(cls, value: str | None) -> str | None:
        if value is not None and "://" not in value:
            raise problem("must be a database URL such as 'sqlite:///optuna.db' or "
                          f"'postgresql://user@host/db', but got {show(value)}")
        return value

    @model_validator(mode="after")
    def _space(self) -> SearchSection:
        items: list[tuple[str, str]] = []
        for key, value in self.space.items():
            path = knob_path(key)
            field = server_field(key) if server_knob(key) else config_field(path)
            found = knob_value_problems(path, field, value)
            items.extend((join_path(f"space.{key}", sub), msg) for sub, msg in found)
        if SAMPLERS[self.sampler].finite_space:
            for key, value in self.space.items():
                if isinstance(value, Range) and not value.is_int and value.step is None:
                    items.append(("sampler", f"{self.sampler!r} needs a finite space, but "
                                             f"search.space."
                                             f"{key} is a continuous range; give it a `step` "
                                             "or list its values"))
        if items:
            raise Problems(items)
        return self

    def resolved_storage(self, tracking_uri: str | None = None) -> str:
        """``storage``; when it is not set, ``optuna.db`` beside the MLflow sqlite database
        (``tracking_uri``) or else in the current working directory, as an absolute URL."""
        if self.storage:
            return self.storage
        prefix, cwd = "sqlite:///", Path.cwd()
        if tracking_uri and tracking_uri.startswith(prefix) and ":memory:" not in tracking_uri:
            db = Path(tracking_uri[len(prefix):])
            return prefix + str((db if db.is_absolute() else cwd / db).parent / "optuna.db")
        return prefix + str(cwd / "optuna.db")


class MlflowSection(SpecModel):
    """Where results are tracked and which registered model receives the winner."""

    tracking_uri: str | None = None
    experiment: Annotated[str, Field(min_length=1)] | None = None
    registered_model: Annotated[str, Field(min_length=1)] | None = None

    def resolved_tracking_uri(self) -> str:
        """``tracking_uri``, else ``$MLFLOW_TRACKING_URI``, else ``sqlite:///mlflow.db``."""
        return self.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or "sqlite:///mlflow.db"




class ConfirmSection(SpecModel):
    """The confirmation after the search: the best ``top_k`` configurations and the default
    re-measured in interleaved rounds (docs/tuning.md, "Confirmation")."""

    enabled: bool = True
    top_k: PosInt = 3
    rounds: PosInt = 10                 # the most rounds; they stop once the verdict is decided
    min_rounds: PosInt = 3
    tie_margin_pct: Annotated[float, Field(gt=0, lt=100)] = 5.0  # "equivalent" within it
    budget_s: PosFloat | None = None    # measuring time of one confirmation; None: a
                                        # third of the search's (a quarter of the whole)
    design: Literal["auto", "paired", "rounds"] = "auto"  # auto: paired where it can hold

    @model_validator(mode="after")
    def _rounds(self) -> ConfirmSection:
        if self.min_rounds > self.rounds:
            raise Problems([("min_rounds", f"`min_rounds <= rounds` must hold, but got "
                                           f"(min_rounds={self.min_rounds}, "
                                           f"rounds={self.rounds})")])
        return self
