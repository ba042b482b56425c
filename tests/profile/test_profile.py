"""`tracker profile SPEC --concurrency ... --config FILE`: table printed, perf_analyzer-format
CSV written, no server left behind (conftest checks the last part after every test)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from tracker.cli import cli
from tracker.measure.csvio import COLUMNS

QUICKSTART = Path(__file__).resolve().parents[2] / "projects" / "quickstart"

SPEC = """
model:
  name: quickstart
  path: model.onnx
  build: make_model.py
server:
  mode: local
load:
  concurrency: [1, 2, 4, 8]
  window_ms: 250
  max_tries: 4
  stability_pct: 50
  warmup_requests: 10
"""

CONFIG = """
name: "quickstart"
max_batch_size: 8
dynamic_batching { max_queue_delay_microseconds: 100 }
instance_group [{ count: 2 kind: KIND_CPU }]
"""


@pytest.mark.triton
def test_profile_prints_the_table_and_writes_the_csv(tmp_path: Path, mlflow_uri: str) -> None:
    for name in ("make_model.py", "model.onnx"):
        if (QUICKSTART / name).exists():
            shutil.copy(QUICKSTART / name, tmp_path / name)
    (tmp_path / "study.yaml").write_text(SPEC)
    (tmp_path / "tuned.pbtxt").write_text(CONFIG)
    csv_path = tmp_path / "out" / "perf.csv"
    result = CliRunner().invoke(cli, [
        "profile", str(tmp_path / "study.yaml"), "--concurrency", "1,4",
        "--config", str(tmp_path / "tuned.pbtxt"), "--csv", str(csv_path)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    head = next(i for i, line in enumerate(lines) if line.strip().startswith("concurrency"))
    assert lines[head].split()[:7] == ["concurrency", "infer/s", "p50", "ms", "p99", "ms",
                                       "queue"]
    assert [lines[head + 1].split()[0], lines[head + 2].split()[0]] == ["1", "4"]
    df = pd.read_csv(csv_path)
    assert list(df.columns) == ["Concurrency", "Inferences/Second", *COLUMNS]
    assert list(df["Concurrency"]) == [1, 4]
    assert (df["Inferences/Second"] > 0).all() and (df["p99 latency"] > 0).all()
    assert df["Server Compute Infer"].notna().all()


def test_profile_rejects_a_bad_concurrency_list(tmp_path: Path) -> None:
    (tmp_path / "study.yaml").write_text(SPEC)
    result = CliRunner().invoke(cli, ["profile", str(tmp_path / "study.yaml"),
                                      "--concurrency", "1,four"])
    assert result.exit_code == 2
    assert "like 1,4,16, but got '1,four'" in result.output


@pytest.mark.triton
def test_profile_refuses_a_configuration_whose_outputs_differ(tmp_path: Path,
                                                              mlflow_uri: str) -> None:
    """No study yet: the default configuration is served first and answers the probes, then
    the profiled one (a dynamic batcher on a model that mixes batch items) fails its check
    before it is measured, with the output named, and the command exits 1."""
    project = QUICKSTART.parent / "batch_dependent"
    for name in ("make_model.py", "config.pbtxt"):
        shutil.copy(project / name, tmp_path / name)
    (tmp_path / "study.yaml").write_text(SPEC.replace("quickstart", "batch_dependent").replace(
        "build: make_model.py\n", "build: make_model.py\n  config: config.pbtxt\n"))
    result = CliRunner().invoke(cli, [
        "profile", str(tmp_path / "study.yaml"), "--concurrency", "1",
        "--set", "max_batch_size=8", "--set", "dynamic_batching.max_queue_delay_microseconds=100"])
    assert result.exit_code == 1, result.output
    assert "outputs differ from the default configuration's" in result.output
    assert "output 'OUTPUT0' of probe" in result.output
    assert "Traceback" not in result.output
