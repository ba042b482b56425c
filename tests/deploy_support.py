"""Helpers for the deployment tests: a trial's model directory as the tuning loop logs it, the
tuned knobs of a config, and a real Triton in explicit model control mode."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tracker.triton import model_config as mc
from tracker.triton.formats.onnx import from_onnx
from tracker.triton.repository import production_config
from tracker.triton.server.local import LocalTritonServer

NAME = "tiny"
V1 = {"max_batch_size": 8, "instance_group.count": 1}
V2 = {"max_batch_size": 16, "instance_group.count": 2,
      "dynamic_batching.max_queue_delay_microseconds": 100}


def trial_model_dir(root: Path, onnx: Path, values: dict[str, Any], *,
                    broken: bool = False) -> Path:
    """What the tuning loop logs for a trial: production config.pbtxt + 1/model.onnx."""
    cfg = production_config(mc.apply(from_onnx(onnx, NAME), values))
    if broken:  # Triton refuses: a preferred batch size above max_batch_size
        cfg.dynamic_batching.preferred_batch_size.append(cfg.max_batch_size * 4)
    d = root / NAME
    (d / "1").mkdir(parents=True)
    shutil.copyfile(onnx, d / "1" / "model.onnx")
    (d / "config.pbtxt").write_text(mc.dumps(cfg))
    return d


def knobs(cfg: Any, *, like: Any = None) -> dict[str, Any]:
    """The tuned fields of a config (what must be the same as the best trial's). With ``like``
    (the trial's file), what the file leaves to Triton takes the served value: KIND_AUTO
    becomes the kind Triton picked, an empty preferred_batch_size the one it filled in."""
    like = like or cfg
    groups = [(g.count, g.kind if f.kind != 0 else "auto")
              for g, f in zip(cfg.instance_group, like.instance_group, strict=False)]
    preferred = list(cfg.dynamic_batching.preferred_batch_size)
    if not like.dynamic_batching.preferred_batch_size:
        preferred = []
    return {
        "max_batch_size": cfg.max_batch_size,
        "instance_group": groups,
        "dynamic_batching": (cfg.HasField("dynamic_batching"),
                             cfg.dynamic_batching.max_queue_delay_microseconds, preferred),
        "inputs": [(i.name, list(i.dims)) for i in cfg.input],
    }


@pytest.fixture()
def serving(tmp_path: Path, mlflow_uri: str,
            monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[LocalTritonServer, Path]]:
    repo = tmp_path / "serving-repo"
    repo.mkdir()
    with LocalTritonServer(startup_timeout_s=60) as server:
        server.start(repo, explicit=True)
        monkeypatch.setenv("TRACKER_TRITON_URL", server.endpoints.grpc)
        monkeypatch.setenv("TRACKER_TRITON_REPOSITORY", str(repo))
        monkeypatch.setenv("TRACKER_TRITON_LOG", str(server.log_path))
        monkeypatch.setenv("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
        yield server, repo
