"""What the Python-backend and config-driven formats share: a model directory whose
config.pbtxt says everything, carried into each trial as it is (files hard-linked)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from tritonclient.grpc.model_config_pb2 import ModelConfig

from tracker.errors import ConfigError, ModelError
from tracker.triton.formats.base import CONFIG_FILE, backend_of, copy_model_dir, named, versions

if TYPE_CHECKING:
    from tracker.serving import Serving
    from tracker.triton.model_config import ModelInfo


def read_config(path: Path, name: str, base: ModelConfig | None, *, what: str,
                io_required: bool = True) -> ModelConfig:
    """The directory's config (or ``base``) under ``name``, with its I/O checked."""
    if not path.is_dir():
        raise ModelError(f"a {what} model must be a Triton model directory (config.pbtxt and "
                         f"<version>/), but {path} is not a directory")
    if base is None:
        raise ModelError(f"model directory {path} has no {CONFIG_FILE}; a {what} model needs "
                         "one (its I/O is read from it)")
    if not versions(path):
        raise ModelError(f"model directory {path} has no version folder (1/, 2/, ...)")
    cfg = named(base, name)
    if cfg.max_batch_size < 0:
        raise ConfigError(f"{path / CONFIG_FILE}: max_batch_size must be >= 0, but got "
                          f"{cfg.max_batch_size}")
    if io_required:
        for kind in ("input", "output"):
            if not getattr(cfg, kind):
                raise ConfigError(f"{path / CONFIG_FILE}: a {what} model must list its "
                                  f"{kind}s in config.pbtxt (name, data_type, dims), but it "
                                  f"lists no {kind}")
    return cfg


class DirectoryFormat:
    """A model served by the backend its own config names; subclasses say which."""

    name = "directory"

    def production_config(self, info: ModelInfo, cfg: ModelConfig,
                          options: object) -> ModelConfig:
        out = ModelConfig()
        out.CopyFrom(cfg)
        return out

    def served_config(self, production: ModelConfig,
                      serving: Serving | None) -> tuple[ModelConfig, str]:
        return production, ""

    def write_model_dir(self, info: ModelInfo, served: ModelConfig, production: ModelConfig,
                        model_dir: Path, *, version: int) -> None:
        copy_model_dir(Path(info.model_file), model_dir)

    def backend(self, info: ModelInfo, serving: Serving | None) -> str:
        return backend_of(info.config)

    def stored(self, info: ModelInfo) -> Path:
        return Path(info.model_file)
