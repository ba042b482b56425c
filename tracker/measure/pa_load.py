"""perf_analyzer as the load generator, for users who have the binary on PATH.

Each level is one perf_analyzer run (``--concurrency-range C:C`` or ``--request-rate-range
R:R``) with the spec's windows, stability and input data, writing its CSV
(``-f FILE --verbose-csv``), which is parsed into the same Measurement as the built-in client
gives. perf_analyzer stabilizes on p99 (``--percentile=99``), as the built-in client does. A
run that fails or hangs (killed after a generous timeout, its process group with it) gives an
invalid Measurement with the tail of its output.

perf_analyzer takes extra headers (``server.headers``) only as ``-H name:value`` flags, so the
real values are on its command line, where other users of the machine can read them in the
process list. Nothing here logs or records the command, and the output that becomes an
invalid Measurement's reason has every header value masked (the study redacts reasons again
before recording them).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from tracker.errors import MeasurementError
from tracker.measure.csvio import read_csv
from tracker.measure.loadgen import Level
from tracker.measure.monitor_sampler import Sampler
from tracker.measure.types import Measurement
from tracker.redact import redact_values, secret_header_values
from tracker.triton.endpoints import Endpoints

if TYPE_CHECKING:
    from tracker.spec.sections import LoadSection

UNSTABLE_TEXT = "Failed to obtain stable measurement"


#: what the tool sets itself: a user flag may not change it behind the measurement's back
OWNED = frozenset({"-m", "-u", "-i", "-b", "-s", "-f", "--max-trials", "--percentile",
                   "--verbose-csv", "--concurrency-range", "--request-rate-range",
                   "--request-distribution", "--measurement-mode", "--measurement-interval",
                   "--measurement-request-count", "--input-data", "--shared-memory",
                   "--ssl-grpc-use-ssl", "-H"})


def check_flags(binary: str, flags: Sequence[str]) -> None:
    """MeasurementError unless every option in ``flags`` is one ``binary --help`` lists and
    none is one the tool sets itself (a value after an option is left alone)."""
    names = [f.split("=", 1)[0] for f in flags if f.startswith("-")]
    if not names:
        return
    owned = [n for n in names if n in OWNED]
    if owned:
        raise MeasurementError(f"load.perf_analyzer_flags must not set {', '.join(owned)}: the "
                               "tool sets it from the spec (load.*, server.tls/headers)")
    try:
        got = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise MeasurementError(f"cannot read `{binary} --help` to check "
                               f"load.perf_analyzer_flags: {exc}") from exc
    known = set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", got.stdout + got.stderr))
    unknown = [n for n in names if n not in known]
    if unknown:
        raise MeasurementError(f"load.perf_analyzer_flags has {', '.join(unknown)}, which "
                               f"`{binary} --help` does not list")


def _tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


class PerfAnalyzer:
    """Runs ``binary`` against ``endpoints`` with the settings of a LoadSection."""

    def __init__(self, binary: str, endpoints: Endpoints, model_name: str,
                 load: LoadSection, output_bytes: int = 0, stateful: bool = False) -> None:
        self.binary, self.endpoints, self.model_name, self.load = binary, endpoints, model_name, \
            load
        self.stateful = stateful  # a sequence model: perf_analyzer's sequence options
        if load.input_data is not None and Path(load.input_data).suffix != ".json":
            raise MeasurementError(f"perf_analyzer reads only JSON input data, but "
                                   f"load.input_data is {load.input_data}")
        self.output_bytes = output_bytes
        check_flags(binary, load.perf_analyzer_flags)

    def command(self, level: Level, csv_path: Path) -> list[str]:
        load = self.load
        url = self.endpoints.grpc if load.protocol == "grpc" else self.endpoints.http
        if url is None:
            raise MeasurementError(f"load.protocol is {load.protocol!r} but the server's "
                                   f"{load.protocol} endpoint is unknown")
        url = url.split("://", 1)[-1]
        cmd = [self.binary, "-m", self.model_name, "-u", url, "-i", load.protocol,
               "-b", str(load.batch_size), "-s", f"{load.stability_pct:g}",
               "--max-trials", str(load.max_tries), "--percentile=99",
               "-f", str(csv_path), "--verbose-csv"]
        if level.concurrency is not None:
            cmd += ["--concurrency-range", f"{level.concurrency}:{level.concurrency}"]
        else:
            cmd += ["--request-rate-range", f"{level.request_rate:g}:{level.request_rate:g}",
                    "--request-distribution", level.arrival]
        if load.window_requests is not None:
            cmd += ["--measurement-mode", "count_windows",
                    "--measurement-request-count", str(load.window_requests)]
        else:
            cmd += ["--measurement-interval", str(load.window_ms)]
        if load.input_data is not None:
            cmd += ["--input-data", str(load.input_data)]
        elif load.input_fill == "zero":
            cmd += ["--input-data", "zero"]
        if self.stateful:
            cmd += sequence_args(load)
        return cmd + self.transport_flags() + list(load.perf_analyzer_flags)

    def transport_flags(self) -> list[str]:
        """TLS, headers and shared memory, as perf_analyzer spells them."""
        sec, load, out = self.endpoints.security, self.load, []
        if sec.tls and load.protocol == "grpc":
            out.append("--ssl-grpc-use-ssl")
            for flag, path in (("--ssl-grpc-root-certifications-file", sec.root_cert),
                               ("--ssl-grpc-private-key-file", sec.client_key),
                               ("--ssl-grpc-certificate-chain-file", sec.client_cert)):
                if path is not None:
                    out.append(f"{flag}={path}")
        elif sec.tls:
            out += ["--ssl-https-verify-peer=1", "--ssl-https-verify-host=2"]
            for flag, path in (("--ssl-https-ca-certificates-file", sec.root_cert),
                               ("--ssl-https-client-certificate-file", sec.client_cert),
                               ("--ssl-https-private-key-file", sec.client_key)):
                if path is not None:
                    out.append(f"{flag}={path}")
            if sec.client_cert is not None:
                out += ["--ssl-https-client-certificate-type=PEM",
                        "--ssl-https-private-key-type=PEM"]
        for name, value in sec.headers:
            out += ["-H", f"{name}:{value}"]
        if load.shared_memory != "none":
            out += ["--shared-memory", load.shared_memory]
            if self.output_bytes:
                out.append(f"--output-shared-memory-size={self.output_bytes}")
        return out

    def timeout_s(self) -> float:
        """Generous: every try a full window plus request timeouts, and start-up."""
        window_s = self.load.window_ms / 1000.0 if self.load.window_requests is None else 10.0
        return float(60.0 + self.load.max_tries * (window_s * 2 + self.load.request_timeout_s))

    def measure(self, level: Level, sampler: Sampler | None = None) -> Measurement:
        with tempfile.TemporaryDirectory(prefix="tracker-pa-") as tmp:
            csv_path = Path(tmp) / "perf.csv"
            cmd = self.command(level, csv_path)
            start = time.perf_counter_ns()
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True, start_new_session=True)
            try:
                out, _ = proc.communicate(timeout=self.timeout_s())
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                out, _ = proc.communicate()
                return self._invalid(level, f"perf_analyzer did not finish within "
                                            f"{self.timeout_s():g} s and was killed", out)
            end = time.perf_counter_ns()
            if proc.returncode != 0 or not csv_path.is_file():
                return self._invalid(level, f"perf_analyzer exited with status "
                                            f"{proc.returncode}", out)
            rows = read_csv(csv_path)
        if not rows:
            return self._invalid(level, "perf_analyzer wrote no measurement", out)
        m = rows[0]
        m.concurrency, m.request_rate = level.concurrency, level.request_rate
        m.batch_size = self.load.batch_size
        m.duration_s = (end - start) * 1e-9
        m.stable = UNSTABLE_TEXT not in out
        if not m.stable:
            m.warnings.append("unstable: " + UNSTABLE_TEXT.lower() + " (perf_analyzer)")
        if sampler is not None and not m.monitors:
            m.monitors = sampler.aggregate(start, end)
        return m

    def _hidden(self, text: str) -> str:
        """``text`` with the value of every secret header this run sends masked
        (perf_analyzer may echo its ``-H`` flags in an error)."""
        return redact_values(text, secret_header_values(self.endpoints.security.headers))

    def _invalid(self, level: Level, reason: str, output: str) -> Measurement:
        tail = self._hidden(_tail(output))
        return Measurement(concurrency=level.concurrency, request_rate=level.request_rate,
                           batch_size=self.load.batch_size, valid=False, source="perf_analyzer",
                           invalid_reason=reason + (f"; its output ends:\n{tail}" if tail else ""),
                           first_error=tail.splitlines()[-1] if tail else None)


def sequence_args(load: LoadSection) -> list[str]:
    """perf_analyzer's sequence options for ``load.sequence`` (the same sequences the
    built-in load sends): the mean length and its variation in percent, the open sequences of
    request-rate mode, and an ID range of this run's own (sequence_steps.CorrelationIds)."""
    from tracker.measure.sequence_steps import COUNTER_BITS, CorrelationIds
    from tracker.spec.sequence import DEFAULT_ACTIVE, DEFAULT_LENGTH

    section = load.sequence
    low, high = ((section.length.low or 1, section.length.high or 1) if section is not None
                 else (DEFAULT_LENGTH, DEFAULT_LENGTH))
    mean = (low + high) / 2
    first = CorrelationIds().next()
    return ["--sequence-length", str(round(mean)),
            "--sequence-length-variation", f"{100 * (high - low) / 2 / mean:g}",
            "--num-of-sequences", str(section.active if section is not None else DEFAULT_ACTIVE),
            "--sequence-id-range", f"{first}:{first + (1 << COUNTER_BITS) - 2}"]
