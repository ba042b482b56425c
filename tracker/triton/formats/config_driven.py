"""Every other backend, config-driven: TorchScript (``pytorch_libtorch``), TensorFlow
SavedModels, TensorRT plans, OpenVINO, a native ``onnxruntime`` directory that names no
readable ONNX file, or any custom backend. The I/O must be in config.pbtxt; the directory's
files go into each trial as they are. Only a server with that backend loads them: the
embedded server has the Python backend alone, so these run in docker (an NGC Triton image)
or remote mode, which `tracker check` says before anything starts.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from tritonclient.grpc.model_config_pb2 import ModelConfig

from tracker.triton import model_config
from tracker.triton.formats.base import backend_of
from tracker.triton.formats.directory import DirectoryFormat, read_config
from tracker.triton.formats.knobs import Knob, for_backend

if TYPE_CHECKING:
    from tracker.triton.model_config import ModelInfo


class ConfigDrivenFormat(DirectoryFormat):
    name = "config"

    def detect(self, path: Path, config: ModelConfig | None) -> bool:
        return path.is_dir() and config is not None and bool(backend_of(config))

    def read(self, path: Path, name: str, base: ModelConfig | None) -> ModelInfo:
        cfg = read_config(path, name, base, what=f"{backend_of(base) if base else ''} backend")
        return model_config.ModelInfo(cfg, cfg.max_batch_size > 0, path, platform=cfg.platform,
                                      format=self.name)

    def knobs(self, info: ModelInfo) -> tuple[Knob, ...]:
        return for_backend(backend_of(info.config))
