"""The model-format seam: what every format module provides, and the helpers they share.

A format handles ONE model directory (or file) under an explicit model name: it recognises
the path, reads the default config with its I/O and batching, turns a trial's config into the
production config (what a real Triton with the model's own backend loads) and the served one
(what this trial's server loads), writes the trial's model directory, names the knobs its
backend reads and what the registry stores. Nothing here knows about studies, several models
or servers: a configuration of several models calls these per model.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from tracker.errors import ModelError

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

    from tracker.serving import Serving
    from tracker.triton.formats.knobs import Knob
    from tracker.triton.model_config import ModelInfo

CONFIG_FILE = "config.pbtxt"
_IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", ".staging-*")


@dataclass(frozen=True)
class ServeOptions:
    """Server-side settings a format may fold into the production config (``server.*``)."""

    ort_threads: tuple[int | None, int | None] = (None, None)


class ModelFormat(Protocol):
    """One model format. ``name`` is what ``ModelInfo.format`` and ``tracker check`` say."""

    name: str

    def detect(self, path: Path, config: ModelConfig | None) -> bool:
        """Whether this format serves ``path`` (``config``: the base or directory config)."""
        ...

    def read(self, path: Path, name: str, base: ModelConfig | None) -> ModelInfo:
        """The model's default config (I/O, batching) served under ``name``; ModelError or
        ConfigError naming the file and the field when it cannot be read."""
        ...

    def production_config(self, info: ModelInfo, cfg: ModelConfig,
                          options: ServeOptions) -> ModelConfig:
        """``cfg`` as a real Triton with the model's own backend loads it."""
        ...

    def served_config(self, production: ModelConfig,
                      serving: Serving | None) -> tuple[ModelConfig, str]:
        """(the config this trial's server loads, a header comment for its file)."""
        ...

    def write_model_dir(self, info: ModelInfo, served: ModelConfig, production: ModelConfig,
                        model_dir: Path, *, version: int) -> None:
        """Write the model's files into ``model_dir`` (new, empty); config.pbtxt is the
        caller's."""
        ...

    def backend(self, info: ModelInfo, serving: Serving | None) -> str:
        """The Triton backend a server needs to serve the model this way."""
        ...

    def knobs(self, info: ModelInfo) -> tuple[Knob, ...]:
        """The config field paths this model's backend reads (Triton's shared ones too)."""
        ...

    def stored(self, info: ModelInfo) -> Path:
        """What the registry stores for the model: its file, or its whole directory."""
        ...


# ---- helpers the formats share ----------------------------------------------------------------

def versions(model_dir: Path) -> list[int]:
    """The numeric version folders of a model directory, highest first."""
    return sorted((int(p.name) for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit()),
                  reverse=True)


def version_file(model_dir: Path, filename: str) -> Path:
    """``<highest version holding filename>/<filename>``; ModelError when none holds it."""
    found = versions(model_dir)
    for version in found:
        candidate = model_dir / str(version) / filename
        if candidate.exists():
            return candidate
    raise ModelError(f"model directory {model_dir} has no <version>/{filename} "
                     f"(versions found: {found or 'none'})")


def copy_model_dir(src: Path, dst: Path, *, skip: Callable[[Path], bool] = lambda _p: False
                   ) -> None:
    """Copy a model directory's files (hard links where the file system allows; its
    config.pbtxt and caches left out) to ``dst``, which must not exist."""
    def link(source: str, target: str) -> None:
        try:
            os.link(source, target)
        except OSError:
            shutil.copy2(source, target)

    def ignore(folder: str, names: list[str]) -> set[str]:
        out = set(_IGNORED(folder, names))
        if Path(folder) == src:
            out.add(CONFIG_FILE)
        return out | {n for n in names if skip(Path(folder) / n)}

    shutil.copytree(src, dst, ignore=ignore, copy_function=link, symlinks=True)


def link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


def backend_of(cfg: ModelConfig) -> str:
    """The backend a config names, from ``backend`` or Triton's platform names."""
    if cfg.backend:
        return str(cfg.backend)
    return PLATFORM_BACKENDS.get(cfg.platform, str(cfg.platform))


#: what answers instead of ``mlflow.pyfunc`` where it cannot run a registered version
PYFUNC_INSTEAD = "`mlflow deployments predict -t triton` answers through the serving Triton"


def pyfunc_problem(cfg: ModelConfig, models: int = 1) -> str | None:
    """Why ``mlflow.pyfunc.load_model(...).predict`` cannot run a registered version of the
    model ``cfg`` (of a version of ``models`` models) in-process, or None when it can: the
    registered version then carries a ``python_function`` flavor that runs its one ONNX file
    with onnxruntime on CPU. The one rule for the flavor and for ``tracker check``."""
    name = str(cfg.name)
    if models > 1:
        return (f"a version of this study is a Triton repository of {models} models, which "
                "only Triton runs together; pyfunc runs one ONNX file in-process")
    backend = backend_of(cfg)
    if backend != "onnxruntime":
        return (f"model {name!r} runs on Triton's {backend} backend: there is no ONNX file "
                "for onnxruntime to run in-process")
    if not (cfg.default_model_filename or "model.onnx").endswith(".onnx"):
        return f"model {name!r}'s file {cfg.default_model_filename!r} is not a .onnx file"
    if cfg.HasField("sequence_batching"):
        return (f"model {name!r} is stateful: its state lives in Triton's sequence batcher, "
                "and a pyfunc predict sends no correlation ID or sequence flags")
    return None


#: Triton's platform names -> the backend that serves them (Triton's model_configuration.md)
PLATFORM_BACKENDS: dict[str, str] = {
    "onnxruntime_onnx": "onnxruntime", "pytorch_libtorch": "pytorch", "torch_aoti": "pytorch",
    "tensorrt_plan": "tensorrt", "tensorflow_savedmodel": "tensorflow",
    "tensorflow_graphdef": "tensorflow", "openvino": "openvino", "ensemble": "ensemble",
}
_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+$")


def named(cfg: ModelConfig, name: str) -> ModelConfig:
    """A copy of ``cfg`` served under ``name``."""
    from tritonclient.grpc.model_config_pb2 import ModelConfig

    if not _NAME_RE.match(name):
        raise ModelError(f"a Triton model name is letters, digits, '_', '.', '-', but got "
                         f"{name!r}")
    out = ModelConfig()
    out.CopyFrom(cfg)
    out.name = name
    return out
