"""A trial's model repository: the model file, and the config the server will load.

Two configs exist per trial and both are kept:

- the *production* config: what a real Triton with the onnxruntime backend would load
  (``backend: "onnxruntime"``). It is the one logged and registered.
- the *served* config: what this trial's server actually loads. Where the server has the
  onnxruntime backend it is the production config; otherwise (the nvidia-pytriton wheel's
  server) it is the same config with ``backend: "python"`` and parameters naming the ONNX file,
  served by the onnxruntime shim (``tracker/triton/shim/model.py``), which honours the same
  max_batch_size, dynamic batching and instance groups.

Layout::

    <root>/<model>/config.pbtxt              served config (a header comment says which)
    <root>/<model>/production_config.pbtxt   production config (shim only)
    <root>/<model>/<version>/model.onnx      hard link to the model file (copy across devices)
    <root>/<model>/<version>/model.py        the shim (shim only)
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from tracker.errors import ModelError

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

    from tracker.triton.model_config import ModelInfo

Serving = Literal["python", "native"]
SHIM = Path(__file__).resolve().parent / "shim" / "model.py"
MODEL_FILE = "model.onnx"
INTRA, INTER = "intra_op_thread_count", "inter_op_thread_count"
SHIM_HEADER = ("# Served config: the onnxruntime shim on Triton's Python backend (this server has\n"
               "# no onnxruntime backend). The production config is production_config.pbtxt\n"
               "# (beside this file, and among the trial's MLflow artifacts).\n")


def serving_choices(wanted: str, has_native: Callable[[], bool | None]) -> list[Serving]:
    """The ways to serve an ONNX model, to try in order. ``wanted``: ``python`` (the shim),
    ``native``/``onnxruntime`` (the server's onnxruntime backend) or ``auto``: then
    ``has_native()`` says whether the server has that backend (asked only for ``auto``;
    None: not known, so native first and the shim as the fallback)."""
    if wanted == "python":
        return ["python"]
    if wanted in ("native", "onnxruntime"):
        return ["native"]
    if wanted != "auto":
        raise ModelError(f"serving must be auto, native/onnxruntime or python, but got "
                         f"{wanted!r}")
    known = has_native()
    if known is None:
        return ["native", "python"]
    return ["native"] if known else ["python"]


@dataclass(frozen=True)
class TrialRepository:
    """A written repository: ``path`` is the root given to ``--model-repository``."""

    path: Path
    model_name: str
    production_config: ModelConfig
    served_config: ModelConfig
    serving: Serving = "native"

    @property
    def model_dir(self) -> Path:
        return self.path / self.model_name

    @property
    def served_config_path(self) -> Path:
        return self.model_dir / "config.pbtxt"


def production_config(config: ModelConfig, *,
                      ort_threads: tuple[int | None, int | None] = (None, None)) -> ModelConfig:
    """``config`` for Triton's onnxruntime backend, with the thread parameters set."""
    from tritonclient.grpc.model_config_pb2 import ModelConfig

    prod = ModelConfig()
    prod.CopyFrom(config)
    prod.backend = "onnxruntime"
    prod.platform = "onnxruntime_onnx"
    if not prod.default_model_filename:
        prod.default_model_filename = MODEL_FILE
    for key, value in zip((INTRA, INTER), ort_threads, strict=True):
        if value is not None:
            prod.parameters[key].string_value = str(value)
    return prod


def shim_config(production: ModelConfig) -> ModelConfig:
    """The production config as the Python-backend shim serves it."""
    from tritonclient.grpc.model_config_pb2 import ModelConfig

    served = ModelConfig()
    served.CopyFrom(production)
    served.backend = "python"
    served.platform = ""
    served.default_model_filename = ""
    served.parameters["onnx_file"].string_value = production.default_model_filename or MODEL_FILE
    return served


def write_repository(root: Path, info: ModelInfo, config: ModelConfig, *,
                     serving: Serving,
                     ort_threads: tuple[int | None, int | None] = (None, None),
                     version: int = 1) -> TrialRepository:
    """Write ``config`` for ``info``'s model under ``root`` (created; an existing model folder
    of the same name is replaced) and return both configs. ``serving="python"`` adds the
    onnxruntime shim; ``"native"`` serves with the onnxruntime backend."""
    from tracker.triton import model_config as mc

    if serving not in ("python", "native"):
        raise ModelError(f"serving must be 'python' or 'native', but got {serving!r}")
    source = Path(info.model_file)
    if not source.is_file():
        raise ModelError(f"model file {str(source)!r} does not exist")
    if not config.name:
        raise ModelError("the model config has no name")
    prod = production_config(config, ort_threads=ort_threads)
    served = prod if serving == "native" else shim_config(prod)
    root = Path(root).resolve()
    model_dir = root / config.name
    if model_dir.exists():
        shutil.rmtree(model_dir)
    version_dir = model_dir / str(version)
    version_dir.mkdir(parents=True)
    _link_or_copy(source, version_dir / (prod.default_model_filename or MODEL_FILE))
    text = mc.dumps(served)
    if serving == "python":
        shutil.copyfile(SHIM, version_dir / "model.py")
        mc.save(prod, model_dir / "production_config.pbtxt")
        text = SHIM_HEADER + text
    (model_dir / "config.pbtxt").write_text(text)
    return TrialRepository(path=root, model_name=config.name, production_config=prod,
                           served_config=served, serving=serving)


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)
