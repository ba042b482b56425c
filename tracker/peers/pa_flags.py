"""Perf Analyzer's command line, read with its meaning and defaults.

:func:`read_flags` reads the flags (``-i`` is HTTP, ``-p`` 5000 ms windows,
``--concurrency-range start:end:step``, PA's defaults where not given) into
:class:`PaOptions`, and refuses a flag the tracker does not honour, named, with the reason,
and an unknown one with the closest known flag, before anything starts; the options carry
the load section the flags describe and the range's levels. :data:`MEANING` says what the
tracker does with each flag (:func:`flag_rows`: the table on docs/migrate-model-analyzer.md).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

from tracker.peers.ma_options import PeerOptionError, did_you_mean
from tracker.spec.sections import LoadSection

#: flag -> option key, for flags that take a value; both spellings of each
_VALUE = {"-m": "model", "-x": "version", "-b": "batch", "-u": "url", "-i": "protocol",
          "-p": "measurement_interval", "--measurement-interval": "measurement_interval",
          "-f": "csv", "-l": "latency_threshold", "--latency-threshold": "latency_threshold",
          "-r": "max_trials", "--max-trials": "max_trials",
          "-s": "stability", "--stability-percentage": "stability",
          "--concurrency-range": "concurrency_range", "--request-rate-range": "rate_range",
          "--request-distribution": "distribution", "--measurement-mode": "measurement_mode",
          "--measurement-request-count": "request_count", "--percentile": "percentile",
          "--input-data": "input_data", "--service-kind": "service_kind",
          "--model-repository": "model_repository", "--shared-memory": "shared_memory",
          "--warmup-request-count": "warmup", "--metrics-url": "metrics_url",
          "--metrics-interval": "metrics_interval", "--max-threads": "max_threads"}
_FLAGS = {"-a": "async", "--async": "async", "--sync": "sync", "-v": "verbose",
          "--verbose-csv": "verbose_csv", "--collect-metrics": "collect_metrics"}
_REFUSED = {
    "--streaming": "a streaming model is measured by `tracker tune` with `load.stream`",
    "--sequence-length": "a stateful model is measured by `tracker tune` with `load.sequence`",
    "--shape": "a model with variable dims is measured by `tracker tune` with `load.input_data`",
    "-H": "headers go to `server.headers` of a `tracker tune` spec",
    "--binary-search": "the tracker sweeps levels in order",
    "--bls-composing-models": "a BLS model's steps are measured by `tracker tune` "
                              "(`model.composing`)",
    "--triton-server-directory": "the embedded Triton of the nvidia-pytriton wheel serves",
    "--profile-export-file": "every level's figures are in the MLflow run",
    "--request-count": "a level lasts until its windows agree",
    "--string-length": "string inputs are drawn as the config shapes them",
    "--output-shared-memory-size": "the outputs' regions are sized from the config",
}
_SERVICE_KINDS = ("triton", "triton_c_api")

#: option key -> what the tracker does with it (docs/migrate-model-analyzer.md's table)
MEANING = {
    "model": "the model measured (required)",
    "version": "refused: the server's latest version is measured",
    "batch": "`load.batch_size` (1)",
    "url": "the server's address (`localhost:8000`, with `-i grpc` `localhost:8001`)",
    "protocol": "`load.protocol`: http (the default, as in Perf Analyzer) or grpc",
    "measurement_interval": "`load.window_ms` (5000)",
    "csv": "Perf Analyzer's CSV, written there (also the run's `perf.csv`)",
    "latency_threshold": "the range stops after the first level above it (ms)",
    "max_trials": "`load.max_tries` (10)",
    "stability": "`load.stability_pct` (10)",
    "concurrency_range": "`load.concurrency`: every level of start:end:step (1)",
    "rate_range": "`load.request_rate`: every rate of start:end:step",
    "distribution": "`load.arrival`: constant or poisson",
    "measurement_mode": "time_windows, or count_windows (`load.window_requests`)",
    "request_count": "`load.window_requests` with count_windows (50)",
    "percentile": "the latency printed and stabilized on: p50, p90, p95 or p99",
    "input_data": "`load.input_data`: Perf Analyzer's JSON file (random by default)",
    "service_kind": "triton (a running server at `-u`) or triton_c_api (the embedded Triton "
                    "serves `--model-repository`)",
    "model_repository": "with `--service-kind triton_c_api`: the repository served",
    "shared_memory": "`load.shared_memory`: none or system",
    "warmup": "`load.warmup_requests`",
    "metrics_url": "accepted: the server's own figures come from its statistics",
    "metrics_interval": "accepted: monitors are sampled during the windows",
    "max_threads": "accepted: the load generator is asynchronous",
    "async": "accepted: requests are asynchronous", "sync": "accepted: as --async",
    "verbose": "accepted", "verbose_csv": "accepted: the CSV always has the verbose columns",
    "collect_metrics": "accepted: CPU and GPU figures are sampled where measured",
}


@dataclass(frozen=True)
class PaOptions:
    """Perf Analyzer's flags as the tracker reads them."""

    values: dict[str, str] = field(default_factory=dict)
    flags: frozenset[str] = frozenset()
    argv: tuple[str, ...] = ()
    levels: tuple[float, ...] = ()          # the range's levels, every one measured
    load: LoadSection | None = None         # the load section the flags describe

    def get(self, key: str, default: str = "") -> str:
        return self.values.get(key, default)


def read_flags(argv: Sequence[str]) -> PaOptions:
    """Perf Analyzer's command line; PeerOptionError for what cannot be honoured, before
    anything starts."""
    values: dict[str, str] = {}
    flags: set[str] = set()
    args = list(argv)
    while args:
        arg = args.pop(0)
        name, eq, value = arg.partition("=")
        if len(name) > 2 and not name.startswith("--") and name[:2] in _VALUE:
            name, value, eq = name[:2], name[2:], "="            # -mdensenet_onnx
        if name in _REFUSED:
            raise PeerOptionError(f"{name} cannot be honoured here: {_REFUSED[name]}")
        if name in _FLAGS:
            flags.add(_FLAGS[name])
            continue
        if name not in _VALUE:
            if not arg.startswith("-"):
                raise PeerOptionError(f"{arg!r}: perf_analyzer takes no positional argument; "
                                      "give the model with -m")
            raise PeerOptionError(f"{name} is not a flag of perf_analyzer"
                                  f"{did_you_mean(name, [*_VALUE, *_FLAGS, *_REFUSED])}")
        if not eq:
            if not args:
                raise PeerOptionError(f"{name} needs a value")
            value = args.pop(0)
        values[_VALUE[name]] = value
    options = PaOptions(values, frozenset(flags), tuple(argv))
    _check(options)
    levels = _levels(options)
    return dataclasses.replace(options, levels=tuple(levels), load=_load(options, levels))


def _check(o: PaOptions) -> None:
    if not o.get("model"):
        raise PeerOptionError("-m is required: the name of the model to measure")
    if o.get("version"):
        raise PeerOptionError("-x cannot be honoured here: the server's latest version is "
                              "measured")
    if o.get("protocol", "http") not in ("http", "grpc"):
        raise PeerOptionError(f"-i must be http or grpc, but got {o.get('protocol')!r}")
    kind = o.get("service_kind", "triton")
    if kind not in _SERVICE_KINDS:
        raise PeerOptionError(f"--service-kind {kind} cannot be honoured: the tracker "
                              f"measures Triton ({', '.join(_SERVICE_KINDS)})")
    if (kind == "triton_c_api") != bool(o.get("model_repository")):
        raise PeerOptionError("--service-kind triton_c_api and --model-repository go "
                              "together: the embedded Triton serves that repository")
    if o.get("shared_memory", "none") not in ("none", "system"):
        raise PeerOptionError(f"--shared-memory {o.get('shared_memory')} cannot be honoured: "
                              "none or system (CUDA shared memory needs a GPU client)")
    if "concurrency_range" in o.values and "rate_range" in o.values:
        raise PeerOptionError("--concurrency-range and --request-rate-range exclude each "
                              "other")
    percentile = o.get("percentile")
    if percentile and percentile not in ("50", "90", "95", "99"):
        raise PeerOptionError(f"--percentile {percentile}: the tracker reports p50, p90, p95 "
                              "and p99")


def _range(text: str, flag: str, *, integer: bool) -> list[float]:
    parts = text.split(":")
    try:
        numbers = [float(p) for p in parts]
    except ValueError:
        raise PeerOptionError(f"{flag} {text!r}: start:end:step, numbers") from None
    start = numbers[0]
    end = numbers[1] if len(numbers) > 1 else start
    step = numbers[2] if len(numbers) > 2 else 1.0
    if len(numbers) > 3 or start <= 0 or step <= 0 or end < start:
        if len(numbers) > 1 and end == 0:
            raise PeerOptionError(f"{flag} {text!r}: an end of 0 (until the latency "
                                  "threshold) needs -l; give an end")
        raise PeerOptionError(f"{flag} {text!r}: start:end:step with 0 < start <= end, "
                              "step > 0")
    if integer and not all(n.is_integer() for n in (start, end, step)):
        raise PeerOptionError(f"{flag} {text!r}: whole numbers")
    out, level = [], start
    while level <= end + 1e-9:
        out.append(level)
        level += step
    return out


def _levels(o: PaOptions) -> list[float]:
    if "rate_range" in o.values:
        return _range(o.get("rate_range"), "--request-rate-range", integer=False)
    return _range(o.get("concurrency_range", "1"), "--concurrency-range", integer=True)


def _load(o: PaOptions, levels: list[float]) -> LoadSection:
    """The load section Perf Analyzer's flags describe (its defaults where not given)."""
    fields: dict[str, object] = {
        "protocol": o.get("protocol", "http"),
        "batch_size": o.get("batch", "1"),
        "window_ms": o.get("measurement_interval", "5000"),
        "stability_pct": o.get("stability", "10"),
        "max_tries": o.get("max_trials", "10"),
        "shared_memory": o.get("shared_memory", "none"),
    }
    if o.get("measurement_mode") == "count_windows":
        fields["window_requests"] = o.get("request_count", "50")
    elif o.get("measurement_mode") not in ("", "time_windows"):
        raise PeerOptionError(f"--measurement-mode {o.get('measurement_mode')}: time_windows "
                              "or count_windows")
    if o.get("warmup"):
        fields["warmup_requests"] = o.get("warmup")
    if o.get("input_data") not in ("", "random"):
        fields["input_data"] = o.get("input_data")
    if "rate_range" in o.values:
        fields["request_rate"] = levels
        fields["arrival"] = o.get("distribution", "constant")
    else:
        fields["concurrency"] = [int(v) for v in levels]
    try:
        return LoadSection.model_validate(fields, strict=False)
    except ValueError as exc:
        raise PeerOptionError(f"perf_analyzer's flags do not make a load: {exc}") from None


def flag_rows() -> list[tuple[str, str]]:
    """(flags, what the tracker does) for every flag: docs/migrate-model-analyzer.md."""
    names: dict[str, list[str]] = {}
    for flag, key in [*_VALUE.items(), *_FLAGS.items()]:
        names.setdefault(key, []).append(f"`{flag}`")
    rows = [(" ".join(flags), MEANING[key]) for key, flags in names.items()]
    return rows + [(f"`{flag}`", f"refused: {why}") for flag, why in _REFUSED.items()]


__all__ = ["MEANING", "PaOptions", "flag_rows", "read_flags"]
