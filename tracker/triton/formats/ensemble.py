"""Ensemble models: a model directory whose config.pbtxt says ``platform: "ensemble"``.

Triton's core schedules an ensemble (no backend serves it, so the embedded server runs one as
well as any); it has no files of its own, only its config.pbtxt and an empty version folder.
It cannot set ``instance_group`` or a dynamic batcher: its knobs are the
``ensemble_scheduling`` level ones (``ensemble_scheduling.max_inflight_requests``). Its steps
(``ensemble_scheduling.step[].model_name``) are the composing models a configuration
(tracker/triton/configuration.py) reads from the same repository.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from tritonclient.grpc.model_config_pb2 import ModelConfig

from tracker.errors import ConfigError, ModelError
from tracker.triton import model_config
from tracker.triton.formats.base import CONFIG_FILE, named
from tracker.triton.formats.directory import DirectoryFormat
from tracker.triton.formats.knobs import Knob

if TYPE_CHECKING:
    from tracker.triton.model_config import ModelInfo

PLATFORM = "ensemble"
#: the only knobs an ensemble has (Triton's model_config.proto, ModelEnsembling)
KNOBS: tuple[Knob, ...] = (
    Knob("ensemble_scheduling.max_inflight_requests",
         "requests in flight inside the ensemble at once (0 = no limit)", "int >= 0"),
)
KNOB_PREFIX = "ensemble_scheduling."


def steps_of(cfg: ModelConfig) -> list[str]:
    """The model names an ensemble's steps call, in step order, each once."""
    return list(dict.fromkeys(str(s.model_name) for s in cfg.ensemble_scheduling.step))


def renamed(cfg: ModelConfig, name: str, names: Mapping[str, str], *,
            any_version: bool = False) -> ModelConfig:
    """A copy of ``cfg`` named ``name`` whose ensemble steps call ``names[model]`` instead
    of ``model`` (a step whose model is not in ``names`` keeps it): a pipeline served twice in
    one server, each copy calling its own steps. ``any_version``: every step calls whichever
    version of its model is loaded (``model_version: -1``)."""
    copy = type(cfg)()
    copy.CopyFrom(cfg)
    copy.name = name
    for step in copy.ensemble_scheduling.step:
        step.model_name = names.get(step.model_name, step.model_name)
        if any_version:
            step.model_version = -1
    return copy


class EnsembleFormat(DirectoryFormat):
    name = "ensemble"

    def detect(self, path: Path, config: ModelConfig | None) -> bool:
        return path.is_dir() and config is not None and config.platform == PLATFORM

    def read(self, path: Path, name: str, base: ModelConfig | None) -> ModelInfo:
        if base is None:
            raise ModelError(f"ensemble directory {path} has no {CONFIG_FILE}")
        cfg = named(base, name)
        for kind in ("input", "output"):
            if not getattr(cfg, kind):
                raise ConfigError(f"{path / CONFIG_FILE}: an ensemble must list its {kind}s, "
                                  f"but it lists no {kind}")
        if not cfg.ensemble_scheduling.step:
            raise ConfigError(f"{path / CONFIG_FILE}: an ensemble needs ensemble_scheduling "
                              "with at least one step, but it has none")
        if cfg.instance_group:
            raise ConfigError(f"{path / CONFIG_FILE}: an ensemble cannot set instance_group "
                              "(Triton refuses it); set it on the composing models")
        return model_config.ModelInfo(cfg, cfg.max_batch_size > 0, path, platform=PLATFORM,
                                      format=self.name)

    def write_model_dir(self, info: ModelInfo, served: ModelConfig, production: ModelConfig,
                        model_dir: Path, *, version: int) -> None:
        (model_dir / str(version)).mkdir(parents=True)  # Triton wants a version folder

    def knobs(self, info: ModelInfo) -> tuple[Knob, ...]:
        return KNOBS
