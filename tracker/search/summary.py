"""What a study spec will do, in words: the text of ``tracker check SPEC``.

``check(spec, info)`` validates the spec against the model (knobs the model cannot take) and
returns a short summary: the model's tensors and batching, the server, the load sweep, the
objectives and constraints, and the search space with its size.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tritonclient.grpc import model_config_pb2

from tracker.errors import MeasurementError, SpecError
from tracker.launch_modes import describe
from tracker.measure.stream import stream_rule
from tracker.measure.stream_inputs import samples_for
from tracker.redact import redact_url
from tracker.search.knob_rules import load_priority_problems, resource_problems
from tracker.search.sequence_check import knobs_of, sequence_lines
from tracker.search.space import (
    check_space,
    model_knobs,
    resolve_space,
    space_size,
    value_count,
    values,
)
from tracker.spec import Bound, Range, Scalar, StudySpec
from tracker.spec.server_options import SERVER_KNOBS, server_knobs
from tracker.triton.configuration import Configuration
from tracker.triton.formats.base import PYFUNC_INSTEAD
from tracker.triton.sequence import sends_sequences

if TYPE_CHECKING:
    from tracker.spec.sections import LoadSection
    from tracker.triton.model_config import ModelInfo

def _dims(dims: object) -> str:
    return "[" + ", ".join(str(d) for d in dims) + "]"  # type: ignore[attr-defined]


def _knob(knob: Range | list[Scalar]) -> str:
    if isinstance(knob, list):
        return "[" + ", ".join(str(v) for v in knob) + "]"
    text = f"{knob.low}..{knob.high}"
    if knob.step is not None:
        text += f" step {knob.step}"
    if knob.log:
        text += " (log)"
    count = value_count(knob)
    found = values(knob) if count is not None and count <= 12 else None
    return text + (f" = {found}" if found is not None else "")


def _tensors(info: ModelInfo) -> list[str]:
    lines = []
    for kind, tensors in (("input", info.config.input), ("output", info.config.output)):
        for t in tensors:
            dtype = model_config_pb2.DataType.Name(t.data_type)
            lines.append(f"  {kind:<6} {t.name:<24} {dtype:<12} {_dims(t.dims)}")
    return lines


def _bound(metric: str, bound: Bound) -> str:
    parts = []
    if bound.min is not None:
        parts.append(f">= {bound.min:g}")
    if bound.max is not None:
        parts.append(f"<= {bound.max:g}")
    return f"{metric} " + " and ".join(parts)


def check_input_data(spec: StudySpec, info: ModelInfo) -> str:
    """SpecError when ``load.input_data`` does not fit the model's inputs (names, data types,
    shapes); else how the requests' inputs are made, in words."""
    path = spec.load.input_data
    if info.auto_complete:
        return ("inputs: from the model's auto_complete_config, read from Triton once it "
                "loaded the model" + (f"; {path} is checked then" if path else ""))
    if sends_sequences(info.config):
        return "inputs: the steps of its sequences (the 'sequences:' line)"
    try:
        samples = samples_for(info.config, spec.load)
    except MeasurementError as err:
        field = "load.input_data" if path else "load"
        raise SpecError([f"{field}: {err}"]) from err
    drawn = spec.load.stream.drawn
    if drawn:
        return (f"inputs: {len(samples)} request(s) with "
                + " and ".join(f"{field.replace('_', ' ')} drawn into {d.input}"
                               for field, d in drawn.items())
                + (f", the rest from {path}" if path else ""))
    if path is None:
        return (f"inputs: {spec.load.input_fill} data shaped after the config "
                "(load.input_data gives your own)")
    return f"inputs: {len(samples)} sample(s) from {path}, checked against the model's inputs"


STREAM_METRICS = ("perf_time_to_first_token_avg|p50|p90|p95|p99 and "
                  "perf_inter_token_latency_avg|p50|p90|p95|p99 (ms), "
                  "perf_output_token_throughput (tokens/s), perf_throughput (requests/s), "
                  "perf_latency_avg|p50|p90|p95|p99 (end to end, ms)")


def streaming_lines(spec: StudySpec, info: ModelInfo) -> list[str]:
    """Whether the model is streamed and which metrics then apply (docs/streaming.md);
    SpecError when the load settings cannot stream it."""
    cfg = info.config
    try:
        rule = stream_rule(cfg, spec.load)
    except MeasurementError as err:
        raise SpecError([f"load.stream: {err}"]) from err
    if rule is None:
        return ["  streaming: no (one response per request: unary requests)"]
    if spec.load.protocol != "grpc":
        raise SpecError([f"load.protocol: must be 'grpc' for a streaming (decoupled) model: "
                         f"Triton streams a request's responses over gRPC only, but got "
                         f"{spec.load.protocol!r}"])
    why = ("decoupled (model_transaction_policy { decoupled: true })"
           if cfg.model_transaction_policy.decoupled else "load.stream.enabled: true")
    token = ("one response" if rule.output is None
             else f"one element of output {rule.output!r}")
    return [f"  streaming: yes, {why}: each request one gRPC stream, a token is {token}",
            f"  metrics that apply: {STREAM_METRICS}"]


def _knob_lines(conf: Configuration) -> list[str]:
    """Each model's catalog of the knobs its backend reads, named as the search space names
    them, and the server's."""
    lines: list[str] = []
    for info in conf.models:
        name = str(info.config.name)
        backend, catalog = model_knobs(info)
        catalog = knobs_of(info.config, catalog)
        lines += [f"knobs the {backend} backend reads for {name} ({len(catalog)}):",
                  *(f"  {conf.key(name, k.path):<48} {k.what}"
                    + (f" ({k.values})" if k.values else "") for k in catalog)]
    return [*lines, "server knobs (server.options, searched as server/<option>; a change "
            "restarts the server):", *(f"  {k.path:<48} {k.what} ({k.values})"
                                       for k in SERVER_KNOBS)]


def _file_knob_lines(conf: Configuration, keys: list[str]) -> list[str]:
    defaults = conf.file_knob_defaults(keys)
    if not defaults:
        return []
    return [f"knobs in the model's JSON files ({len(defaults)}), written into each trial's "
            "copy and logged with it:",
            *(f"  {key:<48} default {value!r}" for key, value in defaults.items())]


def _configuration_lines(conf: Configuration) -> list[str]:
    """The models the server loads, in order: the entries, each ensemble's steps, each BLS
    model's callees, and each model's format and backend."""
    where = f" from {conf.repository}" if conf.repository is not None else ""
    lines = [f"configuration: {len(conf.models)} model{'s' * (len(conf.models) != 1)}{where}, "
             f"loaded in this order: {', '.join(conf.names)}"]
    for entry in conf.entries:
        lines.append(f"  entry {entry}: the load drives it; composing models: "
                     f"{', '.join(conf.composing(entry)) or 'none'}")
    for ensemble, steps in conf.steps.items():
        lines.append(f"  ensemble {ensemble} steps: {' -> '.join(steps)}")
    for caller, callees in conf.calls.items():
        lines.append(f"  {caller} calls (BLS, model.composing): {', '.join(callees)}")
    for model in conf.models:
        lines.append(f"  model {model.config.name}: {model.format} format, backend "
                     f"{model_knobs(model)[0]}, max_batch_size {model.config.max_batch_size}")
    return lines


def _option_lines(spec: StudySpec) -> list[str]:
    """The server's option flags, what a trial that searches one does (a restart), and what
    the load sends besides (repeats, priority levels)."""
    flags = spec.server.options.args()
    searched = server_knobs(list(spec.search.space))
    lines = [f"  server options: {' '.join(flags)}"] if flags else []
    if searched:
        lines.append(f"  server knobs searched ({', '.join(searched)}): a trial whose options "
                     "differ from the running server's restarts it")
    cached = any(k.rpartition("/")[2] == "response_cache.enable" for k in spec.search.space)
    if cached and spec.load.repeat is None and spec.load.input_data is None:
        lines.append("  note: every request carries the same random data, so a response cache "
                     "answers all but the first; load.repeat sets the share of repeats")
    if spec.load.repeat is not None:
        r = spec.load.repeat
        lines.append(f"  load repeats {r.pct:g}% of its requests ({r.hot} hot ones), up to "
                     f"{r.distinct} distinct others per pass")
    if spec.load.priorities:
        lines.append(f"  load priorities {spec.load.priorities} (levels: shares); figures per "
                     "level: <metric>/priority_<level>")
    return lines


def _sweep(load: LoadSection) -> str:
    return (f"request rates {load.request_rate} /s ({load.arrival})" if load.request_rate
            else "concurrency " + ", ".join(str(c) for c in load.concurrency_levels()))


def _joint_lines(spec: StudySpec, conf: Configuration) -> list[str]:
    """Several entry models (those whose figures carry their name): each one's own load
    (its input data checked against it) and weight, all driven at once."""
    named = conf.named_entries
    if not named:
        return []
    weights = {name: (spec.model.weights or {}).get(name, 1.0) for name in named}
    lines = ["  every entry model is driven at once, in the same windows; per model:"]
    for name in named:
        load = spec.load.for_model(name)
        own = spec.model_copy(update={"load": load})
        inputs = check_input_data(own, conf.info(name))
        lines.append(f"  {name}: {_sweep(load)}, batch size {load.batch_size}, weight "
                     f"{weights[name]:g}; {inputs}")
        if name != conf.entry:  # the first entry's are above
            lines.extend("  " + line for line in sequence_lines(own, conf.info(name)))
    return lines


def after_lines(spec: StudySpec, conf: Configuration) -> list[str]:
    """What the steps after the search do with this study: the confirmation's design, and
    whether ``mlflow.pyfunc`` runs a registered version (each refusal with its reason)."""
    confirm = spec.confirm
    if not confirm.enabled:
        design = "off (confirm.enabled: false)"
    elif confirm.design == "rounds":
        design = "in rounds (confirm.design: rounds)"
    elif (why := conf.pairing_problem) is not None:
        design = f"in rounds, not paired: {why}"
    else:
        design = ("paired: the best and the default side by side in one server (in rounds "
                  "where the best differs from the default in a server option)")
    problem = conf.pyfunc_problem
    pyfunc = ("the registered version's ONNX file runs in-process (onnxruntime, CPU)"
              if problem is None else f"refused: {problem}; {PYFUNC_INSTEAD}")
    return ["after the search:", f"  confirmation: {design}", f"  mlflow.pyfunc: {pyfunc}"]


def check(spec: StudySpec, conf: Configuration) -> str:
    """Validate ``spec`` against the model (or every model of the configuration) and
    describe the study. SpecError when a knob does not fit its model or load.input_data does
    not fit the entry model's inputs."""
    info = conf.entry_info
    space = resolve_space(spec.search.space, conf)
    check_space(space, conf, batch_size=spec.load.batch_size)
    refused = [*resource_problems(space, spec.server.options.rate_limit_resources),
               *load_priority_problems(spec, conf, space)]
    if refused:
        raise SpecError(refused)
    # the entry's own load (load.models.<entry> changes, streaming included) shapes its inputs
    own = spec.model_copy(update={"load": spec.load.for_model(conf.entry)})
    streaming = [*streaming_lines(own, info), *sequence_lines(own, info)]
    inputs = check_input_data(own, info)
    cfg = info.config
    batching = (f"yes (max_batch_size {cfg.max_batch_size} by default"
                + (", dynamic batching)" if cfg.HasField("dynamic_batching") else ")")
                if info.supports_batching else "no (fixed batch dimension, max_batch_size 0)")
    server = spec.server
    where = describe(server.mode, server)
    load = spec.load
    sweep = _sweep(load)
    window = (f"{load.window_requests} requests" if load.window_requests
              else f"{load.window_ms} ms")
    size = space_size(space)
    label = "search space" + ("" if spec.search.space else " (default for this model)")
    count = "continuous" if size is None else f"{size} configuration{'s' * (size != 1)}"
    search = spec.search
    lines = [
        f"spec: {spec.source or '(in memory)'}",
        f"model: {conf.entry} ({info.model_file}, {info.format} format, backend "
        f"{model_knobs(info)[0]})",
        *_tensors(info),
        f"  batching: {batching}",
        *streaming,
        f"  {inputs}",
        *_configuration_lines(conf),
        f"server: {server.mode} ({where}), strategy {server.strategy}",
        *_option_lines(spec),
        f"load: {sweep}; windows of {window}, stable within {load.stability_pct:g}%, "
        f"batch size {load.batch_size}, {load.protocol}",
        *_joint_lines(spec, conf),
        "objectives: " + ", ".join(f"{m} ({d})" for m, d in spec.objectives.items()),
        "constraints: " + (", ".join(_bound(m, b) for m, b in spec.constraints.items())
                           or "none"),
        f"{label}: {len(space)} knob{'s' * (len(space) != 1)}, {count}",
        *(f"  {key:<48} {_knob(knob)}" for key, knob in space.items()),
        *_knob_lines(conf),
        *_file_knob_lines(conf, list(space)),
        f"sampler: {search.sampler}, n_trials {search.n_trials}"
        + (f", seed {search.seed}" if search.seed is not None else "")
        + (f", timeout {search.timeout_s:g} s" if search.timeout_s else ""),
        *after_lines(spec, conf),
        f"study: {spec.study_name} in {redact_url(spec.resolved_storage())}",
        f"mlflow: experiment {spec.experiment_name} at "
        f"{redact_url(spec.mlflow.resolved_tracking_uri())}, registered model "
        f"{spec.registered_model_name}",
    ]
    return "\n".join(lines)
