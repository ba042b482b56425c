"""The candidate checked where no client reaches it: every model of the new version is loaded
in the serving Triton under a shadow name (``<model>.candidate``), an ensemble's steps
pointing at the shadows of its composing models, and checked there: READY, one request per
entry (when its inputs are numbers; streamed to a decoupled model, a whole sequence to a
stateful one: :mod:`tracker.deploy.first_request`), and the study's output check
(:mod:`tracker.deploy.verify`, on the first entry, whose probes the study made; a decoupled
model's probes stream, a stateful model's are whole sequences). Clients call the served
names, so until the switch the version that served before answers every request.

One exception: a model that a BLS entry calls from its code (a composing model no ensemble
step of the configuration names) is called by its own name, which the shadow cannot change;
such a model is loaded beside its serving version under its own name before the check, as
the switch would, and the BLS entry is checked under its shadow name.

The shadows are unloaded and their folders removed after the check, pass or fail; the
journal names each shadow while it exists, so an interrupted check leaves none behind.
"""

from __future__ import annotations

import contextlib
import hashlib
import shutil
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tritonclient.grpc import model_config_pb2

from tracker import lifecycle
from tracker.deploy import steps
from tracker.deploy.plan import Model, load_with_fallback, stage_into, write_config
from tracker.errors import ServerError
from tracker.triton.formats.ensemble import PLATFORM, renamed

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

    from tracker.deploy.journal import Journal
    from tracker.deploy.publish import Publisher

SUFFIX = ".candidate"
_MAX_NAME = 128
Check = Callable[[Any, str, int], None]


def shadow_name(name: str) -> str:
    """``<name>.candidate``, shortened with a digest when that would pass 128 characters."""
    if len(name) + len(SUFFIX) <= _MAX_NAME:
        return name + SUFFIX
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{name[:_MAX_NAME - len(SUFFIX) - 9]}-{digest}{SUFFIX}"


def called_by_name(plan: list[Model]) -> set[str]:
    """The composing models a BLS entry calls by name: not entries, named by no ensemble."""
    stepped = {step.model_name for m in plan
               if m.production.platform == PLATFORM
               for step in m.production.ensemble_scheduling.step}
    return {m.name for m in plan if not m.entry and m.name not in stepped}


def _numeric_inputs(cfg: ModelConfig) -> bool:
    return all(i.data_type != model_config_pb2.TYPE_STRING for i in cfg.input)


def check(pub: Publisher, plan: list[Model], version: int, journal: Journal,
          beside: Callable[[Model], None], output_check: Check | None,
          first: str | None = None) -> None:
    """Load the shadows (``beside`` loads a model called by name under its own name), check
    them, and remove them. Each entry gets the check's request (one inference, a streamed
    one for a decoupled model, a whole sequence for a stateful one:
    :mod:`tracker.deploy.first_request`); ``output_check`` asks ``first`` (the first entry,
    served as the deployment's name: the one the study's probes were made for; default the
    first entry in ``plan``). Raises :class:`~tracker.deploy.steps.StepFailed`."""
    by_name = called_by_name(plan)
    shadows = {m.name: shadow_name(m.name) for m in plan if m.name not in by_name}
    try:
        for model in plan:  # load order: composing models first
            if model.name in by_name:
                beside(model)
            else:
                _load_shadow(pub, model, version, journal, shadows)
        for model in plan:
            assert model.served is not None
            if model.entry and model.name in shadows and _numeric_inputs(model.served):
                steps.check_inference(pub.client, shadows[model.name], version, model.served)
        checked = first or next(m.name for m in plan if m.entry)
        if output_check is not None:
            output_check(pub.client, shadows.get(checked, checked), version)
    finally:
        with lifecycle.held():
            remove(pub, plan, journal)


def _load_shadow(pub: Publisher, model: Model, version: int, journal: Journal,
                 shadows: dict[str, str]) -> None:
    shadow = shadows[model.name]
    shadow_dir = pub.model_dir(shadow)
    if shadow_dir.exists():  # a shadow no journal names: left by a crash before this
        with contextlib.suppress(ServerError):
            pub.client.unload_model(shadow, wait_s=10)
        shutil.rmtree(shadow_dir, ignore_errors=True)
    model.undo.shadow = shadow
    journal.save(pub.repository)

    def restage() -> None:
        from tracker.deploy.journal import Undo

        scratch = Undo(name=shadow, existed=False, old_text=None, serving_before=[])
        model.served = stage_into(shadow_dir, model, version, scratch,
                                  lambda: journal.save(pub.repository))
        write_config(shadow_dir, renamed(steps.with_policy(model.served, shadow, [version]),
                                         shadow, shadows, any_version=True))

    restage()
    load_with_fallback(pub, model, shadow, version, restage,
                       f"loading {model.name!r} as {shadow!r} to check it")


def remove(pub: Publisher, plan: list[Model], journal: Journal | None) -> None:
    """Unload every shadow of ``plan`` and remove its folder (what exists of them)."""
    for model in reversed(plan):
        shadow = model.undo.shadow
        if shadow is None:
            continue
        with contextlib.suppress(ServerError):
            pub.client.unload_model(shadow, wait_s=10)
        shutil.rmtree(pub.model_dir(shadow), ignore_errors=True)
        model.undo.shadow = None
        if journal is not None:
            journal.save(pub.repository)
