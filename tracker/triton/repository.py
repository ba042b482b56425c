"""A trial's model repository: the model's files, and the config the server will load.

Two configs exist per trial and both are kept:

- the *production* config: what a real Triton with the model's own backend loads (for an ONNX
  model ``backend: "onnxruntime"``; a Python-backend or config-driven model's own backend).
  It is the one logged and registered.
- the *served* config: what this trial's server actually loads. It is the production config,
  except for an ONNX model on a server without the onnxruntime backend (the nvidia-pytriton
  wheel's): then the same config with ``backend: "python"`` served by the onnxruntime shim.

What goes into the model folder is the format's business (tracker/triton/formats/): the ONNX
file (plus the shim and ``production_config.pbtxt``), or the user's model directory as it is.
The model name and folder are explicit, so a configuration of several models writes each of
its models with :func:`write_model` into one repository root.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from tracker.errors import ModelError
from tracker.serving import Serving, serving_choices
from tracker.triton.formats import ServeOptions, format_of, json_knobs
from tracker.triton.formats.onnx import SHIM_HEADER, production_config, shim_config

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

    from tracker.triton.model_config import ModelInfo

__all__ = [
    "SHIM_HEADER",
    "ServeOptions",
    "Serving",
    "TrialRepository",
    "production_config",
    "served_configs",
    "serving_choices",
    "shim_config",
    "write_configuration",
    "write_model",
    "write_repository",
]


@dataclass(frozen=True)
class TrialRepository:
    """A written repository: ``path`` is the root given to ``--model-repository``.
    ``serving``: how an ONNX model is served (None: a format served by its own backend).
    ``knob_files``: the model directory's JSON files the trial's ``FILE:KEY`` knobs address,
    {the knobs' file part: the file as the server loads it}."""

    path: Path
    model_name: str
    production_config: ModelConfig
    served_config: ModelConfig
    serving: Serving | None = None
    header: str = ""
    knob_files: dict[str, Path] = field(default_factory=dict)
    #: every model's (name, served config), load order (composing models first, the entry
    #: last); one for a single model
    models: tuple[tuple[str, ModelConfig], ...] = ()
    #: and each one's production config (the entry's is ``production_config``)
    productions: Mapping[str, ModelConfig] = field(default_factory=dict)

    @property
    def model_names(self) -> tuple[str, ...]:
        """Every model the server must load, in load order."""
        return tuple(n for n, _ in self.models)

    @property
    def model_dir(self) -> Path:
        return self.path / self.model_name

    @property
    def served_config_path(self) -> Path:
        return self.model_dir / "config.pbtxt"

    @property
    def shimmed(self) -> bool:
        """The server loads another config than the production one (the ONNX shim)."""
        return bool(self.served_config.backend != self.production_config.backend)


def served_configs(info: ModelInfo, config: ModelConfig, *, serving: Serving | None,
                   options: ServeOptions | None = None) -> tuple[ModelConfig, ModelConfig, str]:
    """(production, served, header) of ``config`` for ``info``'s model, no files written."""
    fmt = format_of(info)
    prod = fmt.production_config(info, config, options or ServeOptions())
    served, header = fmt.served_config(prod, serving)
    return prod, served, header


def write_model(root: Path, info: ModelInfo, config: ModelConfig, *,
                serving: Serving | None, options: ServeOptions | None = None,
                version: int = 1, files: Mapping[str, object] | None = None,
                logged: Iterable[str] = ()) -> TrialRepository:
    """Write ``config`` for ``info``'s model as ``<root>/<config.name>/`` (an existing folder
    of that name is replaced) and return both configs. ``files``: ``FILE:KEY`` values set in
    the model directory's JSON files; ``logged``: files whose trial copy is reported in
    ``knob_files`` even when no value of theirs is set (json_knobs.write)."""
    from tracker.triton import model_config

    if not config.name:
        raise ModelError("the model config has no name")
    prod, served, header = served_configs(info, config, serving=serving, options=options)
    root = Path(root).resolve()
    model_dir = root / config.name
    if model_dir.exists():
        shutil.rmtree(model_dir)
    model_dir.parent.mkdir(parents=True, exist_ok=True)
    format_of(info).write_model_dir(info, served, prod, model_dir, version=version)
    knob_files = json_knobs.write(info, model_dir, files or {}, logged)
    (model_dir / "config.pbtxt").write_text(header + model_config.dumps(served))
    return TrialRepository(path=root, model_name=config.name, production_config=prod,
                           served_config=served, serving=serving, header=header,
                           knob_files=knob_files, models=((config.name, served),),
                           productions={config.name: prod})


def write_repository(root: Path, info: ModelInfo, config: ModelConfig, *,
                     serving: Serving | None,
                     ort_threads: tuple[int | None, int | None] = (None, None),
                     version: int = 1) -> TrialRepository:
    """A one-model repository under ``root`` (see :func:`write_model`). ``serving`` matters
    for ONNX models only: ``"python"`` adds the onnxruntime shim, ``"onnxruntime"`` serves
    with Triton's onnxruntime backend."""
    if info.format == "onnx" and serving not in ("python", "onnxruntime"):
        raise ModelError(f"serving must be 'python' or 'onnxruntime' for an ONNX model, but "
                         f"got {serving!r}")
    return write_model(root, info, config, serving=serving,
                       options=ServeOptions(ort_threads=ort_threads), version=version)


def write_configuration(root: Path, infos: Mapping[str, ModelInfo],
                        configs: Mapping[str, ModelConfig], entry: str, *,
                        serving: Serving | None, options: ServeOptions | None = None,
                        files: Mapping[str, object] | None = None,
                        logged: Iterable[str] = ()) -> TrialRepository:
    """Every model of a configuration under one ``root`` (``infos`` and ``configs`` in load
    order: composing models first), each written by :func:`write_model` as version 1; the entry's
    TrialRepository, carrying every model's configs. ``files``/``logged``: the entry model's
    ``FILE:KEY`` values (file knobs are for single-model studies)."""
    written = {name: write_model(root, infos[name], configs[name], serving=serving,
                                 options=options, files=files if name == entry else None,
                                 logged=logged if name == entry else ())
               for name in configs}
    return replace(written[entry],
                   models=tuple((n, r.served_config) for n, r in written.items()),
                   productions={n: r.production_config for n, r in written.items()},
                   serving=serving)
