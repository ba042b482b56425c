"""The sections of the study spec (pydantic models); :mod:`tracker.spec` assembles them.

Every model forbids unknown keys and validates strictly (YAML's types as written: ``"8"`` is
not an integer). Validators raise :class:`~tracker.spec.messages.Problems`, which
:mod:`tracker.spec.messages` turns into lines naming the field path and the bad value."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal, TypeAlias, Union

from pydantic import (
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
from tracker.serving import ServingChoice
from tracker.spec.connection import TlsSection, check_headers
from tracker.spec.load_priorities import PriorityShares
from tracker.spec.load_repeat import RepeatSection
from tracker.spec.messages import Problems, problem, show
from tracker.spec.model_section import SpecModel, resolve_path
from tracker.spec.sequence import SequenceSection
from tracker.spec.server_options import ServerOptions, section_problems
from tracker.spec.shapes import ConcurrencyRange, PosFloat, PosInt, as_list, list_or_range
from tracker.spec.streaming import StreamSection
from tracker.spec.trace import TraceProblem, parse_trace

DEFAULT_CONCURRENCY: tuple[int, ...] = (1, 2, 4, 8, 16)


Port = Annotated[int, Field(ge=1, le=65535)]


def _gpus(value: object) -> object:
    if value is None or value == "all":
        return value
    if isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool)
                                       and v >= 0 for v in value):
        return value
    raise problem(f"must be 'all' or a list of GPU indices (integers >= 0), but got {show(value)}")


if TYPE_CHECKING:
    LaunchModeName: TypeAlias = str
else:  # the registered launch modes (tracker/launch_modes.py)
    LaunchModeName = Literal[NAMES]


class ServerSection(SpecModel):
    """Which Triton serves the trials and how a trial's config reaches it."""

    tls: TlsSection | None = None
    """TLS for every client of the server (gRPC; HTTP through a TLS proxy); None: plain."""
    headers: Annotated[dict[str, str], BeforeValidator(check_headers)] = Field(
        default_factory=dict)
    """Extra headers sent with every request (e.g. an auth token at a gateway)."""
    mode: LaunchModeName = "local"
    """local: a tritonserver here; docker: a container of `image`; remote: a server at `url`."""
    strategy: Literal["restart", "reload"] = "restart"
    """restart the server per trial, or reload the model with a new config (remote: reload)."""
    binary: Annotated[Path | None, Field(strict=False)] = None
    """local: the tritonserver binary (default: the nvidia-pytriton wheel's)."""
    image: str = "nvcr.io/nvidia/tritonserver:24.10-py3"
    """docker: the Triton image."""
    gpus: Annotated[list[int] | Literal["all"] | None, BeforeValidator(_gpus)] = None
    """local and docker: 'all' or a list of GPU indices the server may use."""
    shm_size: str = "1g"
    """docker: shared memory size, like '1g' or '512m'."""
    network: Literal["host", "bridge"] = "host"
    """docker: the container's network."""
    http_port: Port | None = None
    """local/docker: a fixed HTTP port instead of a free one."""
    grpc_port: Port | None = None
    """local/docker: a fixed gRPC port instead of a free one."""
    metrics_port: Port | None = None
    """local/docker: a fixed metrics port instead of a free one."""
    url: str | None = None
    """remote: the server's gRPC host:port (required for remote)."""
    http_url: str | None = None
    """remote: the server's HTTP endpoint, when you have it."""
    metrics_url: str | None = None
    """remote: the server's metrics URL, when you have it."""
    startup_timeout_s: PosFloat = 120.0
    """Seconds to wait for the server (and a loaded model) to be ready."""
    serving: ServingChoice = "auto"
    """How an ONNX model is served: onnxruntime, python (the shim), auto (native if there)."""
    ort_intra_op_threads: Annotated[int, Field(ge=0)] | None = None
    """onnxruntime's intra-op threads (0: its default); not with the same knob searched."""
    ort_inter_op_threads: Annotated[int, Field(ge=0)] | None = None
    """onnxruntime's inter-op threads (0: its default); not with the same knob searched."""
    options: ServerOptions = Field(default_factory=ServerOptions)
    """tritonserver options: cache, rate limiter, backend config, memory pools, other flags."""

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


Concurrency = Annotated[
    Union[  # noqa: UP007 - the tagged members read better this way
        Annotated[list[PosInt], Field(min_length=1), Tag("@list")],
        Annotated[ConcurrencyRange, Tag("@range")],
    ],
    Discriminator(list_or_range),
    BeforeValidator(as_list),
]


def _tag(loc: object) -> bool:
    """A part of a pydantic error location that names a validator, not a field."""
    return isinstance(loc, str) and (loc.startswith("@") or "[" in loc)


class LoadSection(SpecModel):
    """How each configuration is measured: the concurrency sweep and its stability windows."""

    shared_memory: Literal["none", "system"] = "none"
    """system: inputs and outputs in registered system shared memory (local mode only)."""
    perf_analyzer_flags: list[str] = Field(default_factory=list)
    """Extra perf_analyzer flags (with --perf-analyzer), checked against its --help."""
    concurrency: Concurrency = Field(default_factory=lambda: list(DEFAULT_CONCURRENCY))
    """The concurrency levels to sweep: a list, one number, or {start, stop}."""
    request_rate: Annotated[list[PosFloat], Field(min_length=1)] | None = None
    """Open-loop request rates (requests/s) to sweep instead of concurrency."""
    arrival: Literal["constant", "poisson"] = "constant"
    """With request_rate: constant or poisson inter-arrival times."""
    trace: Annotated[Path | None, Field(strict=False)] = None
    """A recorded schedule replayed open loop: gaps in us per line, or .jsonl timestamps (ms)."""
    capacity_tolerance_pct: Annotated[float, Field(gt=0, le=50)] = 5.0
    """objective perf_capacity: the search stops when its bracket is this close (percent)."""
    capacity_max_probes: Annotated[int, Field(ge=2, le=50)] = 8
    """objective perf_capacity: the most open-loop readings one configuration's search takes
    (a failed rate's second reading counts)."""
    window_ms: PosInt = 1000
    """Length of one measurement window, in milliseconds."""
    window_requests: PosInt | None = None
    """Count windows by requests instead of time."""
    stability_pct: Annotated[float, Field(gt=0, le=100)] = 10.0
    """Windows are stable when throughput and latency agree within this percent."""
    max_tries: PosInt = 10
    """Windows tried at one level before it is reported unstable."""
    warmup_requests: Annotated[int, Field(ge=0)] = 20
    """Requests sent and discarded before measuring."""
    input_data: Annotated[Path | None, Field(strict=False)] = None
    """A .json or .npz file of inputs to send (default: random data shaped after the config)."""
    input_fill: Literal["random", "zero"] = "random"
    """Without input_data: random inputs, or zero (perf_analyzer's --input-data zero)."""
    repeat: RepeatSection | None = None
    """A share of requests that repeat a few hot inputs (so a response cache can hit)."""
    priorities: PriorityShares | None = None
    """{LEVEL: SHARE}: the share of requests sent at each priority level (1: highest; sum 1)."""
    batch_size: PosInt = 1
    """The batch size of each request (above 1 the model must batch)."""
    protocol: Literal["grpc", "http"] = "grpc"
    """The client protocol."""
    processes: PosInt = 1
    """Client processes generating the load."""
    max_error_pct: Annotated[float, Field(ge=0, le=100)] = 1.0
    """A level with more failed requests than this percent fails the measurement."""
    request_timeout_s: PosFloat = 10.0
    """A request taking longer counts as failed."""
    stream: StreamSection = Field(default_factory=StreamSection)
    """How a streaming (decoupled) model is measured (docs/streaming.md)."""
    sequence: SequenceSection | None = None
    """A stateful model's sequences: lengths, seed, correlation IDs (docs/stateful.md)."""
    models: dict[str, dict[str, object]] = Field(default_factory=dict)
    """Several entry models: {model: {load key: value}}, each one's changes to this load."""

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

    @model_validator(mode="after")
    def _fill(self) -> LoadSection:
        """``input_fill: zero`` fills the inputs the tracker makes: not a data file's, and
        not the distinct requests ``repeat`` needs."""
        if self.input_fill == "zero" and self.input_data is not None:
            raise problem("zero fills the inputs made without input_data; give one of them",
                          "input_fill")
        if self.input_fill == "zero" and self.repeat is not None:
            raise problem("zero makes every request the same; repeat needs distinct ones",
                          "input_fill")
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

    @field_validator("trace")
    @classmethod
    def _trace(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        value = resolve_path(value, info)
        if value is not None:
            try:
                parse_trace(value)
            except TraceProblem as exc:
                raise problem(str(exc)) from None
        return value

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


class MlflowSection(SpecModel):
    """Where results are tracked and which registered model receives the winner."""

    tracking_uri: str | None = None
    """Where runs are logged (default: $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db)."""
    experiment: Annotated[str, Field(min_length=1)] | None = None
    """The experiment of the study's parent run (default: the model name)."""
    registered_model: Annotated[str, Field(min_length=1)] | None = None
    """The registered model that receives the winner (default: the model name)."""
    wait_s: Annotated[float, Field(ge=0, strict=False)] | None = None
    """Seconds to wait for a tracking server that does not answer (default:
    $TRACKER_MLFLOW_WAIT_S, else 300)."""

    def resolved_tracking_uri(self) -> str:
        """``tracking_uri``, else ``$MLFLOW_TRACKING_URI``, else ``sqlite:///mlflow.db``."""
        return self.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or "sqlite:///mlflow.db"




class ConfirmSection(SpecModel):
    """The confirmation after the search: the best ``top_k`` configurations and the default
    re-measured in interleaved rounds (docs/confirmation.md)."""

    enabled: bool = True
    """Confirm when the search stops (tracker confirm runs it on demand)."""
    top_k: PosInt = 3
    """Distinct feasible configurations re-measured besides the default, in rounds (the paired
    design confirms only the best)."""
    rounds: PosInt = 10
    """The most rounds (paired design: up to 3 x this many pairs); they stop as soon as the
    verdict is decided."""
    min_rounds: PosInt = 3
    """Rounds (paired design: pairs) before the confirmation may stop (min_rounds <= rounds)."""
    tie_margin_pct: Annotated[float, Field(gt=0, lt=100)] = 5.0
    """equivalent: no configuration beats the default by more than this percent."""
    budget_s: PosFloat | None = None
    """Measuring time of one confirmation (default: a third of the search's trials' time)."""
    design: Literal["auto", "paired", "rounds"] = "auto"
    """paired (best and default side by side in one server), rounds, or auto (paired if it can)."""

    @model_validator(mode="after")
    def _rounds(self) -> ConfirmSection:
        if self.min_rounds > self.rounds:
            raise Problems([("min_rounds", f"`min_rounds <= rounds` must hold, but got "
                                           f"(min_rounds={self.min_rounds}, "
                                           f"rounds={self.rounds})")])
        return self
