"""The confirmation round on a real tritonserver, real MLflow sqlite and Optuna sqlite: after
the search, `tracker confirm` continuing a finished study's rounds, an interrupted confirmation
resuming, and a study where nothing beats the default."""

from __future__ import annotations

import html
import os
import re
import signal
import subprocess
from pathlib import Path
from typing import Any

import optuna
import pytest
from click.testing import CliRunner
from mlflow import MlflowClient

from tests.support.tune import (
    REPO,
    TRACKER,
    all_runs,
    build_quickstart,
    env_for,
    trials,
    wait_for,
    write_spec,
)
from tracker.cli import cli
from tracker.confirm import paired
from tracker.deploy.promote import Release, promote
from tracker.errors import DeployError
from tracker.invocation.session import TuneOptions
from tracker.tags import STUDY_RUN_ID
from tracker.tracking import runs
from tracker.tuning.tune import tune
from tracker.verdict import record as confirmed

pytestmark = pytest.mark.triton

CONFIRM = {"enabled": True, "top_k": 2, "rounds": 3, "min_rounds": 2, "budget_s": 600,
           "design": "rounds"}


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_quickstart(tmp_path_factory.mktemp("quickstart"))


def _record(storage: str, name: str = "quick") -> dict[str, Any]:
    study = optuna.load_study(study_name=name, storage=optuna.storages.RDBStorage(storage))
    record = confirmed.load(study)
    assert record is not None
    return record


def _measured(record: dict[str, Any]) -> list[tuple[int, str, float]]:
    return [(i, n, got["perf_throughput"]) for i, rnd in enumerate(record["rounds"])
            for n, got in rnd["results"].items() if "perf_throughput" in got]


def _parent(uri: str) -> Any:
    parents = [r for r in all_runs(uri) if r.data.tags.get(runs.ROLE) == "study"]
    assert len(parents) == 1
    return parents[0]


def test_tune_confirms_then_tracker_confirm_reproduces_and_resumes(
        tmp_path: Path, model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env = env_for(tmp_path)
    uri = env["MLFLOW_TRACKING_URI"]
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.chdir(tmp_path)
    spec = write_spec(tmp_path, model, {"instance_group.count": [1, 2],
                                        "max_batch_size": [1, 8]}, n_trials=3,
                      confirm=CONFIRM, load={"concurrency": [4]})
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    result = tune(spec, TuneOptions(bar=False, store_model=False))
    searched = len(trials(storage))

    record = _record(storage)
    assert record["status"] == "done"
    assert 2 <= len(record["rounds"]) <= 3 and record["stop"]
    assert all("seconds" in got for rnd in record["rounds"] for got in rnd["results"].values())
    numbers = [c["trial"] for c in record["candidates"]]
    assert numbers[0] == 0 and record["candidates"][0]["baseline"] and len(numbers) == 3
    for rnd in record["rounds"][:2]:  # every candidate in each of the first min_rounds
        assert sorted(int(n) for n in rnd["order"]) == sorted(numbers)
    assert re.search(r"(confirmed in|inconclusive after) \d interleaved rounds", result.summary)
    assert "95% CI" in result.summary

    parent = _parent(uri)
    metrics, tags = parent.data.metrics, parent.data.tags
    for name in ("confirm/perf_throughput", "confirm/perf_throughput_ci_low",
                 "confirm/perf_throughput_ci_high", "improvement_pct",
                 "improvement_pct_ci_low", "improvement_pct_ci_high"):
        assert name in metrics, name
    assert metrics["confirm/perf_throughput_ci_low"] <= metrics["confirm/perf_throughput_ci_high"]
    assert metrics["improvement_pct_ci_low"] <= metrics["improvement_pct_ci_high"]
    assert tags[confirmed.VERDICT_TAG] in ("better", "tied", "equivalent", "inconclusive")
    assert tags["tracker.confirm_stop"] == record["stop"]
    assert tags[runs.NOTE_TAG] == result.summary
    client = MlflowClient(uri)
    assert "confirm.csv" in {f.path for f in client.list_artifacts(parent.info.run_id)}
    report = Path(client.download_artifacts(parent.info.run_id, "report.html",
                                            str(tmp_path))).read_text()
    assert html.escape(result.summary) in report  # the report says what the note says
    kids = {r.data.tags.get("tracker.trial"): r for r in all_runs(uri)
            if r.data.tags.get(runs.PARENT_TAG) == parent.info.run_id}
    ranks = sorted(int(kids[str(n)].data.tags[confirmed.RANK_TAG]) for n in numbers)
    assert ranks == [1, 2, 3]
    for n in numbers:
        assert "confirm/perf_throughput_ci_high" in kids[str(n)].data.metrics

    # the MLproject's confirm entry point on the finished study continues the same rounds (up
    # to 5 in all, fewer when decided), no new trial; MLflow's own run for it points at the
    # study's parent run
    env["PATH"] = f"{Path(TRACKER).parent}{os.pathsep}{env.get('PATH', '')}"
    proc = subprocess.run([str(Path(TRACKER).parent / "mlflow"), "run", str(REPO), "-e",
                           "confirm", "--env-manager", "local", "-P", f"spec={spec}",
                           "-P", "rounds=5"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "verdict: " in proc.stdout and "95% CI" in proc.stdout
    again = _record(storage)
    assert again["started"] == record["started"] and again["status"] == "done"
    assert len(record["rounds"]) <= len(again["rounds"]) <= 5
    assert again["rounds"][:len(record["rounds"])] == record["rounds"]  # kept, then more
    assert len(trials(storage)) == searched
    parent = _parent(uri)
    assert parent.data.tags[runs.NOTE_TAG] in proc.stdout
    assert parent.data.metrics["confirm/rounds"] == len(again["rounds"])
    own = [r for r in all_runs(uri) if r.data.tags.get(runs.ROLE) == "confirm"]
    assert len(own) == 1 and own[0].info.status == "FINISHED"
    assert own[0].data.tags[STUDY_RUN_ID] == parent.info.run_id
    assert own[0].data.tags[confirmed.VERDICT_TAG] == parent.data.tags[confirmed.VERDICT_TAG]

    # a new one (--new), interrupted after its first measurement, continues where it stopped
    live = subprocess.Popen([TRACKER, "confirm", str(spec), "--new", "--rounds", "3"],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        wait_for(lambda: _record(storage)["started"] != again["started"]
                 and len(_measured(_record(storage))) >= 1, 240, "a first measurement", live)
        live.send_signal(signal.SIGINT)
        out, _ = live.communicate(timeout=120)
    finally:
        if live.poll() is None:
            live.kill()
    assert live.returncode == 130, out
    cut = _record(storage)
    assert cut["status"] == "running"
    kept = _measured(cut)
    assert 1 <= len(kept) < 3 * len(numbers)
    cli_result = CliRunner().invoke(cli, ["confirm", str(spec), "--rounds", "3"])
    assert cli_result.exit_code == 0, cli_result.output
    done = _record(storage)
    assert done["status"] == "done" and done["started"] == cut["started"]
    assert set(kept) <= set(_measured(done))  # the measurements before the cut are kept

    # a confirmation recorded in rounds before the paired design existed (no "design" in its
    # record) goes on in rounds under `design: auto`: its rounds kept, no new paired one
    study = optuna.load_study(study_name="quick", storage=optuna.storages.RDBStorage(storage))
    study.set_user_attr(confirmed.ATTR, {k: v for k, v in done.items()
                                         if k not in ("design", "design_reason")})
    auto = write_spec(tmp_path, model, {"instance_group.count": [1, 2], "max_batch_size": [1, 8]},
                      n_trials=3, confirm={**CONFIRM, "design": "auto"},
                      load={"concurrency": [4]})
    more = str(len(done["rounds"]) + 1)
    cli_result = CliRunner().invoke(cli, ["confirm", str(auto), "--rounds", more])
    assert cli_result.exit_code == 0, cli_result.output
    went_on = _record(storage)
    assert went_on["started"] == done["started"] and went_on["design"] == "rounds"
    assert went_on["rounds"][:len(done["rounds"])] == done["rounds"]
    assert "recorded in rounds" in went_on["design_reason"]
    parent = _parent(uri)
    assert parent.data.tags["tracker.confirm_design"] == "rounds"
    assert "recorded in rounds" in parent.data.tags["tracker.confirm_design_reason"]


def test_a_study_where_nothing_beats_the_default_is_equivalent(
        tmp_path: Path, model: Path, monkeypatch: pytest.MonkeyPatch,
        capfd: pytest.CaptureFixture[str]) -> None:
    """The only other configuration (the grid is the default's delay 0, widened in, and 20 ms;
    3 trials: the default, and both grid points, one a duplicate of the default) waits 20 ms
    for a batch that concurrency 1 never fills:
    far slower than the default, so the verdict must be equivalent (the default is as good:
    none beats it by more than the tie margin), said plainly, and promotion is refused. The
    confirmation is paired (design auto, one model, no server option): both copies served by
    one server, each pair one reading of each, the order alternating; the copies loaded
    again before every second pair (every 4 pairs by default), and after each load both
    copies under load together, unmeasured, before the pair's blocks (paired.WARM_S, here
    0.3 s), their windows at once (no warm-up requests), while a block ramps up first."""
    monkeypatch.setattr(paired, "RELOAD_PAIRS", 2)
    monkeypatch.setattr(paired, "WARM_S", 0.3)
    sweeps: list[str] = []  # W: both copies together (the warm-up), B: one copy's block
    real_sweep = paired.sweep

    def sweep(endpoints: Any, entries: Any, *args: Any, **kwargs: Any) -> Any:
        ramps = {e.load.warmup_requests > 0 for e in entries.values()}
        sweeps.append({(2, False): "W", (1, True): "B"}.get((len(entries), *ramps), "?"))
        return real_sweep(endpoints, entries, *args, **kwargs)

    monkeypatch.setattr(paired, "sweep", sweep)
    uri = env_for(tmp_path)["MLFLOW_TRACKING_URI"]
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.chdir(tmp_path)
    spec = write_spec(tmp_path, model, {"dynamic_batching.max_queue_delay_microseconds": [20000],
                                        "instance_group.count": [1]}, n_trials=3,
                      confirm={**CONFIRM, "rounds": 4, "min_rounds": 3, "design": "auto"},
                      load={"concurrency": [1]})
    result = tune(spec, TuneOptions(bar=False, store_model=False))
    assert "equivalent: no configuration beats the default configuration" in result.summary
    record = _record(f"sqlite:///{tmp_path / 'optuna.db'}")
    assert record["design"] == "paired" and len(record["candidates"]) == 2
    assert all(sorted(rnd["order"]) == sorted(c["trial"] for c in record["candidates"])
               and set(rnd["results"]) == {str(n) for n in rnd["order"]}
               for rnd in record["rounds"])
    assert re.search(r"confirmed in \d+ pairs side by side", result.summary)
    assert all(a["order"] == b["order"][::-1]
               for a, b in zip(record["rounds"], record["rounds"][1:], strict=False))
    out = capfd.readouterr().out
    reloads = re.findall(r"confirm pair (\d+): the two copies loaded again", out)
    pairs = len(record["rounds"])
    assert reloads == [str(k) for k in range(3, pairs + 1, 2)]
    warms = re.findall(r"confirm pair (\d+): the two copies warmed together", out)
    assert warms == [str(k) for k in range(1, pairs + 1, 2)]
    assert "".join(sweeps) == "".join(("W" if i % 2 == 0 else "") + "BB" for i in range(pairs))
    parent = _parent(uri)
    assert parent.data.tags[confirmed.VERDICT_TAG] == "equivalent"
    assert parent.data.tags["tracker.confirm_design"] == "paired"
    plots = {f.path for f in MlflowClient(uri).list_artifacts(parent.info.run_id, "plots")}
    assert {"plots/confirm_ratios.png", "plots/confirm_ratios.html"} <= plots  # each pair's
    assert parent.data.metrics["improvement_pct_ci_low"] < 0
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    study = optuna.load_study(study_name="quick", storage=optuna.storages.RDBStorage(storage))
    with pytest.raises(DeployError, match="the verdict is equivalent"):
        promote(study, objectives={"perf_throughput": "maximize"}, constraints=None,
                release=Release("quick", "quick"))


def test_rounds_asked_for_by_name_are_not_cut_short_by_the_budget(
        tmp_path: Path, model: Path, mlflow_uri: str) -> None:
    """The study's own confirmation stops at its budget (0.5 s: after its first round, too
    few to decide); `tracker confirm --rounds 4`, the command an inconclusive verdict names,
    then measures up to 4 rounds whatever the budget, unless the verdict is decided first."""
    spec = write_spec(tmp_path, model, {"instance_group.count": [2]}, n_trials=2,
                      confirm={"enabled": True, "top_k": 1, "rounds": 2, "min_rounds": 1,
                               "budget_s": 0.5, "design": "rounds"}, load={"concurrency": [4]})
    tune(spec, TuneOptions(bar=False))
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    first = _record(storage)
    assert len(first["rounds"]) == 1 and first["stop"].startswith("budget: "), first["stop"]
    result = CliRunner().invoke(cli, ["confirm", str(spec), "--rounds", "4"])
    assert result.exit_code == 0, result.output
    again = _record(storage)
    assert again["rounds"][:1] == first["rounds"]
    assert len(again["rounds"]) == 4 or again["stop"].startswith("decided"), again["stop"]
