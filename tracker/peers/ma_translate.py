"""Model Analyzer's ``profile`` options (tracker/peers/ma_options.py) as study specs.

:func:`translate` turns the options into a :class:`Plan`: where Model Analyzer's outputs go
(:class:`Layout`) and one study spec per study, as a mapping that ``tracker tune`` reads. The
models are profiled one study each, in turn, as Model Analyzer profiles them, or in one study
together with ``run_config_profile_models_concurrently_enable``.

The search space is Model Analyzer's:

- automatic (no ``model_config_parameters``): ``instance_group.count`` from
  ``run_config_search_min_instance_count`` to ``..._max_...``; for a model that batches,
  ``max_batch_size`` in powers of two from ``..._min_model_batch_size`` to ``..._max_...`` and
  dynamic batching on; ``instance_group.kind: KIND_CPU`` with ``cpu_only``;
- manual: each ``model_config_parameters`` field a knob, a list a sweep, a value pinned.

``brute`` is the grid over that space (every configuration, the default first, each swept over
every concurrency level up to the stop rules); ``quick`` and
``optuna`` are TPE over it with Model Analyzer's optuna budget (a share of the space between
``min_``/``max_percentage_of_search_space``, bounded by ``optuna_min_trials`` and
``optuna_max_trials``). Ensemble and BLS models use TPE, as Model Analyzer uses quick for them.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tracker.peers.ma_options import BY_KEY, FIELD_HEADERS, MODEL_KEYS, PeerOptionError
from tracker.spec import METRIC_BETTER, METRICS
from tracker.triton import model_config

Spec = dict[str, object]


@dataclass(frozen=True)
class Layout:
    """Where Model Analyzer's outputs are written, and what it writes."""

    output_repository: Path
    override: bool
    export: Path
    checkpoints: Path
    csv_names: dict[str, str]            # inference, gpu, server -> file name
    fields: dict[str, list[str] | None]  # inference, gpu, server -> columns (None: default)
    summary: bool = True
    detailed: bool = True
    top: int = 3


@dataclass(frozen=True)
class StudyPlan:
    """One study: the models it profiles and its spec."""

    name: str
    models: tuple[str, ...]
    sources: dict[str, Path]             # model -> its folder in the model repository
    spec: Spec


@dataclass(frozen=True)
class Plan:
    layout: Layout
    studies: tuple[StudyPlan, ...]
    notes: tuple[str, ...] = field(default=())


def _opt(options: Mapping[str, object], key: str) -> object:
    return options[key] if key in options else BY_KEY[key].default


def _names(value: object, what: str) -> list[str]:
    """A comma string or a list of names."""
    if value is None or value == "":
        return []
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    raise PeerOptionError(f"{what} must be names separated by commas or a list, but got "
                          f"{value!r}")


def _numbers(value: object, what: str, *, integer: bool = True) -> list[float] | None:
    """A list, a comma string, one number or {start, stop, step} (Model Analyzer's range)."""
    if value is None:
        return None
    if isinstance(value, dict):
        if not set(value) <= {"start", "stop", "step"} or "stop" not in value:
            raise PeerOptionError(f"{what} as a range takes start, stop and step, but got "
                                  f"{value!r}")
        start, stop = value.get("start", 1), value["stop"]
        step = value.get("step", 1)
        if not all(isinstance(v, int) for v in (start, stop, step)) or step < 1:
            raise PeerOptionError(f"{what}: start, stop and step must be whole numbers, step "
                                  f"at least 1, but got {value!r}")
        return [float(v) for v in range(int(start), int(stop) + 1, int(step))]
    parts: list[object] = [*value.split(",")] if isinstance(value, str) else (
        list(value) if isinstance(value, list) else [value])
    out = []
    for part in parts:
        try:
            number = float(str(part).strip())
        except ValueError:
            raise PeerOptionError(f"{what} must be numbers, but got {value!r}") from None
        if (integer and not number.is_integer()) or number <= 0:
            raise PeerOptionError(f"{what} must be {'whole ' if integer else ''}numbers "
                                  f"above 0, but got {value!r}")
        out.append(number)
    return out


def _doubling(low: int, high: int) -> list[int]:
    values, value = [], max(1, low)
    while value <= high:
        values.append(value)
        value *= 2
    return values


def _model_config(folder: Path) -> model_config.ModelConfig | None:
    path = folder / "config.pbtxt"
    return model_config.load(path) if path.is_file() else None


# ---- the search space ----------------------------------------------------------------------

def _automatic(options: Mapping[str, object], cfg: model_config.ModelConfig | None,
               cpu_only: bool) -> dict[str, object]:
    low = int(_int(options, "run_config_search_min_instance_count"))
    high = int(_int(options, "run_config_search_max_instance_count"))
    if low > high:
        raise PeerOptionError(f"run_config_search_min_instance_count ({low}) is above "
                              f"run_config_search_max_instance_count ({high})")
    space: dict[str, object] = {"instance_group.count": list(range(low, high + 1))}
    if cpu_only:
        space["instance_group.kind"] = "KIND_CPU"
    if cfg is not None and cfg.max_batch_size > 0:
        sizes = _doubling(int(_int(options, "run_config_search_min_model_batch_size")),
                          int(_int(options, "run_config_search_max_model_batch_size")))
        if not sizes:
            raise PeerOptionError("run_config_search_min_model_batch_size is above "
                                  "run_config_search_max_model_batch_size")
        space["max_batch_size"] = sizes
        space["dynamic_batching.max_queue_delay_microseconds"] = 0   # dynamic batching on
    return space


def _int(options: Mapping[str, object], key: str) -> int:
    value = _opt(options, key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise PeerOptionError(f"{BY_KEY[key].flag or key} must be a whole number, but got "
                              f"{value!r}")
    return value


def _manual(parameters: Mapping[str, object], prefix: str = "") -> dict[str, object]:
    """model_config_parameters as knobs: a dotted path each, a list a sweep."""
    space: dict[str, object] = {}
    for key, value in parameters.items():
        path = f"{prefix}{key}"
        if key == "instance_group" and isinstance(value, list):
            if len(value) != 1 or not isinstance(value[0], dict):
                raise PeerOptionError(
                    f"model_config_parameters {path}: {value!r} sweeps or lists several "
                    "instance groups; the tracker searches one group: give its count and "
                    "kind as lists, e.g. [{kind: KIND_CPU, count: [1, 2]}]")
            space.update(_manual(value[0], f"{path}."))
        elif key == "parameters" and isinstance(value, dict):
            for name, entry in value.items():
                text = entry.get("string_value") if isinstance(entry, dict) else entry
                space[f"{path}.{name}"] = text
        elif isinstance(value, dict):
            inner = _manual(value, f"{path}.")
            space.update(inner or {f"{path}.max_queue_delay_microseconds": 0}
                         if key == "dynamic_batching" else inner)
        elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            raise PeerOptionError(f"model_config_parameters {path}: a list of messages "
                                  "cannot be searched; give one")
        else:
            space[path] = value
    return space


def _size(space: Mapping[str, object]) -> int:
    return math.prod(len(v) if isinstance(v, list) else 1 for v in space.values())


def _budget(options: Mapping[str, object], size: int) -> int:
    """Model Analyzer's optuna trial count for a space of ``size`` configurations."""
    share = float(_opt(options, "max_percentage_of_search_space"))  # type: ignore[arg-type]
    least = _int(options, "optuna_min_trials")
    most = _int(options, "optuna_max_trials")
    return min(size, max(least, min(most, math.ceil(size * share / 100))))


# ---- one study ------------------------------------------------------------------------------

def _objectives(value: object, where: str) -> dict[str, str]:
    names = list(value) if isinstance(value, (dict, list)) else [value]
    if len(names) != 1:
        raise PeerOptionError(
            f"{where}: objectives {value!r}: Model Analyzer folds several weighted objectives "
            "into one score; the tracker optimises one objective (or a Pareto front of two in "
            "its own spec): give one")
    name = str(names[0])
    if name not in METRICS:
        raise PeerOptionError(f"{where}: objective {name!r} is not a metric the tracker "
                              f"measures; known: {', '.join(METRICS)}")
    return {name: METRIC_BETTER[name]}


def _constraints(options: Mapping[str, object], model: Mapping[str, object]) -> Spec:
    raw = model.get("constraints", options.get("constraints")) or {}
    if not isinstance(raw, dict):
        raise PeerOptionError(f"constraints must be a mapping of metric to {{min, max}}, but "
                              f"got {raw!r}")
    out: Spec = {str(k): v for k, v in raw.items()}
    if options.get("latency_budget") is not None:
        out["perf_latency_p99"] = {"max": options["latency_budget"]}
    if options.get("min_throughput") is not None:
        out["perf_throughput"] = {"min": options["min_throughput"]}
    return out


_PA_FLAGS = {"measurement-interval": "window_ms", "measurement-request-count":
             "window_requests", "stability-percentage": "stability_pct",
             "max-trials": "max_tries", "input-data": "input_data",
             "request-distribution": "arrival", "sequence-length": "sequence"}


def _pa_flags(flags: object) -> Spec:
    """perf_analyzer_flags that change what is measured, as ``load`` fields."""
    if not isinstance(flags, dict):
        raise PeerOptionError(f"perf_analyzer_flags must be a mapping, but got {flags!r}")
    load: Spec = {}
    for key, value in flags.items():
        if key == "measurement-mode":
            if value not in ("time_windows", "count_windows"):
                raise PeerOptionError(f"perf_analyzer_flags measurement-mode: {value!r}")
            if value == "count_windows":
                load.setdefault("window_requests", 50)
        elif key == "streaming":
            load["stream"] = {"enabled": bool(value)}
        elif key == "sequence-length":
            load["sequence"] = {"length": value}
        elif key == "input-data" and value in ("zero", "random"):
            load["input_fill"] = value
        elif key == "input-data":      # relative to the working directory, as Model Analyzer
            load["input_data"] = str(Path(str(value)).expanduser().absolute())
        elif key in _PA_FLAGS:
            load[_PA_FLAGS[key]] = value
        else:
            raise PeerOptionError(
                f"perf_analyzer_flags {key}: not honoured here; the flags that are: "
                f"measurement-mode, {', '.join(_PA_FLAGS)}, streaming")
    return load


def option_path(spec_path: str) -> str:
    """The Model Analyzer option a translated spec's field path came from, where it is not
    the same path (``load.window_ms`` -> ``perf_analyzer_flags measurement-interval``)."""
    section, _, field_name = spec_path.partition(".")
    flag = next((k for k, f in _PA_FLAGS.items() if f == field_name.split(".")[0]), None)
    return f"perf_analyzer_flags {flag}" if section == "load" and flag else spec_path


def _load(options: Mapping[str, object], model: Mapping[str, object], automatic: bool) -> Spec:
    params = model.get("parameters") or {}
    if not isinstance(params, dict):
        raise PeerOptionError(f"parameters must be a mapping, but got {params!r}")
    load: Spec = {"protocol": str(_opt(options, "client_protocol"))}
    rate = _numbers(params.get("request_rate", options.get("request_rate")), "request_rate",
                    integer=False)
    levels = _numbers(params.get("concurrency", options.get("concurrency")), "concurrency")
    if rate:
        load["request_rate"] = rate
    elif levels:
        load["concurrency"] = [int(v) for v in levels]
    elif automatic:
        load["concurrency"] = {"start": _int(options, "run_config_search_min_concurrency"),
                               "stop": _int(options, "run_config_search_max_concurrency")}
    else:
        load["concurrency"] = [1]
    batches = _numbers(params.get("batch_sizes", _opt(options, "batch_sizes")), "batch_sizes")
    if batches and len(batches) > 1:
        raise PeerOptionError(f"batch_sizes {batches!r}: the tracker measures one client batch "
                              "size per study; run one study for each")
    if batches:
        load["batch_size"] = int(batches[0])
    flags = {**_dict(options.get("perf_analyzer_flags")),
             **_dict(model.get("perf_analyzer_flags"))}
    load.update(_pa_flags(flags))
    return load


def _dict(value: object) -> dict[str, object]:
    return dict(value) if isinstance(value, dict) else {}


def _server(options: Mapping[str, object], model: Mapping[str, object]) -> Spec:
    mode = str(_opt(options, "triton_launch_mode"))
    if mode == "c_api":
        raise PeerOptionError("triton_launch_mode c_api cannot be honoured: it runs Triton in "
                              "Model Analyzer's own process; the tracker serves each trial "
                              "from a tritonserver process: use local (the embedded one), "
                              "docker or remote")
    if mode not in ("local", "docker", "remote"):
        raise PeerOptionError(f"triton_launch_mode must be local, docker, remote or c_api, "
                              f"but got {mode!r}")
    server: Spec = {"mode": mode}
    endpoints = {key: options[key] for key in ("triton_http_endpoint", "triton_grpc_endpoint",
                                               "triton_metrics_url") if key in options}
    if mode == "remote":
        server["url"] = str(_opt(options, "triton_grpc_endpoint"))
        server["http_url"] = str(_opt(options, "triton_http_endpoint"))
        server["metrics_url"] = str(_opt(options, "triton_metrics_url"))
    else:
        for key, port in (("triton_http_endpoint", "http_port"),
                          ("triton_grpc_endpoint", "grpc_port"),
                          ("triton_metrics_url", "metrics_port")):
            if key in endpoints:
                server[port] = _port(str(endpoints[key]), key)
    if mode == "docker":
        server["image"] = str(_opt(options, "triton_docker_image"))
        if options.get("triton_docker_shm_size"):
            server["shm_size"] = str(options["triton_docker_shm_size"])
    if "triton_server_path" in options and mode == "local":
        server["binary"] = str(options["triton_server_path"])
    flags = {**_dict(options.get("triton_server_flags")),
             **_dict(model.get("triton_server_flags"))}
    if flags:
        server["options"] = {"flags": {"--" + str(k).replace("_", "-"): v
                                       for k, v in flags.items()}}
    gpus = _opt(options, "gpus")
    if gpus not in ("all", None, ["all"]):
        server["gpus"] = [int(v) for v in _numbers(gpus, "gpus") or []]
    return server


def _port(endpoint: str, key: str) -> int:
    tail = endpoint.rstrip("/").removesuffix("/metrics").rsplit(":", 1)[-1]
    if not tail.isdigit():
        raise PeerOptionError(f"{key} {endpoint!r} names no port")
    return int(tail)


def _profile_models(options: Mapping[str, object]) -> dict[str, dict[str, object]]:
    raw = options.get("profile_models")
    if raw is None:
        raise PeerOptionError("profile_models is required: name the models to profile, "
                              "e.g. --profile-models add,sub")
    if isinstance(raw, dict):
        models: dict[str, dict[str, object]] = {}
        for name, entry in raw.items():
            entry = entry or {}
            if not isinstance(entry, dict):
                raise PeerOptionError(f"profile_models {name}: must be a mapping, got {entry!r}")
            for key in entry:
                if key not in MODEL_KEYS:
                    raise PeerOptionError(f"profile_models {name}: {key} is not a per-model "
                                          f"option; those are {', '.join(MODEL_KEYS)}")
            if entry.get("triton_server_environment"):
                raise PeerOptionError(f"profile_models {name}: triton_server_environment "
                                      "cannot be honoured: the server's environment is the "
                                      "tracker's own")
            models[str(name)] = dict(entry)
        return models
    return {name: {} for name in _names(raw, "profile_models")}


# ---- the plan -------------------------------------------------------------------------------

def _layout(options: Mapping[str, object], cwd: Path) -> Layout:
    def where(key: str) -> Path:
        path = Path(str(_opt(options, key))).expanduser()
        return path if path.is_absolute() else cwd / path

    fields: dict[str, list[str] | None] = {}
    for kind in ("inference", "gpu", "server"):
        value = options.get(f"{kind}_output_fields")
        fields[kind] = None if value is None else _names(value, f"{kind}_output_fields")
        unknown = [f for f in fields[kind] or [] if f not in FIELD_HEADERS]
        if unknown:
            raise PeerOptionError(f"{kind}_output_fields: {', '.join(unknown)} not measured "
                                  f"here; the fields are {', '.join(FIELD_HEADERS)}")
    top = _int(options, "num_configs_per_model")
    return Layout(
        output_repository=where("output_model_repository_path"),
        override=bool(_opt(options, "override_output_model_repository")),
        export=where("export_path"), checkpoints=where("checkpoint_directory"),
        csv_names={"inference": str(_opt(options, "filename_model_inference")),
                   "gpu": str(_opt(options, "filename_model_gpu")),
                   "server": str(_opt(options, "filename_server_only"))},
        fields=fields, summary=not _opt(options, "skip_summary_reports"),
        detailed=not _opt(options, "skip_detailed_reports"), top=max(1, top))


def _pipeline(cfg: model_config.ModelConfig | None, name: str,
              options: Mapping[str, object]) -> list[str]:
    """The composing models of an ensemble (its steps) or a BLS model (bls_composing_models)."""
    if cfg is not None and cfg.platform == "ensemble":
        return list(dict.fromkeys(step.model_name for step in cfg.ensemble_scheduling.step))
    return _names(_opt(options, "bls_composing_models"), "bls_composing_models")


def _space(options: Mapping[str, object], repo: Path, name: str, entry: Mapping[str, object],
           composing: Sequence[str], prefix: bool) -> dict[str, object]:
    """The search space of one model (and its composing models), Model Analyzer's."""
    cpu_all = bool(entry.get("cpu_only", _opt(options, "cpu_only")))
    cpu_composing = set(_names(_opt(options, "cpu_only_composing_models"),
                               "cpu_only_composing_models"))
    manual = entry.get("model_config_parameters")
    searched = bool(_opt(options, "run_config_search_disable"))
    space: dict[str, object] = {}
    cfg = _model_config(repo / name)
    own = cfg is None or cfg.platform != "ensemble"   # an ensemble has no instances
    tuned = [name] if own else []
    tuned += list(composing)
    for model in tuned:
        mine: dict[str, object]
        if model == name and isinstance(manual, dict):
            mine = _manual(manual)
        elif searched:
            mine = {"instance_group.kind": "KIND_CPU"} if (
                cpu_all or model in cpu_composing) else {}
        else:
            mine = _automatic(options, _model_config(repo / model),
                              cpu_all or model in cpu_composing)
        for key, value in mine.items():
            space[f"{model}/{key}" if prefix else key] = value
    return {key: value if isinstance(value, list) else [value]
            for key, value in space.items()}


def _search(options: Mapping[str, object], space: Mapping[str, object], pipeline: bool,
            checkpoints: Path, study: str) -> Spec:
    mode = str(_opt(options, "run_config_search_mode"))
    if mode not in ("brute", "quick", "optuna"):
        raise PeerOptionError(f"run_config_search_mode must be brute, quick or optuna, but "
                              f"got {mode!r}")
    size = _size(space)
    grid = mode == "brute" and not pipeline
    search: Spec = {"sampler": "grid" if grid else "tpe", "space": dict(space),
                    "storage": f"sqlite:///{checkpoints / 'optuna.db'}",
                    "study_name": study, "seed": 0,
                    "n_trials": size + 1 if grid or size <= 1 else _budget(options, size) + 1}
    if mode == "brute":
        search["sweep"] = "full"    # every concurrency level of each configuration, as brute
    if _opt(options, "early_exit_enable"):
        search["patience"] = _int(options, "optuna_early_exit_threshold")
    return search


def _study(options: Mapping[str, object], layout: Layout, repo: Path,
           models: dict[str, dict[str, object]], cwd: Path) -> StudyPlan:
    names = list(models)
    first = models[names[0]]
    where = f"profile_models {names[0]}"
    sources: dict[str, Path] = {}
    composing: dict[str, list[str]] = {}
    for name in names:
        folder = repo / name
        if not folder.is_dir():
            held = sorted(p.name for p in repo.iterdir() if p.is_dir()) if repo.is_dir() else []
            raise PeerOptionError(f"profile_models {name}: no folder {folder} in the model "
                                  f"repository (it holds: {', '.join(held) or 'nothing'})")
        sources[name] = folder
        composing[name] = _pipeline(_model_config(folder), name, options)
        for part in composing[name]:
            sources.setdefault(part, repo / part)
    pipeline = len(names) > 1 or any(composing.values())
    space: dict[str, object] = {}
    for name in names:
        space.update(_space(options, repo, name, models[name], composing[name], pipeline))
    study = "+".join(names)
    model: Spec = {"name": names[0] if len(names) == 1 else names,
                   "path": str(repo if pipeline else sources[names[0]])}
    bls = [m for n in names for m in composing[n]
           if (_model_config(sources[n]) or model_config.ModelConfig()).platform != "ensemble"]
    if bls:
        model["composing"] = bls
    weights = {n: models[n]["weighting"] for n in names if "weighting" in models[n]}
    if len(names) > 1 and weights:
        model["weights"] = weights
    spec: Spec = {
        "model": model,
        "server": _server(options, first),
        "load": _load(options, first, not _opt(options, "run_config_search_disable")),
        "objectives": (_objectives(first.get("objectives", _opt(options, "objectives")), where)
                       if len(names) == 1 else {"weighted_gain": "maximize"}),
        "constraints": _constraints(options, first),
        "search": _search(options, space, pipeline, layout.checkpoints, study),
        "mlflow": {"tracking_uri": os.environ.get("MLFLOW_TRACKING_URI")
                   or f"sqlite:///{cwd}/mlflow.db", "experiment": study},
        "confirm": {"top_k": layout.top},
    }
    return StudyPlan(study, tuple(names), sources, spec)


def refuse_existing_output(layout: Layout) -> None:
    """Model Analyzer's refusal of an output folder that exists, unless it may be replaced
    (a new profile; the rerun of an interrupted one writes into the folder it began)."""
    if layout.output_repository.exists() and not layout.override:
        raise PeerOptionError(
            f'Path "{layout.output_repository}" already exists. Please set or modify '
            '"--output-model-repository-path" flag or remove this directory. You can also '
            'allow overriding of the output directory using the '
            '"--override-output-model-repository" flag.')


def translate(options: Mapping[str, object], cwd: Path) -> Plan:
    """The plan of a ``model-analyzer profile`` run: its outputs' layout and one study spec
    per study. PeerOptionError, naming the option, for what cannot be honoured; nothing has
    started."""
    repo_value = options.get("model_repository")
    if not repo_value:
        raise PeerOptionError("model_repository is required: the Triton model repository that "
                              "holds the models, e.g. --model-repository=/mnt/models")
    repo = Path(str(repo_value)).expanduser()
    repo = repo if repo.is_absolute() else cwd / repo
    if not repo.is_dir():
        raise PeerOptionError(f"model_repository {repo} is not a folder")
    layout = _layout(options, cwd)
    models = _profile_models(options)
    studies: tuple[StudyPlan, ...]
    if _opt(options, "run_config_profile_models_concurrently_enable") and len(models) > 1:
        studies = (_study(options, layout, repo, models, cwd),)
    else:
        studies = tuple(_study(options, layout, repo, {name: entry}, cwd)
                        for name, entry in models.items())
    return Plan(layout, studies)
