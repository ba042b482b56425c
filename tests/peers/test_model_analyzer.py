"""``tracker model-analyzer profile`` on Model Analyzer's quick-start model ``add``, with a
Model Analyzer config file and flags as its users write them, on the embedded Triton with
MLflow and Optuna on sqlite: one profile for the module (two configurations, concurrency 1
and 2, short windows), then what it wrote is read back as Model Analyzer's users read it
(pandas on the results CSV, the output model repository, the summary), its rerun resumes,
and ``report`` rewrites the reports. The refusals run no server."""

from __future__ import annotations

import datetime
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import optuna
import pandas as pd
import pytest
import yaml
from click.testing import CliRunner
from mlflow import MlflowClient

from tracker.cli import cli
from tracker.peers.model_analyzer import Profiled, profile
from tracker.tracking.scaleout import PARENT_RUN_ATTR
from tracker.triton import model_config

MAKE = (Path(__file__).resolve().parents[2] / "projects" / "model_analyzer_quickstart"
        / "make_repository.py")

HEADERS = ["Model", "Batch", "Concurrency", "Model Config Path", "Instance Group",
           "Max Batch Size", "Satisfies Constraints", "Throughput (infer/sec)",
           "p99 Latency (ms)"]


@dataclass(frozen=True)
class Run:
    root: Path
    argv: list[str]
    done: Profiled
    lines: list[str]
    uri: str
    interrupted_status: int
    interrupted: str
    resumed_at: datetime.datetime

    @property
    def storage(self) -> str:
        return f"sqlite:///{self.root / 'checkpoints' / 'optuna.db'}"


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("quick_start") / "quick_start_repository"
    subprocess.run([sys.executable, str(MAKE), str(root)], check=True, timeout=60)
    return root


def _config(root: Path, repository: Path) -> Path:
    path = root / "config.yaml"
    path.write_text(yaml.safe_dump({
        "model_repository": str(repository),
        "profile_models": "add",
        "run_config_search_max_concurrency": 2,
        "run_config_search_max_instance_count": 2,
        "perf_analyzer_flags": {"measurement-interval": 300},
        "output_model_repository_path": "output_model_repository",
    }))
    return path


def _interrupted_after_the_first_trial(argv: list[str], root: Path, uri: str) -> tuple[int, str]:
    """``tracker model-analyzer profile ARGV`` in its own process, Ctrl-C (SIGINT) as soon as
    it prints its first trial; its exit status and what it printed."""
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri}
    with subprocess.Popen([sys.executable, "-m", "tracker.cli", "model-analyzer", "profile",
                           *argv], cwd=root, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True) as proc:
        assert proc.stdout is not None
        lines = []
        try:
            for line in proc.stdout:
                lines.append(line)
                if line.startswith("trial   0"):
                    proc.send_signal(signal.SIGINT)
                    break
            lines += proc.stdout.readlines()
            return proc.wait(timeout=120), "".join(lines)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@pytest.fixture(scope="module")
def profiled(repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    """The profile, interrupted after its first configuration and run again to the end."""
    root = tmp_path_factory.mktemp("profile")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    argv = ["-f", str(_config(root, repository)), "--export-path", "profile_results"]
    status, printed = _interrupted_after_the_first_trial(argv, root, uri)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_URI", uri)
        mp.chdir(root)
        lines: list[str] = [printed]
        resumed_at = datetime.datetime.now()
        done = profile(argv, root, lines.append)
        yield Run(root, argv, done, lines, uri, status, printed, resumed_at)


def test_an_interrupted_profile_resumes_with_the_same_command(profiled: Run) -> None:
    assert profiled.interrupted_status != 0, profiled.interrupted
    assert "run the same command again: the profile resumes" in profiled.interrupted
    assert "Traceback" not in profiled.interrupted
    study = optuna.load_study(study_name="add", storage=profiled.storage)
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    before = [t for t in done if t.datetime_complete is not None
              and t.datetime_complete < profiled.resumed_at]
    assert len(before) == 1            # the configuration measured before the interrupt...
    assert sorted(t.params["instance_group.count"] for t in done) == [1, 2]  # ...not again


def test_the_output_model_repository_holds_each_configuration(profiled: Run) -> None:
    out = profiled.root / "output_model_repository"
    assert sorted(p.name for p in out.iterdir()) == ["add_config_0", "add_config_default"]
    counts = {}
    for variant in out.iterdir():
        cfg = model_config.parse((variant / "config.pbtxt").read_text())
        assert cfg.name == "add"          # served under the model's own name, as MA writes it
        counts[variant.name] = cfg.instance_group[0].count or 1
        assert (variant / "1" / "model.py").is_file()
    assert counts == {"add_config_default": 1, "add_config_0": 2}


def test_the_results_csv_reads_as_model_analyzer_s(profiled: Run) -> None:
    table = pd.read_csv(profiled.root / "profile_results" / "results"
                        / "metrics-model-inference.csv")
    assert list(table.columns) == HEADERS
    assert set(table["Model Config Path"]) == {"add_config_default", "add_config_0"}
    assert set(table["Model"]) == {"add"}
    assert set(table["Concurrency"]) <= {1, 2}
    assert (table["Throughput (infer/sec)"] > 0).all()
    assert set(table["Instance Group"]) == {"1:CPU", "2:CPU"}
    server = pd.read_csv(profiled.root / "profile_results" / "results"
                         / "metrics-server-only.csv")
    assert list(server.columns)[:2] == ["Model", "GPU UUID"]


def test_the_summary_says_what_model_analyzer_says(profiled: Run) -> None:
    assert profiled.done.configurations == 2
    assert "Profile complete. Profiled 2 configurations for models: ['add']" in profiled.lines
    sentence = profiled.done.sentences["add"]
    assert sentence.startswith("In ") and "across 2 configurations" in sentence
    page = (profiled.root / "profile_results" / "reports" / "summaries" / "add"
            / "result_summary.html").read_text()
    assert sentence in page
    detailed = profiled.root / "profile_results" / "reports" / "detailed"
    assert {p.name for p in detailed.iterdir()} <= {"add_config_default", "add_config_0"}


def test_the_translation_and_the_command_are_logged_on_the_parent_run(profiled: Run) -> None:
    study = optuna.load_study(study_name="add", storage=profiled.storage)
    parent = study.user_attrs[PARENT_RUN_ATTR]
    client = MlflowClient(tracking_uri=profiled.uri)
    names = {f.path for f in client.list_artifacts(parent, "model_analyzer")}
    assert names == {"model_analyzer/study.yaml", "model_analyzer/command.txt",
                     "model_analyzer/config.yaml"}
    spec = yaml.safe_load((profiled.root / "checkpoints" / "add" / "study.yaml").read_text())
    assert spec["search"]["space"] == {"instance_group.count": [1, 2]}
    assert spec["load"]["window_ms"] == 300


def test_the_same_command_again_resumes_and_runs_no_trial(profiled: Run,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", profiled.uri)
    monkeypatch.chdir(profiled.root)
    study = optuna.load_study(study_name="add", storage=profiled.storage)
    before = len(study.trials)
    lines: list[str] = []
    again = profile(profiled.argv, profiled.root, lines.append)
    assert len(optuna.load_study(study_name="add",
                                 storage=profiled.storage).trials) == before
    assert again.configurations == 2


def test_report_writes_the_detailed_report_of_a_named_configuration(
        profiled: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", profiled.uri)
    monkeypatch.chdir(profiled.root)
    result = CliRunner().invoke(cli, ["model-analyzer", "report", "--report-model-configs",
                                      "add_config_0", "-e", "again", "-s", "checkpoints"])
    assert result.exit_code == 0, result.output
    page = profiled.root / "again" / "reports" / "detailed" / "add_config_0"
    assert "add_config_0" in (page / "detailed_report.html").read_text()
    assert "add: In " in result.output


REFUSED = [
    (["--profile-models", "add", "--triton-launch-mode", "c_api"], "c_api"),
    (["--profile-model", "add"], "did you mean --profile-models?"),
    (["--profile-models", "nothere"], "no folder"),
    (["--profile-models", "add", "--perf-analyzer-timeout", "5"], "only its default, 600"),
    (["--profile-models", "add_sub"], "needs Triton's 'pytorch' backend"),
    (["--profile-models", "add", "--run-config-search-mode", "fast"], "brute, quick or optuna"),
]


@pytest.mark.parametrize(("args", "fragment"), REFUSED, ids=[f for _a, f in REFUSED])
def test_what_cannot_be_honoured_is_refused_before_any_server(
        args: list[str], fragment: str, repository: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["model-analyzer", "profile", "--model-repository",
                                      str(repository), *args])
    assert result.exit_code == 1, result.output
    assert fragment in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "mlflow.db").exists()          # no study, no run: nothing started
    assert not (tmp_path / "checkpoints" / "optuna.db").exists()


def test_offline_mode_and_genai_flags_are_refused(repository: Path, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    offline = CliRunner().invoke(cli, ["model-analyzer", "-m", "offline", "profile"])
    assert offline.exit_code == 1 and "--mode offline cannot be honoured" in offline.stderr
    config = tmp_path / "ma.yaml"
    config.write_text(yaml.safe_dump({"model_repository": str(repository),
                                      "profile_models": "add",
                                      "genai_perf_flags": {"streaming": True}}))
    genai = CliRunner().invoke(cli, ["model-analyzer", "profile", "-f", str(config)])
    assert genai.exit_code == 1
    assert f"{config}: genai_perf_flags cannot be honoured" in genai.stderr


BAD_VALUES = [
    ({"constraints": {"perf_latency_p99": {"max": -5}}},
     "constraints.perf_latency_p99.max: must be >= 0 (perf_latency_p99 is never negative), "
     "but got -5"),
    ({"perf_analyzer_flags": {"measurement-interval": 0}},
     "perf_analyzer_flags measurement-interval: must be >= 1, but got 0"),
    ({"perf_analyzer_flags": {"input-data": "no_such.json"}},
     "perf_analyzer_flags input-data: file not found: "),
]


@pytest.mark.parametrize(("options", "line"), BAD_VALUES, ids=[v[1][:40] for v in BAD_VALUES])
def test_a_bad_value_is_refused_in_one_line_naming_its_key(
        options: dict[str, object], line: str, repository: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "ma.yaml"
    config.write_text(yaml.safe_dump({"model_repository": str(repository),
                                      "profile_models": "add", **options}))
    result = CliRunner().invoke(cli, ["model-analyzer", "profile", "-f", str(config)])
    assert result.exit_code == 1
    assert result.stderr.startswith(f"error: {config}: {line}"), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "pydantic" not in result.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["ma.yaml"]     # nothing written or run


def test_zero_input_data_translates_to_the_load_s_input_fill(repository: Path,
                                                             tmp_path: Path) -> None:
    from tracker.peers.ma_translate import translate

    plan = translate({"model_repository": str(repository), "profile_models": "add",
                      "perf_analyzer_flags": {"input-data": "zero"}}, tmp_path)
    load = plan.studies[0].spec["load"]
    assert isinstance(load, dict) and load["input_fill"] == "zero" and "input_data" not in load


def test_an_output_folder_that_exists_is_refused_as_model_analyzer_refuses_it(
        repository: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "results").mkdir()
    result = CliRunner().invoke(cli, ["model-analyzer", "profile", "--model-repository",
                                      str(repository), "--profile-models", "add",
                                      "--output-model-repository-path", "results"])
    assert result.exit_code == 1
    assert "already exists" in result.stderr
    assert "--override-output-model-repository" in result.stderr


# ---- the translation alone (no server) -------------------------------------------------------

def _plan(repository: Path, tmp_path: Path, *argv: str) -> dict[str, object]:
    from tracker.peers.ma_options import read_options
    from tracker.peers.ma_translate import translate

    options, _config = read_options(["--model-repository", str(repository), *argv])
    plan = translate(options, tmp_path)
    assert len(plan.studies) == 1
    return plan.studies[0].spec


def test_brute_is_the_grid_of_model_analyzer_s_space_swept_in_full(repository: Path,
                                                                   tmp_path: Path) -> None:
    spec = _plan(repository, tmp_path, "--profile-models", "add", "--latency-budget", "5")
    search = spec["search"]
    assert isinstance(search, dict)
    assert search["sampler"] == "grid" and search["sweep"] == "full"
    assert search["space"] == {"instance_group.count": [1, 2, 3, 4, 5]}
    assert search["n_trials"] == 6                  # every configuration, and the default
    assert spec["load"] == {"protocol": "grpc", "concurrency": {"start": 1, "stop": 1024},
                            "batch_size": 1}
    assert spec["constraints"] == {"perf_latency_p99": {"max": 5}}


def test_quick_is_tpe_with_model_analyzer_s_budget(repository: Path, tmp_path: Path) -> None:
    spec = _plan(repository, tmp_path, "--profile-models", "add", "--run-config-search-mode",
                 "quick", "--run-config-search-max-instance-count", "3", "-c", "4,8")
    search = spec["search"]
    assert isinstance(search, dict)
    assert search["sampler"] == "tpe" and "sweep" not in search
    assert search["n_trials"] == 4                  # min(size 3, optuna_min_trials 20) + 1
    assert spec["load"] == {"protocol": "grpc", "concurrency": [4, 8], "batch_size": 1}


def test_an_ensemble_is_one_study_of_its_steps(repository: Path, tmp_path: Path) -> None:
    spec = _plan(repository, tmp_path, "--profile-models", "ensemble_add_sub",
                 "--run-config-search-max-instance-count", "2")
    model, search = spec["model"], spec["search"]
    assert isinstance(model, dict) and isinstance(search, dict)
    assert model == {"name": "ensemble_add_sub", "path": str(repository)}
    assert search["space"] == {"add/instance_group.count": [1, 2],
                               "sub/instance_group.count": [1, 2]}
    assert search["sampler"] == "tpe"               # Model Analyzer's quick for ensembles


def test_the_sample_project_s_spec_is_what_its_config_file_translates_to(
        repository: Path, tmp_path: Path) -> None:
    project = MAKE.parent
    spec = _plan(repository, tmp_path, "-f", str(project / "config.yaml"))
    native = yaml.safe_load((project / "study.yaml").read_text())
    assert isinstance(spec["search"], dict) and isinstance(spec["load"], dict)
    for key in ("sampler", "sweep", "space", "n_trials"):
        assert spec["search"][key] == native["search"][key], key
    assert spec["load"] == native["load"]
    assert spec["objectives"] == native["objectives"]
    assert spec["confirm"] == native["confirm"]


def test_analyze_is_profile_as_in_model_analyzer(repository: Path, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["model-analyzer", "analyze", "--model-repository",
                                      str(repository), "--profile-models", "add",
                                      "--run-config-search-mode", "fast"])
    assert result.exit_code == 1 and "brute, quick or optuna" in result.stderr
