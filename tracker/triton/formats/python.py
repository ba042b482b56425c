"""Python-backend models: a model directory with ``backend: "python"`` and
``<version>/model.py``, served as written (no shim) on any Triton, the embedded one included.

Each instance is its own stub process, so instance_group, max_batch_size and dynamic batching
act for real. The I/O comes from config.pbtxt, or, when it lists none and ``model.py`` defines
``auto_complete_config``, from the configuration Triton completes (tracker/triton/autocomplete.py).
A directory without config.pbtxt whose version folder holds ``model.py`` is a Python model, as
Triton's auto-complete decides the backend from the model file's name.
Keys the model's config.pbtxt declares under ``parameters`` are knobs (``parameters.KEY``),
as is the Python backend's own ``FORCE_CPU_ONLY_INPUT_TENSORS``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from tritonclient.grpc.model_config_pb2 import ModelConfig

from tracker.errors import ConfigError
from tracker.triton import model_config
from tracker.triton.formats.base import version_file, versions
from tracker.triton.formats.directory import DirectoryFormat, read_config
from tracker.triton.formats.knobs import Knob, for_backend

if TYPE_CHECKING:
    from tracker.triton.model_config import ModelInfo

BACKEND = "python"
MODEL_PY = "model.py"
_AUTO_COMPLETE = "def auto_complete_config"


class PythonFormat(DirectoryFormat):
    name = "python"

    def detect(self, path: Path, config: ModelConfig | None) -> bool:
        if not path.is_dir():
            return False
        if config is not None and (config.backend or config.platform):
            return bool(config.backend == BACKEND)
        return any((path / str(v) / MODEL_PY).is_file() for v in versions(path))

    def read(self, path: Path, name: str, base: ModelConfig | None) -> ModelInfo:
        if base is None or not (base.backend or base.platform):  # Triton names it by model.py
            base = ModelConfig(backend=BACKEND) if base is None else base
            base.backend = BACKEND
        cfg = read_config(path, name, base, what="Python-backend", io_required=False)
        script = version_file(path, cfg.default_model_filename or MODEL_PY)
        auto = _AUTO_COMPLETE in script.read_text(errors="replace")
        if not auto:
            for kind in ("input", "output"):
                if not getattr(cfg, kind):
                    raise ConfigError(
                        f"{path / 'config.pbtxt'}: a Python-backend model must list its "
                        f"{kind}s in config.pbtxt, or define auto_complete_config in "
                        f"{script.name}, but it does neither")
        return model_config.ModelInfo(cfg, cfg.max_batch_size > 0, path, platform="",
                                      format=self.name,
                                      auto_complete=auto and not (cfg.input and cfg.output))

    def knobs(self, info: ModelInfo) -> tuple[Knob, ...]:
        own = [Knob(f"parameters.{key}", "read by the model's model.py",
                    f"default {value.string_value!r}")
               for key, value in sorted(info.config.parameters.items())]
        return for_backend(BACKEND, own)
