"""The paired confirmation of a pipeline, on the embedded Triton: an ensemble (Python ->
ONNX -> Python steps) tuned, then its best and its default served side by side in one
server as two copies of every model (``prep__best``, ``net__best``, ..., the copy's ensemble
calling its own steps), each pair one block of each copy. What is asserted holds at any
machine load: the design, both copies answering in every pair, and the copies' names."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pytest

from tests.support.pipeline import ensemble_repository
from tracker.confirm import paired
from tracker.invocation.session import TuneOptions
from tracker.tuning.tune import tune
from tracker.verdict import record as confirmed

pytestmark = pytest.mark.triton


def _spec(tmp: Path, repo: Path, uri: str) -> Path:
    path = tmp / "study.yaml"
    path.write_text(f"""
model: {{name: pipe, path: {repo}}}
load: {{concurrency: [2], window_ms: 300, max_tries: 4, warmup_requests: 8,
        stability_pct: 50}}
search:
  sampler: grid
  n_trials: 2
  space: {{prep/instance_group.count: [2]}}
  storage: sqlite:///{tmp / 'optuna.db'}
confirm: {{design: paired, top_k: 1, rounds: 1, min_rounds: 1}}
mlflow: {{tracking_uri: "{uri}", experiment: pipeline-paired}}
""")
    return path


def test_an_ensemble_is_confirmed_in_pairs_with_its_steps_renamed(
        tmp_path: Path, mlflow_uri: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(paired, "WARM_S", 0.3)
    loaded: list[tuple[str, ...]] = []
    real_setup = paired.Pairs.setup

    def setup(self: paired.Pairs, workdir: Path) -> None:
        real_setup(self, workdir)
        loaded.append(tuple(sorted(p.parent.name for p in workdir.glob("*/config.pbtxt"))))

    monkeypatch.setattr(paired.Pairs, "setup", setup)
    repo = ensemble_repository(tmp_path / "user-repo")
    result = tune(_spec(tmp_path, repo, mlflow_uri), TuneOptions(bar=False, store_model=False))
    study = optuna.load_study(study_name="pipe", storage=optuna.storages.RDBStorage(
        f"sqlite:///{tmp_path / 'optuna.db'}"))
    record: dict[str, Any] | None = confirmed.load(study)
    assert record is not None, result.summary
    assert record["design"] == "paired", record.get("design_reason")
    assert loaded, "the two copies were never served"
    copies = {f"{m}{s}" for m in ("prep", "net", "post", "pipe")
              for s in ("__default", "__best")}
    assert copies <= set(loaded[0]), loaded[0]
    assert record["rounds"], result.summary
    for rnd in record["rounds"]:  # both copies answered in every pair
        assert set(rnd["results"]) == {str(c["trial"]) for c in record["candidates"]}
        for got in rnd["results"].values():
            assert "error" not in got, got
            assert (got.get("perf_throughput") or 0) > 0
