"""Model formats: one module per format behind one protocol (base.ModelFormat).

``FORMATS`` is the registration list, tried in order: the first whose ``detect`` accepts the
path reads it. Adding a format is one module with a class like those below plus one line
here. docs/formats.md says what each format accepts and which knobs its backend reads.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from tracker.errors import ModelError
from tracker.triton import model_config
from tracker.triton.formats.base import CONFIG_FILE, ModelFormat, ServeOptions
from tracker.triton.formats.config_driven import ConfigDrivenFormat
from tracker.triton.formats.ensemble import EnsembleFormat
from tracker.triton.formats.onnx import OnnxFormat
from tracker.triton.formats.python import PythonFormat

if TYPE_CHECKING:
    from tracker.triton.model_config import ModelConfig, ModelInfo

__all__ = ["FORMATS", "ModelFormat", "ServeOptions", "detect", "format_of", "load_model_info",
           "model_info"]

FORMATS: tuple[ModelFormat, ...] = (
    EnsembleFormat(),  # first: its platform names no backend
    PythonFormat(),
    OnnxFormat(),
    ConfigDrivenFormat(),  # last: any other backend a config.pbtxt names
)


class ModelSource(Protocol):
    """Where a spec's model section finds a model: its name, path and base config."""

    @property
    def name(self) -> str | list[str]: ...
    @property
    def path(self) -> Path: ...
    @property
    def config(self) -> Path | None: ...


def format_of(info: ModelInfo) -> ModelFormat:
    """The format that read ``info``."""
    for fmt in FORMATS:
        if fmt.name == info.format:
            return fmt
    raise ModelError(f"unknown model format {info.format!r} (known: "
                     f"{[f.name for f in FORMATS]})")


def _base(path: Path, base_config: Path | None) -> ModelConfig | None:
    if base_config is not None:
        return model_config.load(base_config)
    if path.is_dir() and (path / CONFIG_FILE).is_file():
        return model_config.load(path / CONFIG_FILE)
    return None


def detect(path: Path, base: ModelConfig | None) -> ModelFormat:
    """The first registered format that serves ``path``; ModelError naming what was looked
    for when none does."""
    if not path.exists() and path.suffix != ".onnx":
        raise ModelError(f"model path {path} does not exist (expected an .onnx file or a "
                         "Triton model directory)")
    for fmt in FORMATS:
        if fmt.detect(path, base):
            return fmt
    if base is None and path.is_dir():
        raise ModelError(f"model directory {path} has no {CONFIG_FILE} and no "
                         "<version>/model.onnx: give it a config.pbtxt naming its backend")
    raise ModelError(f"{path} is no model this tool can read: expected an .onnx file, or a "
                     f"Triton model directory with {CONFIG_FILE} (naming its backend or "
                     "platform) and <version>/ folders, or <version>/model.onnx")


def load_model_info(path: Path, name: str, base_config: Path | None = None) -> ModelInfo:
    """ModelInfo for a model file or directory, served as ``name``; ``base_config`` (when
    given) replaces the directory's config.pbtxt."""
    path = Path(path)
    base = _base(path, base_config)
    return detect(path, base).read(path, name, base)


def model_info(model: ModelSource) -> ModelInfo:
    """ModelInfo for a spec's ``model`` section (its first entry model, read from a model
    file or directory; a repository's models: tracker.triton.configuration)."""
    name = model.name if isinstance(model.name, str) else model.name[0]
    return load_model_info(Path(model.path), name, model.config)
