"""``tracker perf-analyzer`` with Perf Analyzer's own flags, against one embedded Triton for the
module (it serves Model Analyzer's quick-start model ``add``) and in Perf Analyzer's in-process
mode: what it prints is Perf Analyzer's lines, ``-f`` reads back with pandas as Perf Analyzer's
CSV, each level is in the MLflow run, and what it cannot honour is refused by name."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner
from mlflow import MlflowClient

from tracker.cli import cli
from tracker.spec.sections import ServerSection
from tracker.triton.endpoints import Endpoints
from tracker.triton.server.modes import make_server

MAKE = (Path(__file__).resolve().parents[2] / "projects" / "model_analyzer_quickstart"
        / "make_repository.py")
QUICKSTART = MAKE.parents[1] / "quickstart" / "make_model.py"
PA_HEADER = ["Concurrency", "Inferences/Second", "Client Send", "Network+Server Send/Recv",
             "Server Queue", "Server Compute Input", "Server Compute Infer",
             "Server Compute Output", "Client Recv", "p50 latency", "p90 latency",
             "p95 latency", "p99 latency"]
LINE = re.compile(r"^Concurrency: (\d+), throughput: ([\d.e+]+) infer/sec, latency (\d+) usec$")


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("pa") / "quick_start_repository"
    subprocess.run([sys.executable, str(MAKE), str(root)], check=True, timeout=60)
    return root


@pytest.fixture(scope="module")
def served(repository: Path) -> Iterator[Endpoints]:
    server = make_server(ServerSection())
    try:
        server.start(repository, explicit=True)
        server.load("add")
        yield server.endpoints
    finally:
        server.stop()


def _run(args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["perf-analyzer", *args])
    assert result.exit_code == 0, result.output
    return result.stdout, uri


def test_grpc_levels_print_and_log_as_perf_analyzer_s(served: Endpoints, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    out, uri = _run(["-m", "add", "-u", served.grpc, "-i", "grpc", "--concurrency-range",
                     "1:3:2", "-p", "300", "-f", "add.csv"], tmp_path, monkeypatch)
    lines = out.splitlines()
    assert lines[0] == "*** Measurement Settings ***"
    assert "  Measurement window: 300 msec" in lines
    table = lines.index("Inferences/Second vs. Client Average Batch Latency")
    printed = [LINE.match(line) for line in lines[table + 1:table + 3]]
    assert all(printed) and [int(m.group(1)) for m in printed if m] == [1, 3]
    csv = pd.read_csv(tmp_path / "add.csv")
    assert list(csv.columns)[:len(PA_HEADER)] == PA_HEADER
    assert list(csv["Concurrency"]) == [1, 3]                 # every level of the range
    for m in printed:
        assert m is not None
        row = csv[csv["Concurrency"] == int(m.group(1))].iloc[0]
        assert abs(float(m.group(2)) - row["Inferences/Second"]) < 0.01 * row["Inferences/Second"]
    run_id = out.strip().splitlines()[-1].removeprefix("MLflow run ")
    client = MlflowClient(tracking_uri=uri)
    run = client.get_run(run_id)
    assert run.data.params["model"] == "add" and run.data.params["protocol"] == "grpc"
    steps = {m.step for m in client.get_metric_history(run_id, "sweep/perf_throughput")}
    assert steps == {1, 3}
    names = {f.path for f in client.list_artifacts(run_id)}
    assert {"perf.csv", "command.txt", "config.pbtxt"} <= names


def test_http_with_a_percentile_and_zero_inputs_reports_that_percentile(
        served: Endpoints, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert served.http is not None
    url = served.http.removeprefix("http://")
    out, uri = _run(["-m", "add", "-u", url, "--percentile=95", "-p", "300", "-f", "h.csv",
                     "--input-data", "zero"], tmp_path, monkeypatch)
    run_id = out.strip().splitlines()[-1].removeprefix("MLflow run ")
    assert MlflowClient(tracking_uri=uri).get_run(run_id).data.params["input_data"] == "zero"
    assert "  Stabilizing using p95latency and throughput" in out.splitlines()
    lines = out.splitlines()
    table = lines.index("Inferences/Second vs. Client p95 Batch Latency")
    m = LINE.match(lines[table + 1])
    assert m is not None and m.group(1) == "1"              # PA's default range: 1
    csv = pd.read_csv(tmp_path / "h.csv")
    assert int(m.group(3)) == int(csv["p95 latency"].iloc[0])


def test_a_latency_threshold_ends_the_range(served: Endpoints, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    out, _uri = _run(["-m", "add", "-u", served.grpc, "-i", "grpc", "--concurrency-range",
                      "1:8", "-p", "200", "-l", "0.001"], tmp_path, monkeypatch)
    assert [line for line in out.splitlines() if LINE.match(line)] != []
    assert len([line for line in out.splitlines() if LINE.match(line)]) == 1


def test_the_in_process_mode_serves_the_repository_itself(repository: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    out, _uri = _run(["-m", "sub", "--service-kind", "triton_c_api", "--model-repository",
                      str(repository), "-p", "200", "-i", "grpc"], tmp_path, monkeypatch)
    assert f"starting the embedded Triton on {repository}, loading sub" in out
    assert any(LINE.match(line) for line in out.splitlines())


def test_the_in_process_mode_serves_an_onnx_model_through_the_shim(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repository = tmp_path / "models"
    (repository / "quickstart" / "1").mkdir(parents=True)
    subprocess.run([sys.executable, str(QUICKSTART), str(repository / "quickstart" / "1"
                                                         / "model.onnx")],
                   check=True, timeout=60, capture_output=True)
    out, uri = _run(["-m", "quickstart", "--service-kind", "triton_c_api",
                     "--model-repository", str(repository), "-p", "200", "-i", "grpc"],
                    tmp_path, monkeypatch)
    assert any(LINE.match(line) for line in out.splitlines())
    run_id = out.strip().splitlines()[-1].removeprefix("MLflow run ")
    served = MlflowClient(tracking_uri=uri).download_artifacts(run_id, "config.pbtxt", str(
        tmp_path))
    assert 'backend: "python"' in Path(served).read_text()       # the onnxruntime shim


REFUSED = [
    (["-m", "add", "--concurency-range", "1:4"], "did you mean --concurrency-range?"),
    (["-m", "add", "--streaming"], "--streaming cannot be honoured"),
    (["-m", "add", "-x", "2"], "-x cannot be honoured"),
    (["-m", "add", "--service-kind", "tfserving"], "--service-kind tfserving"),
    (["-m", "add", "--service-kind", "triton_c_api"], "go together"),
    (["--concurrency-range", "1:4"], "-m is required"),
    (["-m", "add", "--concurrency-range", "1:0"], "needs -l"),
    (["-m", "add", "--shared-memory", "cuda"], "CUDA shared memory"),
    (["-m", "add", "--ssl-grpc-use-ssl"], "TLS goes to `server.tls`"),
    (["-m", "add", "-c", "4"], "-c cannot be honoured here: deprecated in Perf Analyzer"),
    # bad values: one line naming the flag, worded as `tracker check` words a spec's
    (["-m", "add", "--input-data", "/no/such.json"], "--input-data: file not found: "
                                                     "/no/such.json"),
    (["-m", "add", "--input-data", "/"], "--input-data /: a folder of raw input files"),
    (["-m", "add", "--request-rate-range", "10:20:10", "--request-distribution", "gamma"],
     "--request-distribution must be constant or poisson, but got 'gamma'"),
    (["-m", "add", "-b", "0"], "-b: must be >= 1, but got '0'"),
    (["-m", "add", "--measurement-interval=x"], "--measurement-interval: must be an integer, "
                                                "but got 'x'"),
    (["-m", "add", "-s", "200"], "-s: must be <= 100.0, but got '200'"),
    (["-m", "add", "--max-threads", "0"], "--max-threads must be a whole number >= 1"),
    (["-m", "add", "--input-tensor-format", "json"], "--input-tensor-format json cannot be "
                                                     "honoured: tensors travel in binary"),
    (["-m", "add", "--binary-search", "--concurrency-range", "1:8"],
     "--binary-search needs -l/--latency-threshold"),
    (["-m", "add", "--binary-search", "-l", "5"], "--binary-search needs --concurrency-range"),
    (["-m", "add", "-l", "abc"], "-l/--latency-threshold 'abc': a number of milliseconds"),
    (["-m", "add", "--request-intervals", "/no/such.txt", "--request-rate-range", "10"],
     "--request-intervals and --request-rate-range exclude each other"),
    (["-m", "add", "--request-intervals", "/no/such.txt"], "--request-intervals: cannot read"),
]


@pytest.mark.parametrize(("args", "fragment"), REFUSED, ids=[f for _a, f in REFUSED])
def test_what_cannot_be_honoured_is_refused_by_name(args: list[str], fragment: str,
                                                    tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    result = CliRunner().invoke(cli, ["perf-analyzer", *args])
    assert result.exit_code == 1
    assert fragment in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "pydantic" not in result.stderr
    assert result.stdout == "" and not (tmp_path / "mlflow.db").exists()


def test_a_model_the_server_does_not_serve_is_named(served: Endpoints, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    result = CliRunner().invoke(cli, ["perf-analyzer", "-m", "nothere", "-u", served.grpc,
                                      "-i", "grpc"])
    assert result.exit_code == 1
    assert "does not serve 'nothere'" in result.stderr and "Traceback" not in result.stderr


def test_no_server_at_the_address_says_how_to_get_one(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    result = CliRunner().invoke(cli, ["perf-analyzer", "-m", "densenet_onnx",
                                      "--concurrency-range", "1:4", "-u", "127.0.0.1:1"])
    assert result.exit_code == 1 and "Traceback" not in result.stderr
    assert "no Triton answers http at 127.0.0.1:1" in result.stderr
    assert "--service-kind triton_c_api --model-repository DIR" in result.stderr


def test_request_intervals_replay_the_file_open_loop(served: Endpoints, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "gaps.txt").write_text("2000\n2000\n6000\n")  # 3 requests per 10 ms
    out, uri = _run(["-m", "add", "-u", served.grpc, "-i", "grpc", "--request-intervals",
                     str(tmp_path / "gaps.txt"), "-p", "200"], tmp_path, monkeypatch)
    assert "Request Rate: 300 inference requests per second" in out.splitlines()
    run_id = out.strip().splitlines()[-1].removeprefix("MLflow run ")
    steps = {m.step for m in MlflowClient(tracking_uri=uri).get_metric_history(
        run_id, "sweep/perf_throughput")}
    assert steps == {300}
    bad = tmp_path / "bad.txt"
    bad.write_text("100\n-3\n")
    result = CliRunner().invoke(cli, ["perf-analyzer", "-m", "add", "--request-intervals",
                                      str(bad)])
    assert result.exit_code == 1 and f"{bad}, line 2: a gap must be >= 0" in result.stderr


def test_binary_search_bisects_the_range_under_the_threshold(
        served: Endpoints, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out, _uri = _run(["-m", "add", "-u", served.grpc, "-i", "grpc", "--concurrency-range",
                      "1:8", "-p", "200", "--binary-search", "-l", "100000"], tmp_path,
                     monkeypatch)
    levels = [int(m.group(1)) for line in out.splitlines() if (m := LINE.match(line))]
    assert levels == [4, 6, 7, 8]  # every level is under 100 s: the bisection climbs to 8
