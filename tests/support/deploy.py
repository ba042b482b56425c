"""Helpers for the deployment tests: a trial's model directory as the tuning loop logs it, a
study whose trials carry such models, the tuned knobs of a config, and a real Triton in
explicit model control mode."""

from __future__ import annotations

import shutil
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import mlflow
import numpy as np
import optuna
import pytest

from tracker.spec import ServerSection
from tracker.tracking import flavor
from tracker.triton import model_config
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
    cfg = production_config(model_config.apply(from_onnx(onnx, NAME), values))
    if broken:  # Triton refuses: a preferred batch size above max_batch_size
        cfg.dynamic_batching.preferred_batch_size.append(cfg.max_batch_size * 4)
    d = root / NAME
    (d / "1").mkdir(parents=True)
    shutil.copyfile(onnx, d / "1" / "model.onnx")
    (d / "config.pbtxt").write_text(model_config.dumps(cfg))
    return d


class Study:
    """A real Optuna study whose trials carry what the tuning loop leaves (user attrs, an
    MLflow child run with the model logged as `model`)."""

    def __init__(self, tmp: Path, onnx: Path, tracking_uri: str) -> None:
        self.tmp, self.onnx = tmp, onnx
        self.storage = f"sqlite:///{tmp / 'optuna.db'}"
        self.study = optuna.create_study(study_name=NAME, storage=self.storage,
                                         direction="maximize")
        self.study.set_user_attr("objectives", {"perf_throughput": "maximize"})
        self.client = mlflow.MlflowClient(tracking_uri)
        self.exp = self.client.create_experiment(NAME)

    def add(self, values: dict[str, Any], throughput: float, *, broken: bool = False) -> int:
        run = self.client.create_run(self.exp)
        n = len(self.study.trials)
        model_dir = trial_model_dir(self.tmp / f"trial{n}", self.onnx, values, broken=broken)
        flavor.log_triton_model(model_dir, run.info.run_id)
        trial = self.study.ask()
        for key, value in {"mlflow_run_id": run.info.run_id, "feasible": True,
                           "baseline": n == 0, "measurements": 3, "concurrency": 4,
                           "metrics": {"perf_throughput": throughput,
                                       "perf_latency_p99": 2.5}}.items():
            trial.set_user_attr(key, value)
        self.study.tell(trial, throughput)
        return n


def spec_file(tmp: Path, onnx: Path, storage: str, tracking_uri: str,
              registered: str = "tiny-reg") -> Path:
    """A study spec over ``Study``'s storage, registering as ``registered``."""
    path = tmp / "study.yaml"
    path.write_text(f"""
model: {{name: {NAME}, path: {onnx}}}
constraints: {{perf_latency_p99: {{max: 50}}}}
search: {{study_name: {NAME}, storage: "{storage}"}}
mlflow: {{tracking_uri: "{tracking_uri}", registered_model: {registered}}}
""")
    return path


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


def _point_at(monkeypatch: pytest.MonkeyPatch, server: LocalTritonServer, repo: Path) -> None:
    monkeypatch.setenv("TRACKER_TRITON_URL", server.endpoints.grpc)
    monkeypatch.setenv("TRACKER_TRITON_REPOSITORY", str(repo))
    monkeypatch.setenv("TRACKER_TRITON_LOG", str(server.log_path))
    monkeypatch.setenv("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")


@pytest.fixture()
def serving(tmp_path: Path, mlflow_uri: str,
            monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[LocalTritonServer, Path]]:
    """A Triton of this test's own, over an empty repository."""
    repo = tmp_path / "serving-repo"
    repo.mkdir()
    server = LocalTritonServer(ServerSection(startup_timeout_s=60))
    with server:
        server.start(repo, explicit=True)
        _point_at(monkeypatch, server, repo)
        yield server, repo


@pytest.fixture(scope="module")
def module_server(
        tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalTritonServer, Path]]:
    """One Triton for a whole test module (stopped at its end, failures included); its tests
    deploy under different names."""
    repo = tmp_path_factory.mktemp("serving-repo")
    server = LocalTritonServer(ServerSection(startup_timeout_s=60))
    with server:
        server.start(repo, explicit=True)
        yield server, repo


@pytest.fixture()
def shared_serving(module_server: tuple[LocalTritonServer, Path], mlflow_uri: str,
                   monkeypatch: pytest.MonkeyPatch) -> tuple[LocalTritonServer, Path]:
    """The module's Triton, with the target settings pointing at it for this test."""
    _point_at(monkeypatch, *module_server)
    return module_server


class RequestLoop:
    """Sends one request to ``model`` without a version, over and over from a thread, until
    stopped or ``limit_s`` has passed; counts each answer under ``label(result)`` and keeps
    every failure (a wrong answer is one: ``label`` may raise)."""

    def __init__(self, url: str, model: str, inputs: dict[str, np.ndarray],
                 label: Callable[[Any], str], limit_s: float = 120.0) -> None:
        self.url, self.model, self.inputs, self.label = url, model, inputs, label
        self.limit_s = limit_s
        self.answers: Counter[str] = Counter()
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        import tritonclient.grpc as grpcclient

        client = grpcclient.InferenceServerClient(self.url)
        tensors = []
        for name, value in self.inputs.items():
            tensor = grpcclient.InferInput(name, list(value.shape), "FP32")
            tensor.set_data_from_numpy(value)
            tensors.append(tensor)
        end = time.monotonic() + self.limit_s
        try:
            while not self._stop.is_set() and time.monotonic() < end:
                try:
                    self.answers[self.label(client.infer(self.model, tensors,
                                                         client_timeout=10))] += 1
                except Exception as exc:  # every failure counts, whatever its type
                    self.failures.append(str(exc)[:300])
        finally:
            client.close()

    def __enter__(self) -> RequestLoop:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def wait_for(self, count: int, timeout_s: float = 30) -> None:
        """Until ``count`` more answers came (or ``timeout_s``)."""
        end = time.monotonic() + timeout_s
        start = sum(self.answers.values())
        while sum(self.answers.values()) < start + count and time.monotonic() < end:
            time.sleep(0.05)
