"""Perf Analyzer's command line, read with its meaning and defaults.

:func:`read_flags` reads the flags (``-i`` is HTTP, ``-p`` 5000 ms windows,
``--concurrency-range start:end:step``, PA's defaults where not given) into
:class:`PaOptions`, and refuses a flag the tracker does not honour, named, with the reason,
and an unknown one with the closest known flag, before anything starts; the options carry
the load section the flags describe and the range's levels. A bad value is refused in one
line naming the flag (the load's checks, worded as ``tracker check`` words a spec's).
:data:`MEANING` says what the tracker does with each flag (:func:`flag_rows`: the table on
docs/migrate-model-analyzer.md and ``tracker perf-analyzer --help``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from tracker.peers.ma_options import PeerOptionError, did_you_mean
from tracker.spec.messages import messages
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
          "--metrics-interval": "metrics_interval", "--max-threads": "max_threads",
          "--input-tensor-format": "input_format", "--output-tensor-format": "output_format",
          "--grpc-compression-algorithm": "compression",
          "--request-intervals": "request_intervals"}
#: value flags honoured at one value only (Perf Analyzer's default): key -> that value
_ONLY = {"input_format": "binary", "output_format": "binary", "compression": "none"}
#: flags that stand for a value flag's value: flag -> (key, value, what the tracker does)
_ALIASES = {"-z": ("input_data", "zero", "as `--input-data zero`: `load.input_fill`")}
_FLAGS = {"-a": "async", "--async": "async", "--sync": "sync", "-v": "verbose",
          "--verbose-csv": "verbose_csv", "--collect-metrics": "collect_metrics",
          "--binary-search": "binary_search"}
_REFUSED = {
    "--streaming": "a streaming model is measured by `tracker tune` with `load.stream`",
    "--sequence-length": "a stateful model is measured by `tracker tune` with `load.sequence`",
    "--shape": "a model with variable dims is measured by `tracker tune` with `load.input_data`",
    "-H": "headers go to `server.headers` of a `tracker tune` spec",
    "--bls-composing-models": "a BLS model's steps are measured by `tracker tune` "
                              "(`model.composing`)",
    "--triton-server-directory": "the embedded Triton of the nvidia-pytriton wheel serves",
    "--profile-export-file": "every level's figures are in the MLflow run",
    "--request-count": "a level lasts until its windows agree",
    "--string-length": "string inputs are drawn as the config shapes them",
    "--output-shared-memory-size": "the outputs' regions are sized from the config",
    "--model-signature-name": "it is for --service-kind tfserving, which is not measured",
    "--periodic-concurrency-range": "each level is measured steady, until its windows agree",
    "--request-period": "each level is measured steady, until its windows agree",
    "--request-parameter": "the load generator sends no request parameters",
    **dict.fromkeys(("--num-of-sequences", "--sequence-length-variation",
                     "--sequence-id-range", "--serial-sequences"),
                    "a stateful model is measured by `tracker tune` with `load.sequence`"),
    "--string-data": "string inputs are random, or your data from --input-data",
    **dict.fromkeys(("--ssl-grpc-use-ssl", "--ssl-grpc-root-certifications-file",
                     "--ssl-grpc-private-key-file", "--ssl-grpc-certificate-chain-file",
                     "--ssl-https-verify-peer", "--ssl-https-verify-host",
                     "--ssl-https-ca-certificates-file", "--ssl-https-client-certificate-file",
                     "--ssl-https-client-certificate-type", "--ssl-https-private-key-file",
                     "--ssl-https-private-key-type"),
                    "TLS goes to `server.tls` of a `tracker tune` spec"),
    **dict.fromkeys(("--trace-level", "--trace-rate", "--trace-count", "--log-frequency"),
                    "Triton's trace flags go to `server.options.flags` of a `tracker tune` "
                    "spec"),
    "--data-directory": "a folder of raw input files is not read: give a JSON file to "
                        "--input-data",
    **dict.fromkeys(("-c", "-d", "-t"), "deprecated in Perf Analyzer: give "
                                        "--concurrency-range"),
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
    "input_data": "`load.input_data`: Perf Analyzer's JSON file; zero or random (the "
                  "default): `load.input_fill`",
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
    "input_format": "accepted with binary (the default): tensors travel in binary",
    "output_format": "accepted with binary (the default): tensors travel in binary",
    "compression": "accepted with none (the default): requests are not compressed",
    "request_intervals": "`load.trace`: one gap in microseconds per line, replayed open loop "
                         "(looped when the level outlasts it)",
    "binary_search": "with -l: bisects the range for the highest level whose latency stays "
                     "under the threshold (step: the precision)",
}
#: option key -> the load field it sets (a bad value is named by its flag)
_FIELDS = {"protocol": "protocol", "batch": "batch_size", "measurement_interval": "window_ms",
           "stability": "stability_pct", "max_trials": "max_tries",
           "shared_memory": "shared_memory", "request_count": "window_requests",
           "warmup": "warmup_requests", "input_data": "input_data", "rate_range": "request_rate",
           "distribution": "arrival", "concurrency_range": "concurrency",
           "request_intervals": "trace"}


@dataclass(frozen=True)
class PaOptions:
    """Perf Analyzer's flags as the tracker reads them."""

    values: dict[str, str] = field(default_factory=dict)
    flags: frozenset[str] = frozenset()
    argv: tuple[str, ...] = ()
    levels: tuple[float, ...] = ()          # the range's levels, every one measured
    load: LoadSection | None = None         # the load section the flags describe
    spelled: dict[str, str] = field(default_factory=dict)   # key -> the flag as given

    def get(self, key: str, default: str = "") -> str:
        return self.values.get(key, default)


def read_flags(argv: Sequence[str]) -> PaOptions:
    """Perf Analyzer's command line; PeerOptionError for what cannot be honoured, before
    anything starts."""
    values: dict[str, str] = {}
    spelled: dict[str, str] = {}
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
        if name in _ALIASES:
            key, value, _ = _ALIASES[name]
            values[key], spelled[key] = value, name
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
        values[_VALUE[name]], spelled[_VALUE[name]] = value, name
    options = PaOptions(values, frozenset(flags), tuple(argv), spelled=spelled)
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
    _check_values(o)


def _check_schedule(o: PaOptions) -> None:
    """--request-intervals stands alone; --binary-search needs -l and a range to bisect."""
    ranges = [f for f, k in (("--concurrency-range", "concurrency_range"),
                             ("--request-rate-range", "rate_range")) if k in o.values]
    threshold = o.get("latency_threshold")
    try:
        if threshold and float(threshold) <= 0:
            raise ValueError(threshold)
    except ValueError:
        raise PeerOptionError(f"-l/--latency-threshold {threshold!r}: a number of "
                              "milliseconds above 0") from None
    if "request_intervals" in o.values and ranges:
        raise PeerOptionError(f"--request-intervals and {ranges[0]} exclude each other: the "
                              "file is the schedule")
    if "binary_search" in o.flags:
        if not o.get("latency_threshold"):
            raise PeerOptionError("--binary-search needs -l/--latency-threshold (ms): it "
                                  "finds the highest level whose latency stays under it")
        if not ranges:
            raise PeerOptionError("--binary-search needs --concurrency-range or "
                                  "--request-rate-range with a start and an end")


def _check_values(o: PaOptions) -> None:
    """The values the load section does not check: one line naming the flag."""
    _check_schedule(o)
    distribution = o.get("distribution", "constant")
    if distribution not in ("constant", "poisson"):
        raise PeerOptionError(f"--request-distribution must be constant or poisson, but got "
                              f"{distribution!r}")
    for key, only in _ONLY.items():
        if o.get(key, only) != only:
            raise PeerOptionError(f"{o.spelled[key]} {o.get(key)} cannot be honoured: "
                                  f"{MEANING[key].partition(': ')[2]}")
    for key in ("max_threads", "metrics_interval"):
        text = o.get(key, "1")
        if not text.isdigit() or int(text) < 1:
            raise PeerOptionError(f"{o.spelled[key]} must be a whole number >= 1, but got "
                                  f"{text!r}")
    data = o.get("input_data")
    if data not in ("", "zero", "random") and Path(data).expanduser().is_dir():
        raise PeerOptionError(f"--input-data {data}: a folder of raw input files is not read; "
                              "give a JSON file (Perf Analyzer's JSON layout)")


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
    if "request_intervals" in o.values:  # one level: the file's own rate (load.trace)
        return [0.0]
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
    if o.get("input_data") in ("zero", "random"):
        fields["input_fill"] = o.get("input_data")
    elif o.get("input_data"):
        fields["input_data"] = o.get("input_data")
    if "request_intervals" in o.values:
        fields["trace"] = o.get("request_intervals")
    elif "rate_range" in o.values:
        fields["request_rate"] = levels
        fields["arrival"] = o.get("distribution", "constant")
    else:
        fields["concurrency"] = [int(v) for v in levels]
    try:
        return LoadSection.model_validate(fields, strict=False)
    except ValidationError as exc:
        raise PeerOptionError("; ".join(_named(line, o) for line in messages(exc, LoadSection))
                              ) from None


def _named(line: str, o: PaOptions) -> str:
    """A load problem (``window_ms: must be > 0, but got 0``) named by the flag that set the
    field (``-p: must be > 0, but got 0``)."""
    path, _, text = line.partition(": ")
    head = path.split(".")[0].split("[")[0]
    key = next((k for k, f in _FIELDS.items() if f == head), None)
    if key is None:
        return f"load.{line}"
    return f"{o.spelled.get(key) or _flag_of(key)}: {text}"


def flag_rows() -> list[tuple[str, str]]:
    """(flags, what the tracker does) for every flag: docs/migrate-model-analyzer.md."""
    names: dict[str, list[str]] = {}
    for flag, key in [*_VALUE.items(), *_FLAGS.items()]:
        names.setdefault(key, []).append(f"`{flag}`")
    rows = [(" ".join(flags), MEANING[key]) for key, flags in names.items()]
    rows += [(f"`{flag}`", meaning) for flag, (_k, _v, meaning) in _ALIASES.items()]
    return rows + [(f"`{flag}`", f"refused: {why}") for flag, why in _REFUSED.items()]


def _flag_of(key: str) -> str:
    """The long form of the value flag of option ``key`` (else its short one)."""
    forms = [f for f, k in _VALUE.items() if k == key]
    return next((f for f in forms if f.startswith("--")), forms[0])


__all__ = ["MEANING", "PaOptions", "flag_rows", "read_flags"]
