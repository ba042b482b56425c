"""ONNX models: an ``.onnx`` file, or a model directory holding ``<version>/model.onnx``.

The default config is made the way Triton's ONNX Runtime backend auto-completes one
(onnx_reader.py); a base config (the directory's config.pbtxt or ``model.config``) wins field
by field. The production config names ``backend: "onnxruntime"``; a server without that
backend (the nvidia-pytriton wheel's) is served the same config on the Python backend through
the onnxruntime shim (``tracker/triton/shim/model.py``), which honours max_batch_size,
dynamic batching, instance groups and the thread parameters. docs/model-config.md.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from tritonclient.grpc import model_config_pb2
from tritonclient.grpc.model_config_pb2 import ModelConfig

from tracker.errors import ConfigError, ModelError
from tracker.triton import model_config, sequence
from tracker.triton.formats.base import ServeOptions, link_or_copy, version_file
from tracker.triton.formats.knobs import Knob, for_backend
from tracker.triton.onnx_reader import BACKEND, PLATFORM, OnnxModel, default_config, read_onnx

if TYPE_CHECKING:
    from tracker.serving import Serving
    from tracker.triton.model_config import ModelInfo

SHIM = Path(__file__).resolve().parent.parent / "shim" / "model.py"
MODEL_FILE = "model.onnx"
INTRA, INTER = "intra_op_thread_count", "inter_op_thread_count"
SHIM_HEADER = ("# Served config: the onnxruntime shim on Triton's Python backend (this server has\n"
               "# no onnxruntime backend). The production config is production_config.pbtxt\n"
               "# (beside this file, and among the trial's MLflow artifacts).\n")


def _is_onnx_config(cfg: ModelConfig | None) -> bool:
    return cfg is None or (cfg.platform in ("", PLATFORM) and cfg.backend in ("", BACKEND))


class OnnxFormat:
    name = "onnx"

    def detect(self, path: Path, config: ModelConfig | None) -> bool:
        if path.suffix == ".onnx" and not path.is_dir():
            return True
        if not path.is_dir() or not _is_onnx_config(config):
            return False
        filename = (config.default_model_filename if config is not None else "") or MODEL_FILE
        try:
            version_file(path, filename)
        except ModelError:
            return False
        return True

    def read(self, path: Path, name: str, base: ModelConfig | None) -> ModelInfo:
        if path.is_dir():
            filename = base.default_model_filename if base and base.default_model_filename \
                else MODEL_FILE
            model_file = version_file(path, filename)
        else:
            model_file = path
        model = read_onnx(model_file)
        if base is None:
            cfg = default_config(model, name, batching=model.can_batch,
                                 max_batch_size=model_config.DEFAULT_MAX_BATCH_SIZE)
            return model_config.ModelInfo(cfg, model.can_batch, model_file, format=self.name)
        cfg = _complete(base, model, name)
        return model_config.ModelInfo(cfg, cfg.max_batch_size > 0, model_file, format=self.name)

    def production_config(self, info: ModelInfo, cfg: ModelConfig,
                          options: ServeOptions) -> ModelConfig:
        return production_config(cfg, ort_threads=options.ort_threads)

    def served_config(self, production: ModelConfig,
                      serving: Serving | None) -> tuple[ModelConfig, str]:
        if serving == "python":
            return shim_config(production), SHIM_HEADER
        return production, ""

    def write_model_dir(self, info: ModelInfo, served: ModelConfig, production: ModelConfig,
                        model_dir: Path, *, version: int) -> None:
        source = Path(info.model_file)
        if not source.is_file():
            raise ModelError(f"model file {str(source)!r} does not exist")
        version_dir = model_dir / str(version)
        version_dir.mkdir(parents=True)
        link_or_copy(source, version_dir / (production.default_model_filename or MODEL_FILE))
        if served.backend == "python":
            shutil.copyfile(SHIM, version_dir / "model.py")
            model_config.save(production, model_dir / "production_config.pbtxt")

    def backend(self, info: ModelInfo, serving: Serving | None) -> str:
        return "python" if serving == "python" else BACKEND

    def knobs(self, info: ModelInfo) -> tuple[Knob, ...]:
        return for_backend(BACKEND)

    def stored(self, info: ModelInfo) -> Path:
        return Path(info.model_file)


def from_onnx(path: str | Path, name: str) -> ModelInfo:
    """The default config of the ONNX model at ``path``, served under ``name``."""
    return OnnxFormat().read(Path(path), name, None)


def production_config(config: ModelConfig, *,
                      ort_threads: tuple[int | None, int | None] = (None, None)) -> ModelConfig:
    """``config`` for Triton's onnxruntime backend, with the thread parameters set."""
    prod = ModelConfig()
    prod.CopyFrom(config)
    prod.backend = BACKEND
    prod.platform = PLATFORM
    if not prod.default_model_filename:
        prod.default_model_filename = MODEL_FILE
    for key, value in zip((INTRA, INTER), ort_threads, strict=True):
        if value is not None:
            prod.parameters[key].string_value = str(value)
    return prod


def shim_config(production: ModelConfig) -> ModelConfig:
    """The production config as the Python-backend shim serves it."""
    served = ModelConfig()
    served.CopyFrom(production)
    served.backend = "python"
    served.platform = ""
    served.default_model_filename = ""
    served.parameters["onnx_file"].string_value = production.default_model_filename or MODEL_FILE
    return served


# ---- a base config completed from the ONNX model, as Triton's auto-complete does --------------

def _complete(base: ModelConfig, model: OnnxModel, name: str) -> ModelConfig:
    cfg = ModelConfig()
    cfg.CopyFrom(base)
    cfg.name = name
    if cfg.platform and cfg.platform != PLATFORM:
        raise ConfigError(f"base config platform must be {PLATFORM!r} for an ONNX model, "
                          f"but got {cfg.platform!r}")
    if cfg.backend and cfg.backend != BACKEND:
        raise ConfigError(f"base config backend must be {BACKEND!r} for an ONNX model, "
                          f"but got {cfg.backend!r}")
    cfg.platform, cfg.backend = PLATFORM, BACKEND
    if cfg.max_batch_size < 0:
        raise ConfigError(f"max_batch_size must be >= 0, but got {cfg.max_batch_size}")
    if cfg.max_batch_size > 0 and not model.can_batch:
        raise ConfigError(f"base config sets max_batch_size={cfg.max_batch_size}, but model "
                          f"{model.path.name} does not support batching (some input or output "
                          "has a fixed first dimension); use max_batch_size 0")
    batching = cfg.max_batch_size > 0
    if cfg.max_batch_size == 0 and model.can_batch and not _full_rank_io(cfg, model):
        batching = True
        cfg.max_batch_size = model_config.DEFAULT_MAX_BATCH_SIZE
        if cfg.WhichOneof("scheduling_choice") is None:
            cfg.dynamic_batching.SetInParent()
    derived = default_config(model, name, batching=batching, max_batch_size=cfg.max_batch_size)
    # a stateful model's control and state inputs are the server's to fill, not requests'
    served = sequence.server_filled(cfg)
    kept = [t for t in derived.input if t.name not in served]
    del derived.input[:]
    derived.input.extend(kept)
    for kind in ("input", "output"):
        _complete_io(kind, cfg, derived, model)
    return cfg


def _full_rank_io(cfg: ModelConfig, model: OnnxModel) -> bool:
    """True when the base config lists inputs with the batch dim included (batching off)."""
    ranks = {t.name: len(t.shape) for t in model.inputs}
    given = [t for t in cfg.input if t.dims and t.name in ranks]
    return bool(given) and all(len(t.dims) == ranks[t.name] for t in given)


def _complete_io(kind: str, cfg: ModelConfig, derived: ModelConfig, model: OnnxModel) -> None:
    given = getattr(cfg, kind)
    by_name = {t.name: t for t in getattr(derived, kind)}
    seen = set()
    for tensor in given:
        ref = by_name.get(tensor.name)
        if ref is None:
            raise ConfigError(f"base config {kind} {tensor.name!r} is not an {kind} of "
                              f"{model.path.name} (its {kind}s: {sorted(by_name)})")
        seen.add(tensor.name)
        if tensor.data_type == model_config_pb2.TYPE_INVALID:
            tensor.data_type = ref.data_type
        elif tensor.data_type != ref.data_type:
            want = model_config_pb2.DataType.Name(ref.data_type)
            got = model_config_pb2.DataType.Name(tensor.data_type)
            raise ConfigError(f"base config {kind} {tensor.name!r} must have data_type {want} "
                              f"(the model's), but got {got}")
        if not tensor.dims:
            tensor.dims.extend(ref.dims)
            if ref.HasField("reshape") and not tensor.HasField("reshape"):
                tensor.reshape.CopyFrom(ref.reshape)
    for name, ref in by_name.items():
        if name not in seen:
            given.add().CopyFrom(ref)
