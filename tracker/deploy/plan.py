"""What a switch does to each model of a configuration (:mod:`tracker.deploy.switch`): the
model's source, its production config, the versions it serves now, how it is served, and the
journal's :class:`~tracker.deploy.journal.Undo` for it, plus the two steps every phase uses
on a model folder: staging a version's files and loading it with a fallback to the
onnxruntime shim."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tracker.deploy import steps
from tracker.deploy.journal import Undo
from tracker.tracking.flavor import CONFIG_FILE, TritonModelDir
from tracker.triton import model_config

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

    from tracker.deploy.publish import DeploymentState, Publisher


@dataclass
class Model:
    """One model of the switch."""

    name: str  #: the name it serves as
    source: TritonModelDir
    production: ModelConfig
    previous: tuple[int, ...]  #: versions READY before, other than the new one
    modes: list[str]  #: how it can be served, the first one tried first
    entry: bool
    undo: Undo
    served: ModelConfig | None = None  #: the config it serves with (name, no version policy)


def plan(pub: Publisher, name: str, source: TritonModelDir, version: int,
         state: DeploymentState | None, *, entry: bool) -> Model:
    production = steps.production_of(source, name)
    config_path = pub.model_dir(name) / CONFIG_FILE
    ready = list(state.ready_versions if state else ())
    previous = tuple(v for v in ready if v != version)
    undo = Undo(name=name, existed=pub.model_dir(name).exists(),
                old_text=config_path.read_text() if config_path.is_file() else None,
                serving_before=ready)
    return Model(name=name, source=source, production=production, previous=previous,
                 modes=pub.modes(name, production, previous), entry=entry, undo=undo)


def stage_into(model_dir: Path, model: Model, version: int, undo: Undo,
               journal_save: Callable[[], None]) -> ModelConfig:
    """Stage ``model``'s version files in ``model_dir`` as ``<version>/``, served the way
    ``model.modes[0]`` says; returns the served config. A replaced folder of the same number
    is kept aside (``undo.aside``) until the deployment commits."""
    for left in model_dir.glob(f"{steps.STAGING}*") if model_dir.is_dir() else []:
        if str(left) not in undo.staging and str(left) != undo.aside:
            shutil.rmtree(left, ignore_errors=True)  # a crashed deployment's leftovers
    existed = (model_dir / str(version)).exists()
    staging, served = steps.stage(model_dir, version, model.source, model.production,
                                  model.modes[0])
    undo.staging.append(str(staging))
    journal_save()
    version_dir = model_dir / str(version)
    if existed and undo.aside is None:
        aside = model_dir / f"{steps.STAGING}old-{version}"
        shutil.rmtree(aside, ignore_errors=True)
        undo.aside = str(aside)
        journal_save()
        version_dir.rename(aside)
    elif existed:
        shutil.rmtree(version_dir)  # a staging of this deployment, replaced by the shim's
    else:
        undo.created = True
        journal_save()
    staging.rename(version_dir)
    undo.staging.remove(str(staging))
    journal_save()
    return served


def load_with_fallback(pub: Publisher, model: Model, load_name: str, version: int,
                       restage: Callable[[], None], step: str) -> None:
    """Load ``load_name`` and wait for ``version`` to be READY; an ONNX model on a server
    without the onnxruntime backend is staged again for the shim (``serving: auto``)."""
    while True:
        try:
            pub.load(load_name, step)
            steps.wait_ready(pub.client, load_name, version, pub.ready_timeout_s,
                             step=f"waiting for {load_name!r} to be READY")
            return
        except steps.StepFailed as fail:
            if not (model.modes[0] == "onnxruntime" and len(model.modes) > 1
                    and steps.MISSING_BACKEND in fail.message):
                raise
        pub.log(f"{model.name}: the server has no onnxruntime backend; serving version "
                f"{version} through the Python backend")
        model.modes = model.modes[1:]
        restage()


def write_config(model_dir: Path, cfg: ModelConfig) -> None:
    steps.write_atomic(model_dir / CONFIG_FILE, model_config.dumps(cfg))
