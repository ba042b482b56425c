"""Model Analyzer's ``profile`` options, one table, and the reader of its flags and YAML.

:data:`OPTIONS` holds every option of ``model-analyzer profile`` (as Model Analyzer's
configuration reference and its profile command define them): its YAML key, its command-line
flag, Model Analyzer's default, and what the tracker does with it. Each option is one of

- translated: it becomes a field of the study spec (``here`` says which);
- fixed: taken at Model Analyzer's default, whose behaviour the tracker has; any other value
  is refused, with ``why``;
- refused: never honoured here, with ``why``.

:func:`read_options` reads a command line (and the ``-f/--config-file`` YAML it names) into
one mapping, the command line winning, and refuses an unknown option (naming the closest
one), a refused option and a fixed option given another value, before anything starts.
The translation into a study spec is tracker/peers/ma_translate.py; the generated page
docs/migrate-model-analyzer.md lists this table.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import yaml

from tracker.errors import TrackerError
from tracker.spec.fields import closest

Kind = Literal["value", "flag", "yaml"]


class PeerOptionError(TrackerError):
    """An option of Model Analyzer or Perf Analyzer that the tracker cannot honour, or a value
    it cannot read: named, with the reason, before any server starts."""


@dataclass(frozen=True)
class MaOption:
    """One option of ``model-analyzer profile``."""

    key: str                        # the YAML key
    default: object                 # Model Analyzer's default (None: none)
    here: str                       # what the tracker does with it
    kind: Kind = "value"            # value: --flag VALUE; flag: store_true; yaml: YAML only
    short: str | None = None        # a one-letter flag
    why: str | None = None          # fixed: why only the default; refused: why never
    refused: bool = False           # True: refused whatever the value

    @property
    def flag(self) -> str | None:
        """The command-line form (None: YAML only)."""
        return None if self.kind == "yaml" else "--" + self.key.replace("_", "-")

    @property
    def mark(self) -> str:
        """refused; default only (another value is refused); translated (into the study
        spec's field named); honoured (as Model Analyzer does it)."""
        if self.refused:
            return "refused"
        if self.why:
            return "default only"
        return "translated" if SPEC_FIELD.search(self.here) else "honoured"

    @property
    def meaning(self) -> str:
        """What the tracker does with it, in one line (docs/migrate-model-analyzer.md)."""
        if self.refused:
            return f"refused: {self.why}"
        return f"only its default: {self.why}" if self.why else self.here


#: a study spec's field in what the tracker does with an option (then it is translated)
SPEC_FIELD = re.compile(r"`(<model>/)?(model|load|search|server|confirm|constraints|objectives"
                        r"|instance_group|max_batch_size)\b")

_NO_GPU_HERE = "the tracker measures with its own client and monitors"
_SAME = "the tracker's sweep has this behaviour"

OPTIONS: tuple[MaOption, ...] = (
    # the models
    MaOption("model_repository", None, "`model.path`: the model's folder in it (the "
             "repository itself for an ensemble or a BLS model)", short="m"),
    MaOption("profile_models", None, "`model.name`: one study per model, in turn (several in "
             "one study with run_config_profile_models_concurrently_enable)"),
    MaOption("bls_composing_models", [], "`model.composing`"),
    MaOption("cpu_only_composing_models", [], "`<model>/instance_group.kind: KIND_CPU` for "
             "each"),
    MaOption("ensemble_composing_models", [], "read from the ensemble's config (its steps)"),
    # the outputs
    MaOption("output_model_repository_path", "output_model_repository", "where the "
             "configurations are written, `<model>_config_default`, `<model>_config_<n>`"),
    MaOption("override_output_model_repository", False, "the output folder is emptied before "
             "it is written", kind="flag"),
    MaOption("checkpoint_directory", "checkpoints", "`search.storage`: the Optuna study "
             "lives there, so the same command resumes", short="s"),
    MaOption("export_path", ".", "where results/ and reports/ are written", short="e"),
    MaOption("filename_model_inference", "metrics-model-inference.csv", "the CSV's name"),
    MaOption("filename_model_gpu", "metrics-model-gpu.csv", "the CSV's name"),
    MaOption("filename_server_only", "metrics-server-only.csv", "the CSV's name"),
    MaOption("inference_output_fields", None, "the inference CSV's columns"),
    MaOption("gpu_output_fields", None, "the GPU CSV's columns"),
    MaOption("server_output_fields", None, "the server-only CSV's columns"),
    MaOption("num_configs_per_model", 3, "`confirm.top_k` and the summary's table"),
    MaOption("num_top_model_configs", 0, "", why="a ranking across models needs their joint "
             "score: profile them together (run_config_profile_models_concurrently_enable)"),
    MaOption("skip_summary_reports", False, "no summary report", kind="flag"),
    MaOption("skip_detailed_reports", False, "no detailed reports", kind="flag"),
    # the load
    MaOption("concurrency", None, "`load.concurrency`", short="c"),
    MaOption("request_rate", None, "`load.request_rate`"),
    MaOption("batch_sizes", [1], "`load.batch_size` (one value)", short="b"),
    # the search
    MaOption("run_config_search_mode", "brute", "brute: `search.sampler: grid` over Model "
             "Analyzer's space; quick and optuna: `tpe`"),
    MaOption("run_config_search_disable", False, "only the listed configurations (or the "
             "default) at the listed concurrencies (default [1])", kind="flag"),
    MaOption("run_config_search_min_concurrency", 1, "`load.concurrency.start`"),
    MaOption("run_config_search_max_concurrency", 1024, "`load.concurrency.stop`"),
    MaOption("run_config_search_min_model_batch_size", 1, "the least `max_batch_size`"),
    MaOption("run_config_search_max_model_batch_size", 128, "the largest `max_batch_size`"),
    MaOption("run_config_search_min_instance_count", 1, "the least `instance_group.count`"),
    MaOption("run_config_search_max_instance_count", 5, "the largest `instance_group.count`"),
    MaOption("run_config_search_min_request_rate", 16, "used with request_rate_search_enable "
             "only"),
    MaOption("run_config_search_max_request_rate", 8192, "used with request_rate_search_enable "
             "only"),
    MaOption("run_config_search_max_binary_search_steps", 5, "", why="the sweep walks down "
             "from a level that breaks a latency constraint, one level at a time"),
    MaOption("run_config_profile_models_concurrently_enable", False, "one study of the models "
             "together (`model.name` a list), judged by `weighted_gain`", kind="flag"),
    MaOption("request_rate_search_enable", False, "", why="the tracker searches request rates "
             "only as listed ones: give request_rate"),
    MaOption("concurrency_sweep_disable", False, "", why="each configuration is swept and "
             "judged at its best level; there is no second sweep to disable"),
    MaOption("early_exit_enable", False, "`search.patience`: optuna_early_exit_threshold",
             kind="flag"),
    MaOption("min_percentage_of_search_space", 5, "the least `search.n_trials`, as a share of "
             "the space"),
    MaOption("max_percentage_of_search_space", 10, "the most `search.n_trials`, as a share of "
             "the space"),
    MaOption("optuna_min_trials", 20, "the least `search.n_trials`"),
    MaOption("optuna_max_trials", 200, "the most `search.n_trials`"),
    MaOption("optuna_early_exit_threshold", 10, "`search.patience` with early_exit_enable"),
    MaOption("use_concurrency_formula", False, "", why="the guided sweep already starts at "
             "2 x max_batch_size x instances and climbs while throughput grows", kind="flag"),
    # the goal
    MaOption("objectives", {"perf_throughput": 10}, "`objectives`: one metric, its direction "
             "from the metric catalog", kind="yaml"),
    MaOption("constraints", None, "`constraints`, the same form", kind="yaml"),
    MaOption("latency_budget", None, "`constraints.perf_latency_p99.max`"),
    MaOption("min_throughput", None, "`constraints.perf_throughput.min`"),
    MaOption("weighting", None, "`model.weights` (models profiled together)", kind="yaml"),
    # Triton
    MaOption("triton_launch_mode", "local", "`server.mode` (local: the embedded tritonserver; "
             "c_api is refused)"),
    MaOption("triton_http_endpoint", "localhost:8000", "remote: `server.http_url`; local and "
             "docker: `server.http_port` when given"),
    MaOption("triton_grpc_endpoint", "localhost:8001", "remote: `server.url`; local and "
             "docker: `server.grpc_port` when given"),
    MaOption("triton_metrics_url", "http://localhost:8002/metrics", "remote: "
             "`server.metrics_url`; local and docker: `server.metrics_port` when given"),
    MaOption("client_protocol", "grpc", "`load.protocol`"),
    MaOption("client_max_retries", 50, "", why="the server gets `server.startup_timeout_s` "
             "to answer", short="r"),
    MaOption("triton_server_path", "tritonserver", "`server.binary` (default: the embedded "
             "tritonserver of the nvidia-pytriton wheel)"),
    MaOption("triton_install_path", "/opt/tritonserver", "", why="used by c_api mode only, "
             "which is refused"),
    MaOption("triton_docker_image", "nvcr.io/nvidia/tritonserver:26.04-py3", "`server.image`"),
    MaOption("triton_output_path", None, "", why="each trial's server log is an artifact of "
             "its MLflow run"),
    MaOption("triton_docker_mounts", None, "", why="the container mounts the trial's model "
             "repository only"),
    MaOption("triton_docker_shm_size", None, "`server.shm_size`"),
    MaOption("triton_server_flags", {}, "`server.options.flags`, each as `--name=value`, "
             "checked against the server's --help", kind="yaml"),
    MaOption("triton_server_environment", {}, "", why="the server's environment is the "
             "tracker's own", kind="yaml"),
    MaOption("triton_docker_labels", {}, "", why="the container's labels are the tracker's "
             "own (they find its containers)", kind="yaml"),
    MaOption("triton_docker_args", {}, "", why="the container is started by the tracker's "
             "docker launcher", kind="yaml"),
    # Perf Analyzer
    MaOption("perf_analyzer_path", "perf_analyzer", "", why="the built-in load generator "
             "measures"),
    MaOption("perf_analyzer_timeout", 600, "", why="each request times out after "
             "`load.request_timeout_s`"),
    MaOption("perf_analyzer_cpu_util", None, "", why=_NO_GPU_HERE),
    MaOption("perf_output", False, "", why="each level's figures are in the trial's run",
             kind="flag"),
    MaOption("perf_output_path", None, "", why="each trial's perf.csv is an artifact of its "
             "MLflow run"),
    MaOption("perf_analyzer_max_auto_adjusts", 10, "", why=_SAME),
    MaOption("perf_analyzer_flags", {}, "the flags listed under Perf Analyzer's flags that "
             "change what is measured", kind="yaml"),
    MaOption("genai_perf_flags", {}, "", why="LLM profiling (genai-perf) is not supported",
             kind="yaml", refused=True),
    # the rest
    MaOption("monitoring_interval", 1.0, "", why=_NO_GPU_HERE, short="i"),
    MaOption("duration_seconds", 3, "", why="a level lasts until its windows agree",
             short="d"),
    MaOption("collect_cpu_metrics", False, "the server's memory is always sampled",
             kind="flag"),
    MaOption("gpus", "all", "`server.gpus`"),
    MaOption("dcgm_disable", False, "NVML is read, not DCGM", kind="flag"),
    MaOption("always_report_gpu_metrics", False, "GPU figures are reported where measured",
             kind="flag"),
    MaOption("reload_model_disable", False, "", why="each trial serves its own configuration",
             kind="flag"),
    MaOption("model_type", "generic", "", why="LLM profiling (genai-perf) is not supported"),
    MaOption("cpu_only", False, "`instance_group.kind: KIND_CPU`", kind="yaml"),
    MaOption("config_file", None, "read as here", short="f"),
    MaOption("quiet", False, "fewer lines", kind="flag", short="q"),
    MaOption("verbose", False, "more lines", kind="flag", short="v"),
)

BY_KEY = {option.key: option for option in OPTIONS}
_BY_FLAG = {option.flag: option for option in OPTIONS if option.flag}
_BY_SHORT = {f"-{option.short}": option for option in OPTIONS if option.short}

#: the keys of one entry of a per-model ``profile_models`` mapping
MODEL_KEYS = ("objectives", "constraints", "parameters", "model_config_parameters",
              "perf_analyzer_flags", "triton_server_flags", "triton_server_environment",
              "cpu_only", "weighting")


def did_you_mean(name: str, known: Sequence[str]) -> str:
    """`` (did you mean X?)`` with the known option closest to ``name``, "" when none is."""
    close = closest(name, known)
    return f" (did you mean {close}?)" if close else ""


def _unknown(name: str, where: str) -> PeerOptionError:
    known = list(_BY_FLAG) if name.startswith("-") else list(BY_KEY)
    return PeerOptionError(f"{where}: {name} is not an option of model-analyzer profile"
                           f"{did_you_mean(name, known)}")


def _from_argv(argv: Sequence[str]) -> dict[str, object]:
    """The command line as {key: value}: ``--flag=value``, ``--flag value``, ``-x value``,
    store_true flags; a positional argument or an unknown flag is an error."""
    found: dict[str, object] = {}
    args = list(argv)
    while args:
        arg = args.pop(0)
        name, eq, value = arg.partition("=")
        option = _BY_FLAG.get(name) or _BY_SHORT.get(name)
        if option is None:
            if not arg.startswith("-"):
                raise PeerOptionError(f"{arg!r}: model-analyzer profile takes no positional "
                                      "argument; give the models with --profile-models")
            raise _unknown(name, "command line")
        if option.kind == "flag":
            if eq:
                raise PeerOptionError(f"{name} takes no value, but got {arg!r}")
            found[option.key] = True
            continue
        if not eq:
            if not args:
                raise PeerOptionError(f"{name} needs a value")
            value = args.pop(0)
        found[option.key] = yaml.safe_load(value) if option.key != "config_file" else value
    return found


def _from_yaml(path: Path) -> dict[str, object]:
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise PeerOptionError(f"the config file {path}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise PeerOptionError(f"the config file {path} is not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise PeerOptionError(f"the config file {path} must be a mapping of options, but holds "
                              f"a {type(data).__name__}")
    for key in data:
        if str(key) not in BY_KEY:
            raise _unknown(str(key), str(path))
    return {str(key): value for key, value in data.items()}


def _check_allowed(options: Mapping[str, object], where: Mapping[str, str]) -> None:
    for key, value in options.items():
        option = BY_KEY[key]
        if option.why is None:
            continue
        name = option.flag or key
        if option.refused or value != option.default:
            told = "" if option.refused else f" (only its default, {option.default!r})"
            raise PeerOptionError(f"{where.get(key, 'command line')}: {name} cannot be "
                                  f"honoured{told}: {option.why}")


def read_options(argv: Sequence[str]) -> tuple[dict[str, object], Path | None]:
    """The options of a ``model-analyzer profile`` command line and its config file, the
    command line winning; the config file's path (relative paths in it are read from the
    working directory, as Model Analyzer reads them). PeerOptionError names what cannot be
    honoured."""
    given = _from_argv(argv)
    config = given.pop("config_file", None)
    path = Path(str(config)) if config is not None else None
    from_file = _from_yaml(path) if path is not None else {}
    where = {key: str(path) for key in from_file} | {key: "command line" for key in given}
    options = {**from_file, **given}
    _check_allowed(options, where)
    return options, path


#: Model Analyzer's result-table columns: field -> header (result_table_manager.py)
FIELD_HEADERS = {
    "model_name": "Model", "batch_size": "Batch", "concurrency": "Concurrency",
    "request_rate": "Request Rate", "model_config_path": "Model Config Path",
    "instance_group": "Instance Group", "max_batch_size": "Max Batch Size",
    "satisfies_constraints": "Satisfies Constraints", "gpu_uuid": "GPU UUID",
    "perf_throughput": "Throughput (infer/sec)", "perf_latency_p99": "p99 Latency (ms)",
    "perf_latency_p90": "p90 Latency (ms)", "perf_latency_p95": "p95 Latency (ms)",
    "perf_latency_p50": "p50 Latency (ms)", "perf_latency_avg": "Avg Latency (ms)",
    "gpu_used_memory": "GPU Memory Usage (MB)", "gpu_utilization": "GPU Utilization (%)",
    "gpu_power_usage": "GPU Power Usage (W)", "cpu_used_ram": "RAM Usage (MB)",
    "perf_server_queue": "Server Queue time (ms)",
    "perf_server_compute_input": "Server Compute Input time (ms)",
    "perf_server_compute_infer": "Server Compute Infer time (ms)",
    "perf_server_compute_output": "Server Compute Output time (ms)",
}
#: the columns of each CSV by default (config_defaults.py)
INFERENCE_FIELDS = ("model_name", "batch_size", "concurrency", "model_config_path",
                    "instance_group", "max_batch_size", "satisfies_constraints",
                    "perf_throughput", "perf_latency_p99")
GPU_FIELDS = ("model_name", "gpu_uuid", "batch_size", "concurrency", "model_config_path",
              "instance_group", "satisfies_constraints", "gpu_used_memory", "gpu_utilization",
              "gpu_power_usage")
SERVER_FIELDS = ("model_name", "gpu_uuid", "gpu_used_memory", "gpu_utilization",
                 "gpu_power_usage")
