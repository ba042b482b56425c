"""Two independent entry models in one study on the embedded Triton: an ensemble (``pipe``,
Python -> ONNX -> Python) and a Python model (``other``), each driven by its own load at the
same time. Every trial logs each model's throughput and p99, and the value the study optimised
is Model Analyzer's weighted relative gain against the default configuration, with the spec's
weights, recomputed here from the logged figures."""

from __future__ import annotations

import re
from pathlib import Path

import mlflow
import optuna
import pytest
import yaml
from click.testing import CliRunner

from tests.support.pipeline import ensemble_repository
from tracker import tags
from tracker.cli import cli
from tracker.triton import model_config

pytestmark = pytest.mark.triton

WEIGHTS = {"pipe": 3.0, "other": 1.0}


def _spec(tmp: Path, repo: Path, uri: str) -> Path:
    path = tmp / "study.yaml"
    path.write_text(f"""
model:
  name: [pipe, other]
  path: {repo}
  weights: {{pipe: 3, other: 1}}
load:
  concurrency: [2]
  window_ms: 300
  max_tries: 4
  warmup_requests: 10
  stability_pct: 50
  models:
    other: {{concurrency: [1, 4]}}
constraints: {{perf_latency_p99: {{max: 10000}}}}
search:
  sampler: grid
  seed: 3
  n_trials: 3
  space:
    prep/instance_group.count: [1, 2]
    other/max_batch_size: [1, 8]
  storage: sqlite:///{tmp / 'optuna.db'}
mlflow: {{tracking_uri: "{uri}", experiment: joint}}
confirm: {{top_k: 1, rounds: 3, min_rounds: 3, budget_s: 600}}
""")
    return path


def _gain(metrics: dict[str, float], ref: dict[str, float]) -> float:
    """Model Analyzer's weighting, written out: sum_m w_m (x_m - r_m) / mean(x_m, r_m)."""
    total = sum(WEIGHTS.values())
    score = 0.0
    for model, weight in WEIGHTS.items():
        x, r = metrics[f"{model}/perf_throughput"], ref[f"{model}/perf_throughput"]
        score += weight / total * (x - r) / ((x + r) / 2)
    return score


def test_two_models_are_measured_together_and_the_weighted_gain_is_optimised(
        tmp_path: Path, mlflow_uri: str) -> None:
    repo = ensemble_repository(tmp_path / "user-repo")
    spec = _spec(tmp_path, repo, mlflow_uri)
    checked = CliRunner().invoke(cli, ["check", str(spec)])
    assert checked.exit_code == 0, checked.output
    tuned = CliRunner().invoke(cli, ["tune", str(spec), "--no-bar"])
    assert tuned.exit_code == 0, tuned.output
    # the best and the default side by side: a block drives both entries of one copy
    assert re.search(r"confirm pair 3: trial-\d+ pipe [\d,.]+ infer/s; other [\d,.]+ infer/s, "
                     r"then trial-\d+ pipe ", tuned.output), tuned.output

    study = optuna.load_study(study_name="pipe+other",
                              storage=f"sqlite:///{tmp_path / 'optuna.db'}")
    client = mlflow.MlflowClient(mlflow_uri)
    exp = client.get_experiment_by_name("joint")
    runs = client.search_runs([exp.experiment_id])
    by_trial = {int(r.data.tags[tags.TRIAL]): r for r in runs
                if r.data.tags.get(tags.PARENT)}
    parent = next(r for r in runs if not r.data.tags.get(tags.PARENT))
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(done) == 3, tuned.output
    base = next(t for t in done if t.user_attrs.get("baseline"))
    ref = by_trial[base.number].data.metrics
    assert base.value == pytest.approx(0.0) and ref["weighted_gain"] == pytest.approx(0.0)
    for t in done:
        run = by_trial[t.number]
        m = run.data.metrics
        for model in ("pipe", "other"):
            assert m[f"{model}/perf_throughput"] > 0
            assert m[f"{model}/perf_latency_p99"] > 0
        assert m["pipe/concurrency"] == 2 and m["other/concurrency"] in (1, 4)
        assert "model/prep/queue_ms" not in m or m["model/prep/queue_ms"] >= 0
        # what Optuna was told is the weighted gain of the logged figures (weights 3:1)
        assert t.value == pytest.approx(_gain(m, ref), rel=1e-6, abs=1e-9)
        assert m["weighted_gain"] == pytest.approx(t.value)
        sweep = client.get_metric_history(run.info.run_id, "sweep/other/perf_throughput")
        assert {h.step for h in sweep} <= {1, 4} and sweep  # each model's own levels
        assert not client.get_metric_history(run.info.run_id, "sweep/perf_throughput")
        files = {f.path for name in WEIGHTS for f in client.list_artifacts(run.info.run_id, name)}
        assert files == {"pipe/perf.csv", "other/perf.csv"}  # named as the metrics are
        if not t.user_attrs.get("baseline"):
            other = model_config.parse(Path(client.download_artifacts(
                run.info.run_id, "configs/other/config.pbtxt", str(tmp_path / run.info.run_id)
            )).read_text())
            assert other.max_batch_size == int(run.data.params["other/max_batch_size"])
    # the confirmation: the search's best and the default in pairs of blocks in one server,
    # each pair's weighted_gain against the default's block of that pair
    record = study.user_attrs["confirm"]
    assert record["design"] == "paired" and 3 <= len(record["rounds"]) <= 9
    chosen = [c["trial"] for c in record["candidates"]]
    others = [t for t in done if not t.user_attrs.get("baseline")]
    assert chosen == [base.number, max(others, key=lambda t: t.value or 0.0).number]
    for rnd in record["rounds"]:
        got = {int(n): r for n, r in rnd["results"].items()}
        assert sorted(got) == sorted(chosen)  # both copies answered in every pair
        assert got[base.number]["weighted_gain"] == 0.0
        other = got[chosen[1]]
        assert other["weighted_gain"] == pytest.approx(
            _gain(other["models"], got[base.number]["models"]))
        assert other["models"]["other/concurrency"] == by_trial[chosen[1]].data.metrics[
            "other/concurrency"]  # at its own level
    verdict = parent.data.tags[tags.VERDICT]
    assert verdict in ("better", "tied", "equivalent", "inconclusive")
    note = parent.data.tags[tags.NOTE]
    assert "side by side" in note and "weighted" in note
    assert "confirm/improvement_pct" in by_trial[chosen[1]].data.metrics
    assert "improvement_pct" in parent.data.metrics
    best_trial = int(parent.data.tags[tags.BEST_TRIAL])
    assert best_trial == (chosen[1] if verdict in ("better", "tied") else base.number)
    files = {f.path for f in client.list_artifacts(parent.info.run_id, "best")}
    assert {"best/pipe", "best/other", "best/prep"} <= files
    # the report: each entry model's throughput, p99 and level, a column and a trace each
    head = Path(client.download_artifacts(parent.info.run_id, "trials.csv", str(tmp_path / "r"))
                ).read_text().splitlines()[0].split(",")
    each = [f"{m}/{f}" for m in WEIGHTS for f in ("perf_throughput", "perf_latency_p99",
                                                  "concurrency")]
    assert [h for h in head if h in each] == each and "concurrency" not in head
    plot = Path(client.download_artifacts(parent.info.run_id, "plots/tradeoff.html",
                                          str(tmp_path / "r"))).read_text()
    assert all(f'"legendgroup":"{m}"' in plot for m in WEIGHTS)

    # promoted as one registry version that holds both entry models and the ensemble's steps
    # (--force: the verdict may keep the default; deploying it: tests/deploy/test_entries_*)
    promoted = CliRunner().invoke(cli, ["promote", str(spec), "--no-deploy", "--force"])
    assert promoted.exit_code == 0, promoted.output
    assert "pipe+other version 1 " in promoted.output, promoted.output
    # its description names each entry model's figures at the promoted trial, as the note does
    described = client.get_model_version("pipe+other", "1").description
    for model in WEIGHTS:
        assert re.search(rf"\b{model} [\d,.]+ infer/s at concurrency \d", described), described
    local = Path(mlflow.artifacts.download_artifacts("models:/pipe+other/1",
                                                     dst_path=str(tmp_path / "registered")))
    triton = yaml.safe_load((local / "MLmodel").read_text())["flavors"]["triton"]
    assert triton["entries"] == ["pipe", "other"] and triton["models"][-2:] == ["pipe", "other"]
    assert {"prep", "pipe", "other"} <= {p.name for p in local.iterdir() if p.is_dir()}


def test_several_models_refuse_a_shared_load_knob(tmp_path: Path, mlflow_uri: str) -> None:
    repo = ensemble_repository(tmp_path / "user-repo")
    spec = _spec(tmp_path, repo, mlflow_uri)
    bad = tmp_path / "bad.yaml"
    bad.write_text(spec.read_text().replace("    other/max_batch_size: [1, 8]",
                                            "    concurrency: [1, 8]"))
    checked = CliRunner().invoke(cli, ["check", str(bad)])
    assert checked.exit_code == 1
    assert "search.space.concurrency: sets every model's load at once" in checked.output


def test_profile_of_several_models_shows_and_logs_each_model(tmp_path: Path,
                                                             mlflow_uri: str) -> None:
    repo = ensemble_repository(tmp_path / "user-repo")
    spec = _spec(tmp_path, repo, mlflow_uri)
    got = CliRunner().invoke(cli, ["profile", str(spec), "--set", "prep/instance_group.count=2",
                                   "--csv", str(tmp_path / "perf.csv")])
    assert got.exit_code == 0, got.output
    assert "model pipe:" in got.output and "model other:" in got.output
    assert "best joint level: pipe concurrency 2, " in got.output
    assert (tmp_path / "perf-pipe.csv").is_file() and (tmp_path / "perf-other.csv").is_file()
    client = mlflow.MlflowClient(mlflow_uri)
    exp = client.get_experiment_by_name("joint")
    run = client.search_runs([exp.experiment_id])[0]
    assert run.data.metrics["pipe/perf_throughput"] > 0
    assert run.data.metrics["other/perf_throughput"] > 0
    assert client.get_metric_history(run.info.run_id, "sweep/other/perf_throughput")
    refused = CliRunner().invoke(cli, ["profile", str(spec), "--perf-analyzer",
                                       "--csv", str(tmp_path / "pa.csv")])
    assert refused.exit_code == 1
    assert "perf_analyzer drives one model alone" \
        in refused.output
