"""Command-line overrides of the spec, ${VAR} in storage URLs, the CLI's empty MLproject
parameters, and the progress line (no server needed)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.support.tune import write_spec
from tracker.cli import cli
from tracker.errors import SpecError
from tracker.invocation.progress import Progress
from tracker.invocation.session import TuneOptions, apply_overrides, expand_env
from tracker.spec import load_spec


@pytest.fixture()
def spec_path(tmp_path: Path) -> Path:
    return write_spec(tmp_path, tmp_path / "model.onnx", {"instance_group.count": [1, 2]},
                      n_trials=5)


def test_overrides_replace_spec_values_and_are_validated(spec_path: Path) -> None:
    spec = load_spec(spec_path)
    got = apply_overrides(spec, TuneOptions(n_trials=9, study_name="other", sampler="random",
                                            server={"strategy": "reload", "mode": None}))
    assert (got.search.n_trials, got.study_name, got.search.sampler) == (9, "other", "random")
    assert got.server.strategy == "reload" and got.server.mode == "local"
    assert got.search.space == spec.search.space and got.base_dir == spec.base_dir
    with pytest.raises(SpecError, match="url"):
        apply_overrides(spec, TuneOptions(server={"mode": "remote"}))
    assert apply_overrides(spec, TuneOptions()) is spec


def test_storage_url_reads_variables_from_the_environment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGPASS_TEST", "s3cr3t")
    assert expand_env("postgresql://u:${PGPASS_TEST}@db/o") == "postgresql://u:s3cr3t@db/o"
    assert expand_env("postgresql://u:${NOT_SET_ANYWHERE}@db/o") == \
        "postgresql://u:${NOT_SET_ANYWHERE}@db/o"
    assert expand_env("sqlite:///a$b.db") == "sqlite:///a$b.db"


def test_empty_mlproject_parameters_mean_not_given(spec_path: Path) -> None:
    result = CliRunner().invoke(cli, ["tune", str(spec_path), "--n-trials", "x"])
    assert result.exit_code == 2 and "not a valid int" in result.output
    # '' for every optional value is accepted (the spec's own values stay); the model file is
    # missing, so the command stops with the spec's error and exit status 1
    result = CliRunner().invoke(cli, ["tune", str(spec_path), "--n-trials", "", "--timeout", "",
                                      "--sampler", "", "--mode", "", "--storage", ""])
    assert result.exit_code == 1 and "model.path" in result.output


def test_progress_line_per_trial() -> None:
    out = io.StringIO()
    progress = Progress(3, 0, out=out, bar=False)
    progress.trial(2, {"instance_group.count": 2}, state="COMPLETE",
                   metrics={"perf_throughput": 1234.5, "perf_latency_p99": 7.25},
                   feasible=True, best="trial 2 (perf_throughput 1,234.5)", complete=1)
    progress.close()
    line = out.getvalue()
    assert line.startswith("trial   2  instance_group.count=2  1,234.5 infer/s  p99 7.25 ms")
    assert "feasible  best: trial 2" in line
