"""``server.headers`` and perf_analyzer: the real value is on the command line the binary gets
(``-H`` is the only way it takes a header), and no copy that leaves the measurement (an
invalid Measurement's reason, with perf_analyzer's output echoing its flags) holds it."""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

import pytest

from tracker.measure.loadgen import Level
from tracker.measure.pa_load import PerfAnalyzer
from tracker.redact import redact_text
from tracker.spec import LoadSection
from tracker.triton.endpoints import Endpoints
from tracker.triton.tls import Security

TOKEN = "s3cr3t-token"
#: a perf_analyzer stand-in that records its arguments, echoes them and fails
ECHO = r'''#!PYTHON
import json, sys
if sys.argv[1:] == ["--help"]:
    print("Usage: perf_analyzer [options]\n  -H <HTTP/gRPC header>")
    sys.exit(0)
with open("CALLS", "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\n")
print("error: request failed with " + " ".join(sys.argv[1:]))
sys.exit(1)
'''


@pytest.fixture()
def echo_pa(tmp_path: Path) -> tuple[str, Path]:
    calls = tmp_path / "calls.jsonl"
    exe = tmp_path / "perf_analyzer"
    exe.write_text(ECHO.replace("PYTHON", sys.executable).replace("CALLS", str(calls)))
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return str(exe), calls


def test_headers_reach_perf_analyzer_and_never_its_reported_output(
        echo_pa: tuple[str, Path]) -> None:
    binary, calls = echo_pa
    sec = Security(headers=(("authorization", f"Bearer {TOKEN}"), ("x-team", "tuning-42")))
    endpoints = Endpoints("127.0.0.1", 8000, 8001, 8002, security=sec)
    got = PerfAnalyzer(binary, endpoints, "m", LoadSection(concurrency=[1])).measure(Level(1))
    sent = json.loads(calls.read_text().splitlines()[-1])
    assert sent[sent.index("-H") + 1] == f"authorization:Bearer {TOKEN}"  # the real value
    assert "x-team:tuning-42" in sent
    assert not got.valid and got.invalid_reason is not None
    assert "exited with status 1" in got.invalid_reason
    assert "-H authorization:*** -H x-team:***" in got.invalid_reason  # the echo, masked
    for text in (got.invalid_reason, got.first_error or ""):
        assert TOKEN not in text and "tuning-42" not in text
    assert TOKEN not in redact_text(f"-H authorization:Bearer {TOKEN}")  # and again, later
