"""``tracker perf-analyzer``: Perf Analyzer's command line (read by tracker/peers/pa_flags.py),
measured by the tracker's load generator and logged as an MLflow run.

:func:`measure` measures the model a running server at ``-u`` serves, level after level as
Perf Analyzer does (every level of the range; with ``-l``, until the latency passes the
threshold), or, with ``--service-kind triton_c_api --model-repository DIR`` (Perf Analyzer's
in-process mode), starts the embedded Triton on that repository for the measurement. It
prints Perf Analyzer's lines (the settings, each level, the "Inferences/Second vs. Client
Average Batch Latency" table), writes ``-f`` as Perf Analyzer's CSV, and logs a run: the
flags as params, each level's figures as ``sweep/<metric>`` (step: the level), the best
level's as metrics, and ``perf.csv``, ``command.txt`` and the served ``config.pbtxt``.
"""

from __future__ import annotations

import os
import socket
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from mlflow import MlflowClient
from mlflow.entities import Param, RunTag
from tritonclient.grpc.model_config_pb2 import ModelConfig

from tracker.errors import TrackerError
from tracker.measure import csvio
from tracker.measure.entry import EntryLoad
from tracker.measure.sweep import sweep
from tracker.measure.types import Measurement, SweepLevel
from tracker.peers.ma_options import PeerOptionError
from tracker.peers.pa_flags import PaOptions, read_flags
from tracker.tracking import runs
from tracker.triton.endpoints import Endpoints

if TYPE_CHECKING:
    from tracker.triton.server.base import TritonServer

Echo = Callable[[str], None]

# ---- the measurement ------------------------------------------------------------------------

class _Every:
    """Every level in order, as Perf Analyzer measures them; with ``-l``, the levels up to the
    first whose latency passes the threshold."""

    def __init__(self, count: int, threshold_ms: float | None, percentile: str) -> None:
        self.count, self.threshold_ms, self.percentile = count, threshold_ms, percentile
        self.reason = "all levels measured"

    def next(self, done: Sequence[SweepLevel]) -> int | None:
        if done and self.threshold_ms is not None:
            m = next(iter(done[-1].measurements.values()))
            latency = _latency_ms(m, self.percentile)
            if latency is not None and latency > self.threshold_ms:
                self.reason = f"latency {latency:.2f} ms above -l {self.threshold_ms:g} ms"
                return None
        return len(done) if len(done) < self.count else None


class _Binary:
    """``--binary-search -l``: the range's levels bisected for the highest one whose latency
    stays under the threshold (Perf Analyzer's step is the precision: every level of the
    range is a candidate)."""

    def __init__(self, count: int, threshold_ms: float, percentile: str) -> None:
        self.low, self.high, self.best = 0, count - 1, -1
        self.threshold_ms, self.percentile = threshold_ms, percentile
        self.reason = "binary search not started"

    def next(self, done: Sequence[SweepLevel]) -> int | None:
        if done:
            last = done[-1]
            latency = _latency_ms(next(iter(last.measurements.values())), self.percentile)
            if last.valid and latency is not None and latency <= self.threshold_ms:
                self.best, self.low = last.index, last.index + 1
            else:
                self.high = last.index - 1
        if self.low <= self.high:
            return (self.low + self.high) // 2
        level = next((lv.level for lv in done if lv.index == self.best), None)
        self.reason = (f"binary search: the highest level under -l {self.threshold_ms:g} ms "
                       f"is {level}" if level is not None
                       else f"binary search: no level under -l {self.threshold_ms:g} ms")
        return None


def _latency_ms(m: Measurement, percentile: str) -> float | None:
    value = getattr(m, f"latency_p{percentile}_ms") if percentile else m.latency_avg_ms
    return float(value) if value is not None else None


def _endpoints(o: PaOptions) -> Endpoints:
    protocol = o.get("protocol", "http")
    url = o.get("url", "localhost:8001" if protocol == "grpc" else "localhost:8000")
    host, _, port_text = url.rpartition(":")
    if not host or not port_text.isdigit():
        raise PeerOptionError(f"-u {url!r}: host:port")
    port = int(port_text)
    if protocol == "grpc":
        return Endpoints(host, None, port, None)
    return Endpoints(host, port, port + 1, None)


@dataclass(frozen=True)
class PerfRun:
    """A finished ``tracker perf-analyzer``: its levels, its run, the served config."""

    levels: list[Measurement]
    run_id: str
    config_text: str
    reason: str


def _config(endpoints: Endpoints, o: PaOptions) -> ModelConfig:
    from tracker.triton.client import TritonClient
    from tracker.triton.http_client import HttpTritonClient

    name = o.get("model")
    protocol = o.get("protocol", "http")
    port = endpoints.grpc_port if protocol == "grpc" else endpoints.http_port
    try:
        socket.create_connection((endpoints.host, port or 0), timeout=5).close()
    except OSError as exc:
        raise TrackerError(
            f"no Triton answers {protocol} at {endpoints.host}:{port} ({exc.strerror or exc}): "
            "start one (tritonserver --model-repository=DIR) and give its address with -u, "
            "or let the tracker serve the repository: add --service-kind triton_c_api "
            "--model-repository DIR") from None
    try:
        if protocol == "grpc":
            with TritonClient(endpoints) as client:
                return client.model_config(name)
        return HttpTritonClient(f"{endpoints.host}:{endpoints.http_port}").model_config(name)
    except TrackerError as exc:
        raise TrackerError(f"the server at {o.get('url') or 'localhost'} does not serve "
                           f"{name!r}: {exc}") from None


def _servable(repository: Path, model: str, server: TritonServer, workdir: Path) -> Path:
    """The repository the embedded Triton serves: ``repository`` itself, or, for an ONNX
    model (the wheel's Triton has no onnxruntime backend), the model written with the
    onnxruntime shim into ``workdir``, as a study serves it."""
    from tracker.serving import serving_choices
    from tracker.triton.formats import load_model_info
    from tracker.triton.repository import write_repository

    info = load_model_info(repository / model, model)
    if info.format != "onnx":
        return repository
    serving = serving_choices("auto", lambda: server.has_backend("onnxruntime"))[0]
    return write_repository(workdir, info, info.config, serving=serving).path


def _served(o: PaOptions, echo: Echo) -> tuple[list[Measurement], str, str]:
    """The levels measured, why the sweep ended, and the served config's text."""
    with tempfile.TemporaryDirectory(prefix="tracker-pa-") as tmp:
        return _measured(o, echo, Path(tmp))


def _embedded(o: PaOptions, echo: Echo, workdir: Path) -> TritonServer:
    """Perf Analyzer's in-process mode: the embedded Triton on ``--model-repository``, with
    only the model measured loaded (stopped by the caller, also when the load fails)."""
    from tracker.spec.sections import ServerSection
    from tracker.triton.server.modes import make_server

    repository = Path(o.get("model_repository")).expanduser().resolve()
    if not (repository / o.get("model")).is_dir():
        raise PeerOptionError(f"--model-repository {repository} holds no model folder "
                              f"{o.get('model')!r}")
    server = make_server(ServerSection())
    echo(f"starting the embedded Triton on {repository}, loading {o.get('model')}")
    try:
        server.start(_servable(repository, o.get("model"), server, workdir), explicit=True)
        server.load(o.get("model"))
    except BaseException:
        server.stop()
        raise
    return server


def _measured(o: PaOptions, echo: Echo, workdir: Path) -> tuple[list[Measurement], str, str]:
    from google.protobuf import text_format

    assert o.load is not None                       # read_flags made it
    server = None
    try:
        if o.get("service_kind") == "triton_c_api":
            server = _embedded(o, echo, workdir)
        endpoints = server.endpoints if server is not None else _endpoints(o)
        cfg = _config(endpoints, o)
        threshold = float(o.get("latency_threshold")) if o.get("latency_threshold") else None
        plan: _Every | _Binary = (
            _Binary(len(o.levels), threshold, o.get("percentile"))
            if "binary_search" in o.flags and threshold is not None
            else _Every(len(o.levels), threshold, o.get("percentile")))
        done = sweep(endpoints, {o.get("model"): EntryLoad(cfg, o.load)},
                     plan=plan, on_level=lambda level: _print_level(level, o, echo))
        measured = [m for level in done.levels for m in level.measurements.values()]
        return measured, done.stop_reason, text_format.MessageToString(cfg)
    finally:
        if server is not None:
            server.stop()


# ---- Perf Analyzer's lines ------------------------------------------------------------------

def settings_lines(o: PaOptions) -> list[str]:
    """Perf Analyzer's ``*** Measurement Settings ***`` block."""
    stabilizing = (f"p{o.get('percentile')}latency" if o.get("percentile")
                   else "average latency")
    window = (f"  Minimum number of samples in each window: {o.get('request_count', '50')}"
              if o.get("measurement_mode") == "count_windows"
              else f"  Measurement window: {o.get('measurement_interval', '5000')} msec")
    mode = o.get("measurement_mode") or "time_windows"
    return ["*** Measurement Settings ***", f"  Batch size: {o.get('batch', '1')}",
            "  Service Kind: Triton", f'  Using "{mode}" mode for stabilization',
            f"  Stabilizing using {stabilizing} and throughput", window,
            "  Using asynchronous calls for inference", ""]


def _us(ms: float | None) -> int:
    return round((ms or 0.0) * 1000)


def _print_level(level: SweepLevel, o: PaOptions, echo: Echo) -> None:
    for m in level.measurements.values():
        head = (f"Request concurrency: {m.concurrency}" if m.concurrency is not None
                else f"Request Rate: {m.request_rate:g} inference requests per second")
        echo(head)
        echo("  Client: ")
        echo(f"    Request count: {m.requests}")
        echo(f"    Throughput: {m.throughput:g} infer/sec")
        if not o.get("percentile"):
            echo(f"    Avg latency: {_us(m.latency_avg_ms)} usec")
        for p in ("50", "90", "95", "99"):
            echo(f"    p{p} latency: {_us(getattr(m, f'latency_p{p}_ms'))} usec")
        if m.server_queue_ms is not None:
            echo("  Server: ")
            echo(f"    Avg request latency: queue {_us(m.server_queue_ms)} usec + compute "
                 f"infer {_us(m.server_compute_infer_ms)} usec")


def summary_lines(levels: Sequence[Measurement], o: PaOptions) -> list[str]:
    """Perf Analyzer's closing table: one line per level."""
    which = f"p{o.get('percentile')}" if o.get("percentile") else "Average"
    out = [f"Inferences/Second vs. Client {which} Batch Latency"]
    for m in levels:
        head = (f"Concurrency: {m.concurrency}" if m.concurrency is not None
                else f"Request Rate: {m.request_rate:g}")
        out.append(f"{head}, throughput: {m.throughput:g} infer/sec, latency "
                   f"{_us(_latency_ms(m, o.get('percentile')))} usec")
    return out


# ---- the MLflow run -------------------------------------------------------------------------

def _log(o: PaOptions, levels: list[Measurement], config_text: str, csv_text: str) -> str:
    client = MlflowClient()
    name = os.environ.get("MLFLOW_EXPERIMENT_NAME") or o.get("model")
    experiment = client.get_experiment_by_name(name)
    experiment_id = (experiment.experiment_id if experiment is not None
                     else client.create_experiment(name))
    run_id = str(client.create_run(experiment_id, run_name=f"perf_analyzer-{o.get('model')}",
                                   tags={runs.ROLE: "perf_analyzer"}).info.run_id)
    params = [Param(k, v[:500]) for k, v in sorted(o.values.items())]
    client.log_batch(run_id, params=params, tags=[RunTag(runs.ROLE, "perf_analyzer")])
    measured = [m for m in levels if m.valid and m.latency_avg_ms is not None]
    best = max(measured, key=lambda m: m.throughput, default=None)
    headline = best.metrics() if best is not None else {}
    step = int((best.concurrency or best.request_rate or 0) if best is not None else 0)
    runs.log_metrics(client, run_id, headline, step=step,
                     extra=runs.sweep_metrics(levels))
    runs.log_files(client, run_id, {
        "perf.csv": csv_text, "config.pbtxt": config_text,
        "command.txt": "perf_analyzer " + " ".join(o.argv) + "\n"})
    runs.finish_run(client, run_id, "FINISHED")
    return run_id


def measure(argv: Sequence[str], echo: Echo) -> PerfRun:
    """Run ``perf_analyzer ARGV`` with the tracker's client; PeerOptionError (nothing started)
    for a flag it cannot honour, TrackerError for a server or model that cannot be measured."""
    o = read_flags(argv)
    for line in settings_lines(o):
        echo(line)
    levels, reason, config_text = _served(o, echo)
    csv_text = csvio.dumps(levels)
    if o.get("csv"):
        Path(o.get("csv")).write_text(csv_text)
    for line in summary_lines(levels, o):
        echo(line)
    run_id = _log(o, levels, config_text, csv_text)
    return PerfRun(levels, run_id, config_text, reason)


__all__ = ["PerfRun", "measure", "settings_lines", "summary_lines"]
