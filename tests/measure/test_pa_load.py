"""The perf_analyzer load client, with a stand-in `perf_analyzer` executable on PATH (no binary
exists here) that writes a CSV in perf_analyzer's format and behaves by concurrency:
2 is unstable, 16 fails, 64 hangs."""

from __future__ import annotations

import json
import stat
import sys
import time
from pathlib import Path

import pytest

from tests.support.levels import pick
from tracker.errors import MeasurementError
from tracker.measure.pa_load import PerfAnalyzer
from tracker.measure.sweep import EntryLoad, sweep
from tracker.spec import LoadSection
from tracker.triton import model_config
from tracker.triton.endpoints import Endpoints

FAKE = r'''#!PYTHON
import json, sys, time
args = sys.argv[1:]
if args == ["--help"]:  # a few lines of perf_analyzer's usage text
    print("Usage: perf_analyzer [options]\n  -m <model name>\n  -x <model version>\n"
          "  --async\n  --shared-memory <'system'|'cuda'|'none'>\n"
          "  --output-shared-memory-size <size in bytes>\n  -H <HTTP/gRPC header>")
    sys.exit(0)
with open("CALLS", "a") as f:
    f.write(json.dumps(args) + "\n")
opt = {args[i]: args[i + 1] for i in range(len(args) - 1) if args[i].startswith("-")}
c = int(opt["--concurrency-range"].split(":")[0])
if c == 16:
    print("error: failed to get model metadata: connection refused")
    sys.exit(1)
if c == 64:
    time.sleep(60)
if c == 2:
    print("Failed to obtain stable measurement within 10 measurement windows")
tput = min(100.0 * c, 400.0 + c)
with open(opt["-f"], "w") as f:
    f.write("Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,"
            "Server Compute Input,Server Compute Infer,Server Compute Output,Client Recv,"
            "p50 latency,p90 latency,p95 latency,p99 latency,request/response,response wait\n")
    f.write(f"{c},{tput},5,300,{100 * c},20,2000,15,3,{2500 * c},{2800 * c},{2900 * c},"
            f"{3000 * c},8,2900\n")
'''

ENDPOINTS = Endpoints("127.0.0.1", 8000, 8001, 8002)
CFG = model_config.parse('name: "m" max_batch_size: 8 input [{ name: "X" data_type: TYPE_FP32 '
                         'dims: [4] }] output [{ name: "Y" data_type: TYPE_FP32 dims: [4] }]')


@pytest.fixture()
def fake_pa(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    calls = tmp_path / "calls.jsonl"
    exe = bindir / "perf_analyzer"
    exe.write_text(FAKE.replace("PYTHON", sys.executable).replace("CALLS", str(calls)))
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bindir}:/usr/bin:/bin")
    return calls


def test_sweep_with_perf_analyzer_parses_its_csv(fake_pa: Path) -> None:
    load = LoadSection(concurrency=[1, 2, 4, 8, 16, 32], window_ms=750, stability_pct=7)
    res = sweep(ENDPOINTS, {"m": EntryLoad(CFG, load)}, {"perf_latency_p99": {"max": 50}},
                load_client="perf_analyzer")
    by_c = {m.concurrency: m for m in res.measurements}
    assert list(by_c) == [1, 2, 4, 8, 16]  # stopped at the failing level
    one = by_c[1]
    assert one.source == "perf_analyzer" and one.valid and one.stable
    assert one.throughput == 100.0
    assert one.latency_p99_ms == pytest.approx(3.0)
    assert one.server_compute_infer_ms == pytest.approx(2.0)
    assert one.latency_avg_ms is None  # stabilizing on p99: perf_analyzer omits Avg latency
    assert not by_c[2].stable and "unstable" in by_c[2].warnings[0]
    bad = by_c[16]
    assert not bad.valid and "exited with status 1" in (bad.invalid_reason or "")
    assert bad.first_error == "error: failed to get model metadata: connection refused"
    assert res.stop_reason.startswith("m at concurrency 16 invalid")
    best = pick(res.measurements, {"perf_latency_p99": {"max": 50}},
                           {"perf_throughput": "maximize"})
    assert best.feasible and best.concurrency == 8
    first = json.loads(fake_pa.read_text().splitlines()[0])
    expected = ["-m", "m", "-u", "127.0.0.1:8001", "-i", "grpc", "-b", "1", "-s", "7",
                "--max-trials", "10", "--percentile=99"]
    assert first[:len(expected)] == expected
    assert "--verbose-csv" in first and first[first.index("--concurrency-range") + 1] == "1:1"
    assert first[first.index("--measurement-interval") + 1] == "750"


def test_a_hung_perf_analyzer_is_killed(fake_pa: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(PerfAnalyzer, "timeout_s", lambda self: 1.0)
    start = time.monotonic()
    res = sweep(ENDPOINTS, {"m": EntryLoad(CFG, LoadSection(concurrency=[64]))},
              load_client="perf_analyzer")
    assert time.monotonic() - start < 10
    (m,) = res.measurements
    assert not m.valid and "did not finish within 1 s and was killed" in (m.invalid_reason or "")


def test_rate_mode_and_count_windows_command() -> None:
    load = LoadSection(request_rate=[50], arrival="poisson", window_requests=200,
                       protocol="http")
    pa = PerfAnalyzer("perf_analyzer", ENDPOINTS, "m", load)
    from tracker.measure.sweep import load_levels

    cmd = pa.command(load_levels(load)[0], Path("x.csv"))
    assert cmd[cmd.index("-u") + 1] == "127.0.0.1:8000"
    assert cmd[cmd.index("--request-rate-range") + 1] == "50:50"
    assert cmd[cmd.index("--request-distribution") + 1] == "poisson"
    assert cmd[cmd.index("--measurement-request-count") + 1] == "200"


def test_a_stateful_model_gets_perf_analyzers_sequence_options() -> None:
    """The lengths of load.sequence (mean and variation in percent), the open sequences of
    request-rate mode, and an ID range of this run's own."""
    load = LoadSection(concurrency=[4], sequence={"length": {"low": 5, "high": 15}, "active": 6})
    from tracker.measure.sweep import load_levels

    cmd = PerfAnalyzer("perf_analyzer", ENDPOINTS, "m", load, stateful=True).command(
        load_levels(load)[0], Path("x.csv"))
    assert cmd[cmd.index("--sequence-length") + 1] == "10"
    assert cmd[cmd.index("--sequence-length-variation") + 1] == "50"
    assert cmd[cmd.index("--num-of-sequences") + 1] == "6"
    first, last = map(int, cmd[cmd.index("--sequence-id-range") + 1].split(":"))
    assert 0 < first < last < 2**63
    plain = PerfAnalyzer("perf_analyzer", ENDPOINTS, "m", load).command(
        load_levels(load)[0], Path("x.csv"))
    assert "--sequence-length" not in plain


def test_missing_binary_and_npz_data_are_errors(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(MeasurementError, match="perf_analyzer binary on PATH"):
        sweep(ENDPOINTS, {"m": EntryLoad(CFG, LoadSection(concurrency=[1]))},
              load_client="perf_analyzer")
    data = tmp_path / "d.npz"
    data.write_bytes(b"")
    with pytest.raises(MeasurementError, match="only JSON input data"):
        PerfAnalyzer("pa", ENDPOINTS, "m", LoadSection(input_data=data))


def test_tls_headers_and_shared_memory_flags() -> None:
    from tracker.measure.loadgen import Level
    from tracker.triton.tls import Security

    sec = Security(tls=True, root_cert=Path(__file__), client_cert=Path(__file__),
                   client_key=Path(__file__), headers=(("authorization", "Bearer t"),))
    ep = Endpoints("127.0.0.1", 8000, 8001, 8002, security=sec)
    load = LoadSection(concurrency=[1], shared_memory="system")
    cmd = PerfAnalyzer("pa", ep, "m", load, output_bytes=128).command(Level(1), Path("x.csv"))
    here = str(Path(__file__))
    for flag in ("--ssl-grpc-use-ssl", f"--ssl-grpc-root-certifications-file={here}",
                 f"--ssl-grpc-private-key-file={here}",
                 f"--ssl-grpc-certificate-chain-file={here}",
                 "--output-shared-memory-size=128"):
        assert flag in cmd
    assert cmd[cmd.index("-H") + 1] == "authorization:Bearer t"
    assert cmd[cmd.index("--shared-memory") + 1] == "system"
    http = PerfAnalyzer("pa", ep, "m", LoadSection(protocol="http")).command(Level(1),
                                                                             Path("x.csv"))
    assert f"--ssl-https-ca-certificates-file={here}" in http
    assert "--ssl-grpc-use-ssl" not in http


def test_perf_analyzer_flags_are_checked_against_its_help(fake_pa: Path) -> None:
    load = LoadSection(concurrency=[1], perf_analyzer_flags=["--async", "-x", "1"])
    res = sweep(ENDPOINTS, {"m": EntryLoad(CFG, load)}, load_client="perf_analyzer")
    assert res.measurements[0].valid
    call = json.loads(fake_pa.read_text().splitlines()[-1])
    assert call[-3:] == ["--async", "-x", "1"]
    with pytest.raises(MeasurementError, match=r"--no-such-flag, which `.*perf_analyzer --help` "
                                               "does not list"):
        sweep(ENDPOINTS, {"m": EntryLoad(CFG, LoadSection(
            perf_analyzer_flags=["--no-such-flag=3"]))}, load_client="perf_analyzer")
    with pytest.raises(MeasurementError, match="must not set --concurrency-range"):
        sweep(ENDPOINTS, {"m": EntryLoad(CFG, LoadSection(
            perf_analyzer_flags=["--concurrency-range=1:4"]))}, load_client="perf_analyzer")
