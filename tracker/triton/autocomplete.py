"""Models whose configuration Triton completes: the completion read from Triton itself.

A Python-backend model may leave its inputs, outputs, ``max_batch_size`` and scheduler to its
``auto_complete_config`` (NVIDIA's python_backend ``examples/auto_complete``), with a partial
config.pbtxt or none at all. Only Triton runs that function, so the tool serves such models
once on a server started with auto-complete on, reads the configuration Triton made
(the model config API), and keeps what the completion filled in on top of the model's own
config as the model's default configuration. Every trial's config.pbtxt is then complete and
is served as written (the launchers start Triton with ``--disable-auto-complete-config``).
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from tracker.errors import ModelError, TrackerError
from tracker.triton import model_config
from tracker.triton.formats.base import CONFIG_FILE, copy_model_dir

if TYPE_CHECKING:
    from tracker.triton.configuration import Configuration
    from tracker.triton.model_config import ModelConfig, ModelInfo
    from tracker.triton.server.base import TritonServer


def to_complete(conf: Configuration) -> tuple[str, ...]:
    """The models of ``conf`` whose configuration only Triton's auto-complete gives."""
    return tuple(name for name in conf.names if conf.info(name).auto_complete)


def merged(own: ModelConfig, completed: ModelConfig) -> ModelConfig:
    """``own`` (the model's partial config) with what the completion filled in: inputs,
    outputs, ``max_batch_size`` (the model's ``set_max_batch_size`` wins over the file's, as
    in the Python backend), the transaction policy, the backend and, when ``own`` names none,
    the scheduler. The rest of what Triton serves (instance groups, version policy, ...) is
    its normal default for any config, so it is left to Triton as for any model."""
    out = model_config.ModelConfig()
    out.CopyFrom(own)
    out.max_batch_size = completed.max_batch_size
    out.backend = out.backend or completed.backend
    for kind in ("input", "output"):
        out.ClearField(kind)
        getattr(out, kind).extend(getattr(completed, kind))
    if completed.HasField("model_transaction_policy"):
        out.model_transaction_policy.CopyFrom(completed.model_transaction_policy)
    scheduler = completed.WhichOneof("scheduling_choice")
    if own.WhichOneof("scheduling_choice") is None and scheduler is not None:
        getattr(out, scheduler).CopyFrom(getattr(completed, scheduler))
    return out


def complete(conf: Configuration, server: TritonServer) -> Configuration:
    """``conf`` with each model of :func:`to_complete` given the configuration Triton
    completed (:func:`merged`): those models are served once on ``server`` (a fresh launcher,
    started here with auto-complete on and stopped before returning). ``conf`` itself when
    no model needs it (nothing is started). ModelError when Triton cannot load a model or its
    completion lists no inputs or outputs."""
    names = to_complete(conf)
    if not names:
        return conf
    folder = Path(tempfile.mkdtemp(prefix="tracker-autocomplete-"))
    try:
        for name in names:
            _stage(conf.info(name), folder / name)
        loaded = _served(server, folder, names)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    infos = {name: _completed_info(conf.info(name), loaded[name]) for name in names}
    return dataclasses.replace(
        conf, models=tuple(infos.get(str(m.config.name), m) for m in conf.models))


def _stage(info: ModelInfo, model_dir: Path) -> None:
    copy_model_dir(Path(info.model_file), model_dir)
    model_config.save(info.config, model_dir / CONFIG_FILE)


def _served(server: TritonServer, repository: Path, names: tuple[str, ...]
            ) -> dict[str, ModelConfig]:
    had = getattr(server, "auto_complete", False)
    if hasattr(server, "auto_complete"):
        server.auto_complete = True
    try:
        server.start(repository)
        with server.client() as client:
            return {name: client.model_config(name) for name in names}
    except TrackerError as err:
        raise ModelError(f"Triton could not complete the configuration of "
                         f"{', '.join(names)} (served once with auto-complete on to read it): "
                         f"{err}") from err
    finally:
        server.stop()
        if hasattr(server, "auto_complete"):
            server.auto_complete = had


def _completed_info(info: ModelInfo, completed: ModelConfig) -> ModelInfo:
    cfg = merged(info.config, completed)
    for kind in ("input", "output"):
        if not getattr(cfg, kind):
            raise ModelError(
                f"model {cfg.name!r}: Triton's auto-complete gave it no {kind}s (was the "
                f"server started with --disable-auto-complete-config, or does its "
                f"auto_complete_config add none?); list them in its {CONFIG_FILE}")
    return dataclasses.replace(info, config=cfg, supports_batching=cfg.max_batch_size > 0,
                               auto_complete=False, completed=True)


def space_problems(space: Mapping[str, object], conf: Configuration) -> list[str]:
    """Why a ``max_batch_size`` knob of ``space`` is refused for a model Triton completed:
    its auto_complete_config sets the value (``set_max_batch_size``), and a Triton that
    auto-completes (its default) serves that value whatever config.pbtxt says, or refuses a
    larger one; so a trial's other value would be measured here and not served there."""
    problems = []
    for key, knob in space.items():
        model, _, path = key.rpartition("/") if "/" in key else (conf.entry, "", key)
        if path != "max_batch_size" or model not in conf.names:
            continue
        info = conf.info(model)
        own = info.config.max_batch_size
        choices = knob if isinstance(knob, list) else [knob]
        if info.completed and any(v != own for v in choices):
            problems.append(
                f"search.space.{key}: model {model!r} sets max_batch_size {own} in its "
                "auto_complete_config, and a Triton that auto-completes (its default) serves "
                f"{own} whatever config.pbtxt says (a larger one fails to load), so it is "
                f"not a knob here, but got {knob}; remove it (or give the model a full "
                "config.pbtxt)")
    return problems
